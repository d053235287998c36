package child

import (
	"context"
	"encoding/binary"
	"io"
	"runtime"
	"syscall"
	"testing"

	"github.com/retainer-gw/retainer/kv/cache"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/sandbox"
	"github.com/retainer-gw/retainer/workers/wire"
)

// rawGateway is the gateway's side of a worker's link, written by hand:
// frames encoded once and answers read into one buffer, so what a
// benchmark counts is the worker's.
type rawGateway struct {
	l   *wire.Link
	buf []byte
}

func startWorker(tb testing.TB, code string) (*workerServer, *rawGateway) {
	gw, wk, err := wire.LinkPair()
	if err != nil {
		tb.Fatal(err)
	}
	w := &workerServer{}
	w.cache = cache.NewWorker(w.sendCacheBatch, w.answerTogether)
	w.conn = wire.NewConn(wk, wire.MaxGatewayFrame, wire.MaxGatewayFrame, w.handle, func(r string) { tb.Error("bad:", r) })
	w.conn.Take = w.takeInvoke
	w.conn.LimitCalls(wire.MaxCalls)
	w.hostSlots = make(chan struct{}, wire.MaxCalls-systemCalls)
	w.logs = make(chan wire.LogPost, 4096)
	go w.sendLogs()
	w.engine = sandbox.New(sandbox.Config{Prewarm: 1, OnLog: w.log, OnLost: w.lost, HostCall: w.hostCall, HostCallNow: w.cache.Now})
	w.conn.Start()
	tb.Cleanup(func() { gw.Close(); w.engine.Shutdown() })
	if _, err := w.engine.Run(context.Background(), program.Job{ID: "h1", RetainHandles: true, Program: program.Program{Code: code}}); err != nil {
		tb.Fatal(err)
	}
	return w, &rawGateway{l: gw, buf: make([]byte, 64<<10)}
}

func invokeFrame(id uint64, req wire.InvokeRequest) []byte {
	payload := req.EncodeFrame()
	path := wire.PathInvoke
	f := make([]byte, 4+11+len(path)+len(payload))
	binary.BigEndian.PutUint32(f, uint32(11+len(path)+len(payload)))
	binary.BigEndian.PutUint64(f[4:], id)
	f[12] = 1
	binary.BigEndian.PutUint16(f[13:], uint16(len(path)))
	copy(f[15:], path)
	copy(f[15+len(path):], payload)
	return f
}

// roundTrip writes frame and reads its answer's payload.
func (g *rawGateway) roundTrip(tb testing.TB, frame []byte) []byte {
	if _, err := g.l.Write(frame); err != nil {
		tb.Fatal(err)
	}
	if _, err := io.ReadFull(g.l, g.buf[:4]); err != nil {
		tb.Fatal(err)
	}
	n := int(binary.BigEndian.Uint32(g.buf))
	if _, err := io.ReadFull(g.l, g.buf[:n]); err != nil {
		tb.Fatal(err)
	}
	return g.buf[11:n]
}

const trivialHandler = "let served = 0;\nexport default { fetch() { return Response.json({served: ++served}) } }\n"

func benchRequest() wire.InvokeRequest {
	return wire.InvokeRequest{ID: "h1", Name: "fetch", Request: program.NewWireRequest("GET", "http://tenant-1.apps.localhost/items?id=42&sort=asc",
		[][2]string{{"host", "tenant-1.apps.localhost"}, {"user-agent", "Go-http-client/1.1"}, {"accept-encoding", "gzip"}}, nil)}
}

// BenchmarkWorkerInvoke is the trivial handler's invocation in a worker,
// one at a time, its frames written and read by hand: what it reports
// is the worker's own (docs/performance.md, "A worker's bytes a
// request"): go test ./sandbox/child -run '^$' -bench WorkerInvoke
// -benchtime 20000x [-memprofile m.out -memprofilerate 1].
func BenchmarkWorkerInvoke(b *testing.B) {
	_, g := startWorker(b, trivialHandler)
	frame := invokeFrame(1, benchRequest())
	for i := 0; i < 200; i++ {
		g.roundTrip(b, frame)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	c0 := processCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g.roundTrip(b, frame)
	}
	b.StopTimer()
	c1 := processCPU()
	runtime.ReadMemStats(&m1)
	// The process's CPU: the worker's, and the few system calls of the
	// hand-written gateway side.
	b.ReportMetric(float64(c1-c0)/float64(b.N), "cpu-ns/req")
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/float64(b.N), "go-B/req")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(b.N), "go-allocs/req")
}

// processCPU is the process's user and system CPU so far, in ns.
func processCPU() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
