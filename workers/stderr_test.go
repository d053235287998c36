package workers

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/waitfor"
)

// A worker's output of 400 lines at once (a crash's stack trace) is
// relayed to the pool's log as its first stderrBurst lines and a count of
// the rest (it once went whole into the gateway's log).
func TestStderrLinesBounded(t *testing.T) {
	var mu sync.Mutex
	var got []string
	pool := &Pool{cfg: Config{Logf: func(format string, args ...any) {
		mu.Lock()
		got = append(got, fmt.Sprintf(format, args...))
		mu.Unlock()
	}}}
	w, err := pool.stderrSink(3)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 400; i++ {
		fmt.Fprintf(w, "goroutine %d [running]:\n", i)
	}
	w.Close()
	var relayed, left int
	waitfor.Within(30*time.Second, func() bool {
		mu.Lock()
		relayed, left = 0, 0
		for _, l := range got {
			var n int
			if _, err := fmt.Sscanf(l, "worker 3: %d lines of its output were not logged", &n); err == nil {
				left += n
			} else if strings.HasPrefix(l, "worker 3: goroutine ") {
				relayed++
			}
		}
		mu.Unlock()
		return relayed+left == 400
	})
	t.Logf("%d lines relayed, %d counted", relayed, left)
	// A line a second after the burst: a slow machine may relay a few.
	if relayed+left != 400 || relayed < stderrBurst || relayed > stderrBurst+10 {
		t.Fatalf("of 400 lines: %d relayed, %d counted as left out", relayed, left)
	}
}

func TestLineBucket(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lines := newStderrLimiter()
	take := func(at time.Time) bool { return lines.AllowN(at, 1) }
	n := 0
	for i := 0; i < 100; i++ {
		if take(now) {
			n++
		}
	}
	if n != stderrBurst || take(now.Add(999*time.Millisecond)) || !take(now.Add(time.Second)) || take(now.Add(time.Second)) {
		t.Fatalf("%d lines at once, then not one a second", n)
	}
	n = 0
	for i := 0; i < 100; i++ {
		if take(now.Add(time.Hour)) {
			n++
		}
	}
	if n != stderrBurst {
		t.Fatalf("after an hour idle, %d lines at once, want %d", n, stderrBurst)
	}
}
