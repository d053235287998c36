package workers

import (
	"context"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/workers/wire"
)

func reportLatencies(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
}

func benchPool(b *testing.B, cfg Config) *Pool {
	pool, err := Start(testModes(cfg))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Shutdown)
	return pool
}

// go test ./workers -run ^$ -bench InvokeAcrossBoundary
func BenchmarkInvokeAcrossBoundary(b *testing.B) {
	invokeBench(b, benchPool(b, Config{Workers: 1}))
}

func invokeBench(b *testing.B, pool *Pool) {
	if _, err := pool.Run(context.Background(), program.Job{ID: "h", RetainHandles: true, Program: program.Program{Code: `async () => ({ fetch() { return new Response('ok') } })`}}); err != nil {
		b.Fatal(err)
	}
	req := program.NewWireRequest("GET", "https://x.test/", nil, nil)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := pool.Invoke(context.Background(), "h", "fetch", req); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	reportLatencies(b, lat)
}

// go test ./workers -run ^$ -bench ComputationThroughPool
func BenchmarkComputationThroughPool(b *testing.B) {
	pool := benchPool(b, Config{Workers: 1, Engine: wire.EngineConfig{Prewarm: 4}})
	time.Sleep(300 * time.Millisecond)
	job := program.Job{Program: program.Program{Code: "async () => 1 + 1"}}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := pool.Run(context.Background(), job); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		b.StopTimer()
		time.Sleep(2 * time.Millisecond) // the refill rate of the warm pool
		b.StartTimer()
	}
	reportLatencies(b, lat)
}

// go test ./workers -run ^$ -bench WorkerReplacement -benchtime 10x
func BenchmarkWorkerReplacement(b *testing.B) {
	pool := benchPool(b, Config{Workers: 1})
	job := program.Job{Program: program.Program{Code: "async () => 1"}}
	lat := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		pid := pool.Status()[0].PID
		start := time.Now()
		syscall.Kill(pid, syscall.SIGKILL)
		for {
			if _, err := pool.Run(context.Background(), job); err == nil && pool.Status()[0].PID != pid {
				break
			}
			time.Sleep(time.Millisecond)
		}
		lat = append(lat, time.Since(start))
	}
	reportLatencies(b, lat)
}

// go test ./workers -run ^$ -bench PingAcrossBoundary
// An empty call (close of an unknown id): the protocol's own round trip.
func BenchmarkPingAcrossBoundary(b *testing.B) {
	pool := benchPool(b, Config{Workers: 1})
	p := pool.workers[0]
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := time.Now()
		var rep wire.CloseReply
		p.post(context.Background(), wire.PathClose, wire.CloseRequest{ID: "none"}, &rep)
		lat = append(lat, time.Since(s))
	}
	reportLatencies(b, lat)
}

// go test ./workers -run ^$ -bench InvokeThirtyTwoAtOnce -benchmem
// One handle, 32 callers at once (bench/loadgen -c 32's shape): the
// gateway's work a call with the window and the turns in play.
func BenchmarkInvokeThirtyTwoAtOnce(b *testing.B) {
	pool := benchPool(b, Config{Workers: 1})
	if _, err := pool.Run(context.Background(), program.Job{ID: "h", RetainHandles: true, Program: program.Program{Code: `async () => ({ fetch() { return new Response('ok') } })`}}); err != nil {
		b.Fatal(err)
	}
	req := program.NewWireRequest("GET", "https://x.test/", nil, nil)
	b.SetParallelism(16) // × GOMAXPROCS 2
	b.ResetTimer()
	cpu := ownCPU()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := pool.Invoke(context.Background(), "h", "fetch", req); err != nil {
				b.Error(err)
				return
			}
		}
	})
	// The gateway's side alone: this process's CPU, not its worker's.
	b.ReportMetric(float64((ownCPU()-cpu).Nanoseconds())/float64(b.N), "gateway-cpu-ns/op")
}

// ownCPU is this process's CPU time so far (user and system).
func ownCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
