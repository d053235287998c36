package sandbox

import (
	_ "embed"
	"errors"
	"fmt"
	"time"

	v8 "rogchap.com/v8go"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
)

func (m *vm) hostSetTimer(args []*v8.Value) (*v8.Value, error) {
	if len(args) < 2 {
		return nil, errors.New("setTimer needs an id and a delay")
	}
	id := args[0].Int32()
	if _, ok := m.timers[id]; !ok && len(m.timers) >= budgets.TimersPerIsolate {
		return nil, fmt.Errorf("too many pending timers (the bound is %d)", budgets.TimersPerIsolate)
	}
	ms := args[1].Number()
	if ms < 0 || ms != ms {
		ms = 0
	}
	if ms > float64(24*time.Hour/time.Millisecond) {
		ms = float64(24 * time.Hour / time.Millisecond)
	}
	m.timers[id] = time.Now().Add(time.Duration(ms * float64(time.Millisecond)))
	return nil, nil
}

func (m *vm) hostClearTimer(args []*v8.Value) (*v8.Value, error) {
	if len(args) > 0 {
		delete(m.timers, args[0].Int32())
	}
	return nil, nil
}

func (m *vm) nextTimer() (time.Time, bool) {
	var first time.Time
	ok := false
	for _, due := range m.timers {
		if !ok || due.Before(first) {
			first, ok = due, true
		}
	}
	return first, ok
}

// fireDue runs every timer that is due, in due order.
func (m *vm) fireDue(deadline time.Time) error {
	for {
		var id int32
		var first time.Time
		found := false
		now := time.Now()
		for tid, due := range m.timers {
			if !due.After(now) && (!found || due.Before(first) || due.Equal(first) && tid < id) {
				id, first, found = tid, due, true
			}
		}
		if !found {
			return nil
		}
		delete(m.timers, id)
		v, err := m.call(m.fireTimer, int32(id))
		if err := m.boundHit(); err != nil {
			return err
		}
		if err != nil {
			return fault.Wrap(fault.Runtime, err, "a timer callback failed")
		}
		v.Release()
		if time.Now().After(deadline) {
			return m.timeoutFault()
		}
	}
}
