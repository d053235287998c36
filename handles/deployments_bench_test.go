package handles

import (
	"context"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/workers"
)

// go test ./handles -run ^$ -bench ServeRoute
// A split route's pick (a map lookup, a cookie scan, one random number)
// against a plain route's, through the registry's data-plane entry.
func BenchmarkServeRoute(b *testing.B) {
	g, _ := benchGateway(b, workers.Config{Workers: 1})
	reg := g.store.Registry("apps", RegistryConfig{})
	deployOK := func() string {
		res, err := reg.Execute(context.Background(), "t", ExecRequest{Program: program.Program{Code: `async () => ({ fetch() { return new Response('ok') } })`}, RetainHandles: true})
		if err != nil {
			b.Fatal(err)
		}
		return res.ExecutionID
	}
	a, c := deployOK(), deployOK()
	if _, err := reg.BindRoute("t", "plain", a); err != nil {
		b.Fatal(err)
	}
	if _, err := reg.BindSplit("t", "split", []Share{{a, 50}, {c, 50}}); err != nil {
		b.Fatal(err)
	}
	req := program.NewWireRequest("GET", "https://x/", [][2]string{{"cookie", "theme=dark"}}, nil)
	for _, route := range []string{"plain", "split"} {
		b.Run(route, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for i := 0; i < b.N; i++ {
				s := time.Now()
				if _, err := reg.Serve(context.Background(), route, ResolveRoutes, req); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(s))
			}
			b.ReportMetric(float64(p50(lat).Microseconds()), "p50-µs")
		})
	}
}

// go test ./handles -run ^$ -bench ParkedDeployment -benchtime 20x
// The first request of a deployment the idle sweep parked: its rebuild.
func BenchmarkParkedDeployment(b *testing.B) {
	g, _ := benchGateway(b, workers.Config{Workers: 1})
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Minute})
	res, err := reg.Execute(context.Background(), "t", ExecRequest{Program: program.Program{Code: counterProgram}, RetainHandles: true})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := reg.BindRoute("t", "shop", res.ExecutionID); err != nil {
		b.Fatal(err)
	}
	req := program.NewWireRequest("GET", "https://x/", nil, nil)
	var first, warm []time.Duration
	for i := 0; i < b.N; i++ {
		g.clock.Add(2 * time.Minute)
		g.store.SweepIdle()
		if g.pool.Holds(res.ExecutionID) {
			b.Fatal("the idle deployment was not parked")
		}
		s := time.Now()
		if _, err := reg.Serve(context.Background(), "shop", ResolveRoutes, req); err != nil {
			b.Fatal(err)
		}
		first = append(first, time.Since(s))
		s = time.Now()
		reg.Serve(context.Background(), "shop", ResolveRoutes, req)
		warm = append(warm, time.Since(s))
	}
	b.ReportMetric(float64(p50(first).Microseconds()), "first-p50-µs")
	b.ReportMetric(float64(p50(warm).Microseconds()), "warm-p50-µs")
}
