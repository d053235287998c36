package handles

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/workers"
)

// A handler that logs all it may on every call: its log in memory stays
// within budgets.HandleLogBytes, keeps the newest entries, and says how many
// older ones were dropped.
func TestHandleLogsInMemoryAreBounded(t *testing.T) {
	g := newGateway(t, workers.Config{Workers: 1})
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	res, err := reg.Execute(context.Background(), "alice", ExecRequest{RetainHandles: true, Timeout: 2 * time.Second, Program: program.Program{Code: `async () => {
		let n = 0
		return { async fetch(req) {
			n++
			for (let i = 0; i < 60; i++) console.log('call ' + n + ' line ' + i + ' ' + 'x'.repeat(1000))
			return new Response(String(n))
		} }
	}`}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.ExecutionID
	const calls = 20 // 1,200 entries, ~1.2 MiB
	for i := 1; i <= calls; i++ {
		if got, err := call(reg, "alice", id, "/"); err != nil || got != fmt.Sprint(i) {
			t.Fatalf("call %d: %q %v", i, got, err)
		}
	}
	newest := fmt.Sprintf("call %d line 59 ", calls)
	var logs []program.LogEntry
	if !waitfor.Within(30*time.Second, func() bool {
		if logs, err = reg.Logs("alice", id); err != nil {
			t.Fatal(err)
		}
		return len(logs) > 0 && strings.HasPrefix(logs[len(logs)-1].Message, newest)
	}) {
		t.Fatalf("the newest entry never arrived: %d entries", len(logs))
	}
	ls := g.store.liveFor(id)
	ls.mu.Lock()
	held, kept := ls.logs.bytes, len(ls.logs.entries)-ls.logs.head
	ls.mu.Unlock()
	sum := 0
	for _, e := range logs[1:] {
		sum += logEntryBytes(e)
	}
	t.Logf("the log holds %d entries, %d bytes (answered %d entries)", kept, held, len(logs))
	if held > budgets.HandleLogBytes || sum != held || kept != len(logs)-1 {
		t.Fatalf("the log holds %d bytes in %d entries (the answer's %d bytes), over %d", held, kept, sum, budgets.HandleLogBytes)
	}
	if first := logs[0]; first.Level != "system" || !strings.Contains(first.Message, "older entries were dropped") {
		t.Fatalf("no note of the dropped entries first: %+v", first)
	}
	// The kept entries are the newest, in order.
	for i := 1; i+1 < len(logs); i++ {
		if logs[i].Time.After(logs[i+1].Time) {
			t.Fatalf("entries out of order at %d", i)
		}
	}
	if kept < 40 {
		t.Fatalf("only %d entries kept", kept)
	}

	// One entry over the bound on its own is cut to fit, and the handle
	// still answers.
	ls.mu.Lock()
	ls.logs.add(program.LogEntry{Level: "log", Message: strings.Repeat("y", 200<<10)})
	held = ls.logs.bytes
	ls.mu.Unlock()
	logs, _ = reg.Logs("alice", id)
	if last := logs[len(logs)-1].Message; held > budgets.HandleLogBytes || !strings.Contains(last, "entry cut") {
		t.Fatalf("a 200 KiB entry: the log holds %d bytes; the entry ends %q", held, last[len(last)-80:])
	}
	if got, err := call(reg, "alice", id, "/"); err != nil || got != fmt.Sprint(calls+1) {
		t.Fatalf("after the logs: %q %v", got, err)
	}
}
