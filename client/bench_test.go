package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/client"
)

// reportPercentiles adds p50 and p99 of the iterations' durations.
func reportPercentiles(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds()), "p99-µs")
}

// One caller-tool call through the socket: the program awaits the tool in
// a loop, so the time between two arrivals at the host is one round trip
// host → gateway → worker → isolate → worker → gateway → host (the isolate's
// clock is coarse, the host's is not).
func BenchmarkCallerToolRoundTrip(b *testing.B) {
	e, err := client.Dial(context.Background(), gatewayURL, client.Options{Token: token("bench-tenant")})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	var last time.Time
	var ds []time.Duration
	echo := client.Provider{Name: "t", Tools: map[string]client.ToolFunc{
		"echo": func(_ context.Context, args []json.RawMessage) (any, error) {
			now := time.Now()
			if string(args[0]) != "0" {
				ds = append(ds, now.Sub(last))
			}
			last = now
			return args[0], nil
		},
	}}
	const perRun = 200
	b.ResetTimer()
	for done := 0; done < b.N; done += perRun {
		_, err := e.Execute(context.Background(), client.Request{Providers: []client.Provider{echo}, TimeoutMs: 30000, Code: `async () => {
			for (let i = 0; i < 200; i++) await t.echo(i);
		}`})
		if err != nil {
			b.Fatal(err)
		}
	}
	reportPercentiles(b, ds)
}

// A trivial computation over the socket, sequential.
func BenchmarkExecuteSocket(b *testing.B) {
	e, err := client.Dial(context.Background(), gatewayURL, client.Options{Token: token("bench-tenant")})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		if _, err := e.Execute(context.Background(), client.Request{Code: "async () => 1 + 1"}); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t))
	}
	reportPercentiles(b, ds)
}

// The same computation as POST /executions, sequential, keep-alive.
func BenchmarkExecuteHTTP(b *testing.B) {
	tok := token("bench-tenant")
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		req, _ := http.NewRequest(http.MethodPost, apiURL+"/executions", strings.NewReader(`{"code":"async () => 1 + 1"}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		readAll(res)
		res.Body.Close()
		if res.StatusCode != 200 {
			b.Fatal(res.Status)
		}
		ds = append(ds, time.Since(t))
	}
	reportPercentiles(b, ds)
}
