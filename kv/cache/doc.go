// Package cache is kv's cache in the workers, both sides of it: the
// worker's (worker.go: reads answered at once; queue.go: writes answered
// at once and queued; settle.go: the output gate that holds a run's answer
// until its writes are applied) and the gateway's (gateway.go: which space a call reached,
// which keys each worker may hold (held.go), the workers' batches of
// writes applied, and what a write changed dropped from every other
// worker before the write is answered), with what they say to each other
// (wire.go, args.go). The coherence rule is in worker.go's opening comment.
//
// The transport carries it through internal/hostcache and never reads
// what it says; it imports neither the transport nor V8.
package cache
