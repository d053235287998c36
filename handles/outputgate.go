package handles

import "context"

// outputGate is the one place handles waits at kv's output gate (package
// kv): it returns once the kv writes owner (a run or a handle) has made so
// far are durable, or with the error of the commit that lost one, so that
// nothing acknowledged ever stands for a lost write. Everything that
// leaves the gateway on a program's behalf waits here first:
//   - an outbound fetch, a provider tool call or a spawn (hostcall.go);
//   - a handle's response to its visitor (invoke.go);
//   - each chunk of a streamed response body, the first of a relayed one
//     (stream.go);
//   - a run's answer to the API (registry.go).
//
// TestOneOutputGateExitPoint keeps every wait here.
func (s *Store) outputGate(ctx context.Context, owner string) error {
	s.mu.Lock()
	host := s.opts.Host
	s.mu.Unlock()
	if host == nil || host.KV == nil {
		return nil
	}
	return host.KV.Barrier(ctx, owner)
}
