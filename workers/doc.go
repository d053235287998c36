// Package workers puts the sandbox engine behind a process boundary: it is
// the gateway's side, the Pool of worker processes. The worker process
// itself is package child, and what the two say to each other is package
// wire.
//
// The gateway never hosts V8. A Pool starts worker processes (the gateway's
// own binary re-executed through /proc/self/exe in a worker mode, with an
// empty environment) and talks to each over its link (a socketpair each
// way: wire.Link says why) carrying
// length-prefixed request/response frames in both directions (wire's
// rpc.go says why not h2c): the worker serves the gateway's calls (hello, run, invoke,
// close); the gateway serves the worker's requests (handle logs, lost
// isolates, and the kv, fetch and tool calls of its programs). A worker
// exits when its connection closes, and is killed with its parent
// (PR_SET_PDEATHSIG).
//
// A worker is the failure domain: a V8 abort, a native crash or a hard kill
// ends one worker; its in-flight calls fail with WORKER_CRASHED, the Pool
// starts a replacement with backoff, and it reports which retained isolates
// were lost and which were running (the suspects) so the handles layer can
// rebuild or close them.
//
// Everything a worker says is hostile input: bodies are capped, and ids are
// checked against the Pool's own record of which isolates live in which
// worker; a worker that answers garbage or names an isolate it does not hold
// is killed.
//
// Workers harden themselves before serving (child's harden_linux.go):
// no_new_privs, a seccomp filter, Landlock, rlimits, and V8 --jitless
// without WebAssembly unless enabled.
//
// Where workers run is the Pool's too (cpus.go): on one CPU each while one
// is enough, placed and moved between CPUs by the gateway.
//
// The package deliberately knows nothing of tenants, registries or HTTP
// routing; ids are opaque strings the caller mints.
package workers
