package sandbox

import (
	_ "embed"
	"errors"
	"fmt"
	"time"

	v8 "rogchap.com/v8go"

	"github.com/retainer-gw/retainer/budgets"
)

// timers are an isolate's pending timers: the runtime keeps each timer's
// callback under its id (setTimeout, setInterval), the engine when each is
// due. Loop-owned; the loop waits for next and fires what is due
// (vm.fireDue, eventloop.go) through the runtime's fireTimer.
type timers struct {
	due map[int32]time.Time
}

func newTimers() timers { return timers{due: map[int32]time.Time{}} }

// set is host.setTimer(id, ms): a delay below 0 (or NaN) is 0, one above a
// day a day.
func (t *timers) set(args []*v8.Value) error {
	if len(args) < 2 {
		return errors.New("setTimer needs an id and a delay")
	}
	id := args[0].Int32()
	if _, ok := t.due[id]; !ok && len(t.due) >= budgets.TimersPerIsolate {
		return fmt.Errorf("too many pending timers (the bound is %d)", budgets.TimersPerIsolate)
	}
	ms := args[1].Number()
	if ms < 0 || ms != ms {
		ms = 0
	}
	if ms > float64(24*time.Hour/time.Millisecond) {
		ms = float64(24 * time.Hour / time.Millisecond)
	}
	t.due[id] = time.Now().Add(time.Duration(ms * float64(time.Millisecond)))
	return nil
}

// clear is host.clearTimer(id).
func (t *timers) clear(args []*v8.Value) {
	if len(args) > 0 {
		delete(t.due, args[0].Int32())
	}
}

// next is when the first pending timer is due; false with none pending.
func (t *timers) next() (time.Time, bool) {
	var first time.Time
	ok := false
	for _, due := range t.due {
		if !ok || due.Before(first) {
			first, ok = due, true
		}
	}
	return first, ok
}

// popDue takes the timer due first at now (the lower id first among those
// due together), if one is due.
func (t *timers) popDue(now time.Time) (int32, bool) {
	var id int32
	var first time.Time
	found := false
	for tid, due := range t.due {
		if !due.After(now) && (!found || due.Before(first) || due.Equal(first) && tid < id) {
			id, first, found = tid, due, true
		}
	}
	if found {
		delete(t.due, id)
	}
	return id, found
}
