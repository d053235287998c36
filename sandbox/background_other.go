//go:build !linux

package sandbox

import "errors"

// idleThreadClass has no portable equivalent: background work runs at the
// normal priority elsewhere.
func idleThreadClass() error { return errors.New("no idle scheduling class on this system") }
