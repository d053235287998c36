package sandbox

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	v8 "rogchap.com/v8go"

	"github.com/retainer-gw/retainer/program"
)

// reportLatencies adds p50/p99 to a benchmark's output.
func reportLatencies(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
}

func benchComputation(b *testing.B, prewarm int, compiled bool) {
	e := New(Config{Prewarm: prewarm, CompiledRuntime: compiled})
	defer e.Shutdown()
	time.Sleep(200 * time.Millisecond) // let the prewarm pool fill
	job := program.Job{Program: program.Program{Code: "async () => 1 + 1"}}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		out, err := e.Run(context.Background(), job)
		lat = append(lat, time.Since(start))
		if err != nil || string(out.Result) != "2" {
			b.Fatal(err, string(out.Result))
		}
		if prewarm > 0 {
			// Pace runs to the refill rate so each one can find a warm
			// isolate, as under a production load below the pool's capacity.
			b.StopTimer()
			for len(e.warm) < prewarm {
				time.Sleep(50 * time.Microsecond)
			}
			b.StartTimer()
		}
	}
	reportLatencies(b, lat)
}

// go test ./sandbox -run ^$ -bench Computation: isolates restored from the
// startup snapshot, and (compiled) isolates that install the runtime from
// its bundle, side by side.
func BenchmarkComputationPrewarmed(b *testing.B) {
	bothRuntimes(b, func(b *testing.B, c bool) { benchComputation(b, 4, c) })
}
func BenchmarkComputationCold(b *testing.B) {
	bothRuntimes(b, func(b *testing.B, c bool) { benchComputation(b, 0, c) })
}

func bothRuntimes(b *testing.B, f func(b *testing.B, compiled bool)) {
	b.Run("snapshot", func(b *testing.B) { f(b, false) })
	b.Run("compiled", func(b *testing.B) { f(b, true) })
}

// go test ./sandbox -run ^$ -bench InvokeTrivial
func BenchmarkInvokeTrivial(b *testing.B) {
	benchInvoke(b, `async () => ({ fetch() { return new Response('ok') } })`, "https://x.test/")
}

// BenchmarkInvokeJSON answers Response.json, which most handlers do
// (go test ./sandbox -run '^$' -bench 'InvokeTrivial|InvokeJSON').
func BenchmarkInvokeJSON(b *testing.B) {
	benchInvoke(b, `async () => { let served = 0; return { fetch() { return Response.json({id: '42', served: ++served}) } } }`, "https://x.test/")
}

// BenchmarkInvokeURLCounter is the handler of the performance issue: it
// parses its URL and reads a query parameter (go test ./sandbox -run '^$'
// -bench InvokeURLCounter -benchtime 3000x).
func BenchmarkInvokeURLCounter(b *testing.B) {
	benchInvoke(b, `async () => { let served = 0; return { fetch(request) {
		const id = new URL(request.url).searchParams.get('id');
		return Response.json({id, served: ++served});
	} } }`, "https://shop.apps.example.com/items?id=42&sort=asc")
}

// BenchmarkInvokeBrowserHeaders is the URL counter asked with the
// headers a browser sends (the gateway passes them on): "url" never reads
// them, "reads-one" reads one (go test ./sandbox -run '^$' -bench
// InvokeBrowserHeaders -benchtime 5000x).
func BenchmarkInvokeBrowserHeaders(b *testing.B) {
	headers := [][2]string{{"host", "shop.apps.example.com"}, {"user-agent", "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"},
		{"accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}, {"accept-language", "en-US,en;q=0.5"},
		{"accept-encoding", "gzip, deflate, br, zstd"}, {"referer", "https://shop.apps.example.com/"}, {"cookie", "session=abc123; theme=dark"},
		{"upgrade-insecure-requests", "1"}, {"sec-fetch-dest", "document"}, {"sec-fetch-mode", "navigate"}, {"sec-fetch-site", "same-origin"},
		{"priority", "u=0, i"}, {"x-forwarded-for", "203.0.113.7"}}
	for _, c := range []struct{ name, read string }{{"url", ""}, {"reads-one", "request.headers.get('accept-language'); "}} {
		b.Run(c.name, func(b *testing.B) {
			benchInvokeWith(b, `async () => { let served = 0; return { fetch(request) { `+c.read+`
				const id = new URL(request.url).searchParams.get('id');
				return Response.json({id, served: ++served});
			} } }`, program.NewWireRequest("GET", "https://shop.apps.example.com/items?id=42&sort=asc", headers, nil))
		})
	}
}

// BenchmarkInvokeURLShapes is a handler building the URLs the canonical
// fast path refuses (webapi/url/url-fast.js): against request.url as its base, an
// upper-case host, an IP address; json is the same handler building none
// (go test ./sandbox -run '^$' -bench InvokeURLShapes -benchtime 5000x).
func BenchmarkInvokeURLShapes(b *testing.B) {
	for _, c := range []struct{ name, body string }{
		{"json", `Response.json({id: '42', served: ++served})`},
		{"relative", `Response.json({id: new URL('/login?x=1', request.url).href, served: ++served})`},
		{"upper-case-host", `Response.json({id: new URL('https://Shop.example.com/items?id=42').href, served: ++served})`},
		{"ip", `Response.json({id: new URL('http://127.0.0.1:8080/items?id=42').href, served: ++served})`},
	} {
		b.Run(c.name, func(b *testing.B) {
			benchInvoke(b, `async () => { let served = 0; return { fetch(request) { return `+c.body+` } } }`, "https://shop.apps.example.com/items?id=42&sort=asc")
		})
	}
}

func benchInvoke(b *testing.B, code, url string) {
	benchInvokeWith(b, code, program.NewWireRequest("GET", url, nil, nil))
}

func benchInvokeWith(b *testing.B, code string, req program.WireRequest) {
	e := engine(b)
	id := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	if _, err := e.Run(context.Background(), program.Job{ID: id, RetainHandles: true, Program: program.Program{Code: code}}); err != nil {
		b.Fatal(err)
	}
	defer e.Close(id)
	for i := 0; i < 100; i++ { // the URL module's first touch is not the steady state
		e.Invoke(context.Background(), id, "fetch", req)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := e.Invoke(context.Background(), id, "fetch", req); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	reportLatencies(b, lat)
}

func rssMiB() float64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	pages, _ := strconv.Atoi(f[1])
	return float64(pages*os.Getpagesize()) / (1 << 20)
}

// go test ./sandbox -run ^$ -bench RSSPerRetainedIsolate -benchtime 1x
func BenchmarkRSSPerRetainedIsolate(b *testing.B) {
	e := New(Config{})
	defer e.Shutdown()
	const n = 1000
	runtime.GC()
	before := rssMiB()
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("rss-%d", i)
		if _, err := e.Run(context.Background(), program.Job{ID: id, RetainHandles: true, Program: program.Program{Code: `async () => { let n = 0; return { fetch() { return new Response(String(++n)) } } }`}}); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	after := rssMiB()
	b.ReportMetric((after-before)/n, "MiB/isolate")
	b.ReportMetric(after, "MiB-rss-total")
}

// go test ./sandbox -run ^$ -bench InvocationsStayFlat -benchtime 1x
func BenchmarkInvocationsStayFlat(b *testing.B) {
	flatInvocations(b, "flat", `async () => { let n = 0; return { fetch(r) { return Response.json({n: ++n, u: r.url}) } } }`, false)
}

// BenchmarkThrowingInvocationsStayFlat: every invocation meets a host
// function that throws (ThrowException makes a Value of its own) and then
// throws itself. Before install.go released that Value it leaked one a
// throw, +38 MiB per 50k invocations; since, flat (docs/decisions.md).
func BenchmarkThrowingInvocationsStayFlat(b *testing.B) {
	flatInvocations(b, "throwing", `async () => ({ async fetch(r) {
		try { await kv.get('x') } catch (e) {}
		throw new Error('boom ' + r.url);
	} })`, true)
}

func flatInvocations(b *testing.B, id, code string, throws bool) {
	// Its own engine: the shared test engine keeps every handle log line
	// (for the tests that read them), which would read as growth here.
	e := New(Config{})
	defer e.Shutdown()
	if _, err := e.Run(context.Background(), program.Job{ID: id, RetainHandles: true, Program: program.Program{Code: code}}); err != nil {
		b.Fatal(err)
	}
	defer e.Close(id)
	req := program.NewWireRequest("GET", "https://x.test/a?b=c", [][2]string{{"accept", "*/*"}}, nil)
	values := func() int {
		m := e.handles[id]
		ch := make(chan int, 1)
		m.submit(func() { ch <- m.ctx.RetainedValueCount() })
		return <-ch
	}
	// Warm up: V8's heap grows to its working size first.
	for i := 0; i < 50000; i++ {
		e.Invoke(context.Background(), id, "fetch", req)
	}
	runtime.GC()
	rss0, v0 := rssMiB(), values()
	var rssHalf float64
	for i := 0; i < 100000; i++ {
		if _, err := e.Invoke(context.Background(), id, "fetch", req); (err != nil) != throws {
			b.Fatal(err)
		}
		if i == 50000 {
			runtime.GC()
			rssHalf = rssMiB()
		}
	}
	runtime.GC()
	// The first half shows warm-up (V8's heap and Go's settle); the second
	// half is the steady state, which must stay flat.
	b.ReportMetric(rssHalf-rss0, "MiB-rss-growth-first-50k")
	b.ReportMetric(rssMiB()-rssHalf, "MiB-rss-growth-second-50k")
	b.ReportMetric(float64(values()-v0), "retained-values-growth")
}

// go test ./sandbox -run ^$ -bench 'ContextInstall|FirstTouch'
// BenchmarkContextInstall is an isolate with the runtime installed and
// nothing touched; BenchmarkBareContext is v8go's bare isolate and context.
func BenchmarkContextInstall(b *testing.B) {
	bothRuntimes(b, func(b *testing.B, compiled bool) {
		e := New(Config{CompiledRuntime: compiled})
		defer e.Shutdown()
		mustRunIn(b, e, "() => 0") // the code caches exist
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			m, err := newVM(e, 64, false)
			if err != nil {
				b.Fatal(err)
			}
			m.submit(func() { m.kill() })
			<-m.done
		}
	})
}

func BenchmarkBareContext(b *testing.B) {
	engine(b)
	for i := 0; i < b.N; i++ {
		iso := v8.NewIsolate()
		ctx := v8.NewContext(iso)
		ctx.Close()
		iso.Dispose()
	}
}

// First touch of the lazily installed globals, in a fresh isolate each time
// (the code cache is warm after the first).
func BenchmarkFirstTouch(b *testing.B) {
	for _, c := range []struct{ name, code string }{
		{"nothing", "() => 1"},
		{"URL", "() => new URL('https://a.test/x?y=1').searchParams.get('y')"},
		{"streams", "() => typeof new ReadableStream()"},
		{"Request+Response", "async () => { const r = new Response('x'); return [new Request('https://a.test/').method, await r.text()] }"},
		{"Response.json", "async () => Response.json({a: 1}).status"},
	} {
		b.Run(c.name, func(b *testing.B) {
			e := New(Config{})
			defer e.Shutdown()
			job := program.Job{Program: program.Program{Code: c.code}}
			for i := 0; i < b.N; i++ {
				if _, err := e.Run(context.Background(), job); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// go test ./sandbox -run ^$ -bench RuntimeInstall
// The runtime's own cost on a fresh context (host functions, bootstrap from
// the code cache, installation), without isolate creation and disposal.
func BenchmarkRuntimeInstall(b *testing.B) {
	e := engine(b)
	mustRun(b, "() => 0") // the bootstrap's code cache exists
	// One thread for creation and installation, as on an isolate's loop (a
	// V8 Locker taken on another thread costs a thread-state switch).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		m := bareIsolate(e)
		b.StartTimer()
		if err := m.installRuntime(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		freeBareVM(m)
		b.StartTimer()
	}
}

// go test ./sandbox -run ^$ -bench BesideRetained -benchtime 200x
// Computations and invocations in an engine that retains 1,000 handles:
// every mapping of theirs is in /proc/self/maps, which V8 reads whenever
// an isolate is entered on the process's main thread (mainthread.go).
func BenchmarkBesideRetained(b *testing.B) {
	e := New(Config{})
	defer e.Shutdown()
	for i := 0; i < 1000; i++ {
		id := fmt.Sprintf("beside-%d", i)
		if _, err := e.Run(context.Background(), program.Job{ID: id, RetainHandles: true, Program: program.Program{Code: `async () => { let n = 0; return { fetch() { return new Response(String(++n)) } } }`}}); err != nil {
			b.Fatal(err)
		}
	}
	req := program.NewWireRequest("GET", "https://a.test/", nil, nil)
	b.Run("computation", func(b *testing.B) {
		job := program.Job{Program: program.Program{Code: "async () => 1 + 1"}}
		lat := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			start := time.Now()
			if _, err := e.Run(context.Background(), job); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		reportLatencies(b, lat)
	})
	b.Run("idle-handle-invocation", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			id := fmt.Sprintf("beside-%d", i%1000)
			start := time.Now()
			if _, err := e.Invoke(context.Background(), id, "fetch", req); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		reportLatencies(b, lat)
	})
}

// BenchmarkInvokeAcrossHandles invokes n trivial handles in turn, one call
// at a time, so every call finds its isolate idle: what n adds over 1 is
// what a handle pays when other isolates ran since its last call (caches
// and TLB entries it must fetch again), the cost behind 32 handles of one
// worker serving less than one (docs/history/performance-log.md, round 8).
// go test ./sandbox -run '^$' -bench InvokeAcrossHandles -benchtime 3000x
func BenchmarkInvokeAcrossHandles(b *testing.B) {
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("handles=%d", n), func(b *testing.B) {
			e := engine(b)
			ids := make([]string, n)
			req := program.NewWireRequest("GET", "https://x.test/", nil, nil)
			for i := range ids {
				ids[i] = fmt.Sprintf("across-%d-%d", n, i)
				code := `async () => { let s = 0; return { fetch() { return Response.json({served: ++s}) } } }`
				if _, err := e.Run(context.Background(), program.Job{ID: ids[i], RetainHandles: true, Program: program.Program{Code: code}}); err != nil {
					b.Fatal(err)
				}
				defer e.Close(ids[i])
				for j := 0; j < 50; j++ {
					e.Invoke(context.Background(), ids[i], "fetch", req)
				}
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if _, err := e.Invoke(context.Background(), ids[i%n], "fetch", req); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			reportLatencies(b, lat)
		})
	}
}

// go test ./sandbox -run ^$ -bench IsolateCreate -benchtime 300x
// Making an isolate with the runtime ready (vm.create: the isolate, its
// context, the runtime restored from the snapshot or compiled and
// installed), without its disposal.
func BenchmarkIsolateCreate(b *testing.B) {
	bothRuntimes(b, func(b *testing.B, compiled bool) {
		e := New(Config{CompiledRuntime: compiled})
		defer e.Shutdown()
		mustRunIn(b, e, "() => 0") // the code caches exist
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var made time.Duration
		for i := 0; i < b.N; i++ {
			m := unmadeVM(e)
			start := time.Now()
			if err := m.create(); err != nil {
				b.Fatal(err)
			}
			made += time.Since(start)
			freeBareVM(m)
		}
		b.ReportMetric(float64(made.Microseconds())/float64(b.N), "µs-create")
	})
}
