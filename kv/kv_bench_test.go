package kv

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// cpuNow is this process's user+system CPU time: the committer runs on its
// own goroutine, so wall time per op would hide what a commit costs.
func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkKVGroupCommit is the gateway's side of a kv counter under load:
// each op accepts one put of each of `writes` owners (as the worker's
// kv.batch brings them) and waits for the last to be durable, in a bbolt
// store as the gateway opens it. It reports the process's CPU per write.
//
// go test ./capability -run '^$' -bench KVGroupCommit
func BenchmarkKVGroupCommit(b *testing.B) {
	{
		for _, writes := range []int{1, 8} {
			b.Run(fmt.Sprintf("writes=%d", writes), func(b *testing.B) {
				_, kv := openKV(b, 0)
				// A store with some history: 32 tenants' counters and values.
				for t := range 32 {
					for k := range 50 {
						kv.Serve("r", fmt.Sprint("tenant", t), "seed", "kv.put", []byte(fmt.Sprintf(`{"key":"k%d","value":"%0100d"}`, k, k)))
					}
				}
				kv.Barrier(context.Background(), "seed")
				b.ResetTimer()
				start := cpuNow()
				for i := 0; i < b.N; i++ {
					var owner string
					for w := range writes {
						owner = fmt.Sprint("h", w)
						if _, err := kv.Serve("r", fmt.Sprint("tenant", w), owner, "kv.put", []byte(fmt.Sprintf(`{"key":"c","value":"%d"}`, i))); err != nil {
							b.Fatal(err)
						}
					}
					if err := kv.Barrier(context.Background(), owner); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64((cpuNow()-start).Microseconds())/float64(b.N*writes), "cpu-µs/write")
			})
		}
	}
}
