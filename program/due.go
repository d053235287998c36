package program

import (
	"context"
	"time"
)

// dueKey keys the moment a host call's invocation reaches its bound.
type dueKey struct{}

// WithDue is ctx carrying due, the moment the bound of the invocation (or
// run) that makes a host call ends: the isolate sets it on the call, the
// worker sends what is left of it with the call's frame, and the gateway
// bounds the call's waits by it (docs/cluster.md, "Failures": a kv call
// waits half what is left, not half the whole bound).
func WithDue(ctx context.Context, due time.Time) context.Context {
	return context.WithValue(ctx, dueKey{}, due)
}

// DueOf answers the due WithDue put on ctx, if any.
func DueOf(ctx context.Context) (time.Time, bool) {
	due, ok := ctx.Value(dueKey{}).(time.Time)
	return due, ok
}
