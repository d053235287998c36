// Package sandbox runs programs in V8 isolates (rogchap.com/v8go 0.9,
// which links V8 10.9) inside the current process: the engine a worker
// process hosts.
//
// A run compiles a Program (an expression evaluating to a function, maybe
// preceded by imports resolved with esbuild against the request's modules,
// or a Workers-style module) into a fresh isolate with the web runtime
// installed (js/runtime/*.js, one file a web API, plus lazily loaded npm bundles in js/gen),
// calls it, awaits it on the isolate's event loop (microtasks, host timers,
// host calls) and answers its value as JSON. A program that answers a
// request handler can be retained: its isolate stays alive under an id and
// serves Invoke one call at a time, in arrival order.
//
// Bounds are enforced from outside the isolate: a watchdog terminates a run
// at its timeout (guarded by the run's id, so a late one cannot reach the
// next run), and a near-heap-limit callback (heaplimit.cc, our own cgo
// file) terminates a run at its memory bound before V8 would abort the
// process. A bound hit disposes the isolate.
//
// Ownership: each isolate is owned by one goroutine, its loop (vm.go);
// every V8 call, Value.Release included, happens there.
// Its state is in sub-states that own their fields, one type a topic
// file: jobQueue (queue.go), timers, hostCalls (hostcall.go), streamSet
// (stream.go), watchdog (bounds.go, cancel.go, visitor.go), busyPeriod
// (concurrent.go), entryPoints and sessions (install.go), uncached
// (codecache.go); the vm composes them and makes the calls into
// JavaScript.
//
// Caveats: V8 can still abort the process on allocations far past the
// bound, and some builtins ignore termination; the worker process around
// the engine (workers) is the failure domain for those. The package
// grants nothing: kv, fetch and tools are host calls (Config.HostCall)
// that the caller checks. It knows nothing of tenants, routing or HTTP.
package sandbox
