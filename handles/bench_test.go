package handles

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/workers"
)

func p50(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

func benchGateway(b *testing.B, pcfg workers.Config) (*gateway, string) {
	path := filepath.Join(b.TempDir(), "registry.db")
	g := start(&testing.T{}, path, &fakeClock{now: time.Now()}, &eventLog{}, pcfg)
	b.Cleanup(g.stop)
	return g, path
}

// go test ./handles -run ^$ -bench RegistryInvoke
// Compare with worker's BenchmarkInvokeAcrossBoundary: the difference is the
// registry's overhead (lookup, FIFO, counters).
func BenchmarkRegistryInvoke(b *testing.B) {
	g, _ := benchGateway(b, workers.Config{Workers: 1})
	reg := g.store.Registry("apps", RegistryConfig{})
	res, err := reg.Execute(context.Background(), "t", ExecRequest{Program: program.Program{Code: `async () => ({ fetch() { return new Response('ok') } })`}, RetainHandles: true})
	if err != nil {
		b.Fatal(err)
	}
	req := program.NewWireRequest("GET", "https://x/", nil, nil)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := time.Now()
		if _, err := reg.Invoke(context.Background(), "t", res.ExecutionID, "fetch", req); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(s))
	}
	b.ReportMetric(float64(p50(lat).Microseconds()), "p50-µs")
}

// go test ./handles -run ^$ -bench Deploy
func BenchmarkDeploy(b *testing.B) {
	g, _ := benchGateway(b, workers.Config{Workers: 1, IsolatesPerWorker: 100000})
	reg := g.store.Registry("apps", RegistryConfig{MaxHandlesPerTenant: 1 << 30})
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := time.Now()
		if _, err := reg.Execute(context.Background(), "t", ExecRequest{Program: program.Program{Code: counterProgram}, RetainHandles: true}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(s))
	}
	b.ReportMetric(float64(p50(lat).Microseconds()), "p50-µs")
}

// go test ./handles -run ^$ -bench FirstRequestAfterRestart -benchtime 20x
func BenchmarkFirstRequestAfterRestart(b *testing.B) {
	path := filepath.Join(b.TempDir(), "registry.db")
	clock := &fakeClock{now: time.Now()}
	g := start(&testing.T{}, path, clock, &eventLog{}, workers.Config{Workers: 1})
	reg := g.store.Registry("apps", RegistryConfig{})
	res, _ := reg.Execute(context.Background(), "t", ExecRequest{Program: program.Program{Code: counterProgram}, RetainHandles: true})
	req := program.NewWireRequest("GET", "https://x/", nil, nil)
	var first, warm []time.Duration
	for i := 0; i < b.N; i++ {
		g.stop()
		g = start(&testing.T{}, path, clock, &eventLog{}, workers.Config{Workers: 1})
		reg = g.store.Registry("apps", RegistryConfig{})
		s := time.Now()
		if _, err := reg.Invoke(context.Background(), "t", res.ExecutionID, "fetch", req); err != nil {
			b.Fatal(err)
		}
		first = append(first, time.Since(s))
		s = time.Now()
		reg.Invoke(context.Background(), "t", res.ExecutionID, "fetch", req)
		warm = append(warm, time.Since(s))
	}
	g.stop()
	b.ReportMetric(float64(p50(first).Microseconds()), "first-p50-µs")
	b.ReportMetric(float64(p50(warm).Microseconds()), "warm-p50-µs")
	b.ReportMetric(float64((p50(first) - p50(warm)).Microseconds()), "added-µs")
}

// go test ./handles -run ^$ -bench ParkAndRebuild -benchtime 1x
func BenchmarkParkAndRebuild(b *testing.B) {
	g, _ := benchGateway(b, workers.Config{Workers: 2, IsolatesPerWorker: 50})
	reg := g.store.Registry("apps", RegistryConfig{MaxHandlesPerTenant: 2000})
	const n = 1000
	ids := make([]string, n)
	start := time.Now()
	for i := range ids {
		res, err := reg.Execute(context.Background(), "t", ExecRequest{Program: program.Program{Code: counterProgram}, RetainHandles: true})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = res.ExecutionID
		g.clock.Add(time.Millisecond)
	}
	deployAll := time.Since(start)
	req := program.NewWireRequest("GET", "https://x/", nil, nil)
	start = time.Now()
	for _, id := range ids {
		if _, err := reg.Invoke(context.Background(), "t", id, "fetch", req); err != nil {
			b.Fatal(fmt.Errorf("%s: %w", id, err))
		}
		g.clock.Add(time.Millisecond)
	}
	rebuildAll := time.Since(start)
	b.ReportMetric(deployAll.Seconds(), "deploy-1000-s")
	b.ReportMetric(rebuildAll.Seconds(), "rebuild-1000-s")
}
