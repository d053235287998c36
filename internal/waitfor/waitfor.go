// Package waitfor is the tests' wait until something holds, in place of a
// sleep that stands in for it: a sleep long enough on a quiet machine is
// too short on a loaded one (two test runs at once, a 2-core CI), and too
// long everywhere else. A wait checks its condition at once and then
// every few milliseconds, backing off to 50 ms, and gives up only at a
// generous deadline, naming what it waited for.
//
// It does not replace a wait that is the thing tested (a bound's time, an
// idle period) or a check that something does not happen.
package waitfor

import (
	"testing"
	"time"
)

// Until waits until ok answers true, checking at once and then with a
// backoff, and fails t (naming what) if it has not within d.
func Until(t testing.TB, d time.Duration, what string, ok func() bool) {
	t.Helper()
	if !Within(d, ok) {
		t.Fatalf("waited %v for %s", d, what)
	}
}

// Within waits until ok answers true or d has passed, and answers which.
func Within(d time.Duration, ok func() bool) bool {
	deadline := time.Now().Add(d)
	pause := time.Millisecond
	for {
		if ok() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}
