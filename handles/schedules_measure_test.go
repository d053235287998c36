package handles

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/program"
	persist "github.com/retainer-gw/retainer/store"
	"github.com/retainer-gw/retainer/workers"
)

// RETAINER_MEASURE_SCHEDULES=1 go test ./handles -run TestMeasureScheduleLateness -v -timeout 5m
// 1,000 handles scheduled on the same minute (real clock): lateness from
// the tick's time to the handler's first line, and the gateway process's
// CPU over that minute (docs/schedules.md).
func TestMeasureScheduleLateness(t *testing.T) {
	if os.Getenv("RETAINER_MEASURE_SCHEDULES") == "" {
		t.Skip("a measurement: set RETAINER_MEASURE_SCHEDULES=1")
	}
	const n = 1000
	g := startOn(t, func() (persist.Store, error) { return persist.OpenBolt(filepath.Join(t.TempDir(), "r.db"), 0) },
		&fakeClock{}, &eventLog{}, workers.Config{Workers: 2, IsolatesPerWorker: 600}, func(o *Options) { o.Now = time.Now })
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour, MaxHandlesPerTenant: 100000})
	code := `async () => { let late = -1; return {
		fetch() { return Response.json(late) },
		scheduled(c) { late = Date.now() - c.scheduledTime } } }`
	ids := make([]string, n)
	for i := range ids {
		res, err := reg.Execute(context.Background(), "t"+string(rune('a'+i%20)), ExecRequest{Program: program.Program{Code: code}, RetainHandles: true, Timeout: time.Second, Schedules: []string{"* * * * *"}})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = res.ExecutionID
	}
	tick := time.Now().Truncate(time.Minute).Add(time.Minute)
	t.Logf("%d handles deployed; waiting for %s", n, tick.Format(time.TimeOnly))
	time.Sleep(time.Until(tick) - 2*time.Second)
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	wall := time.Now()
	lates := make([]int, 0, n)
	var mu sync.Mutex
	for end := tick.Add(50 * time.Second); time.Now().Before(end) && len(lates) < n; time.Sleep(500 * time.Millisecond) {
		lates = lates[:0]
		for i, id := range ids {
			body, err := call(reg, "t"+string(rune('a'+i%20)), id, "/")
			if err != nil {
				t.Fatal(err)
			}
			var late int
			json.Unmarshal([]byte(body), &late)
			if late >= 0 {
				mu.Lock()
				lates = append(lates, late)
				mu.Unlock()
			}
		}
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond
	sort.Ints(lates)
	if len(lates) < n {
		t.Fatalf("only %d of %d fired", len(lates), n)
	}
	t.Logf("lateness ms: p50 %d, p99 %d, max %d; gateway CPU %v over %v (includes the polling reads)",
		lates[n/2], lates[n*99/100], lates[n-1], cpu.Round(time.Millisecond), time.Since(wall).Round(time.Millisecond))
}
