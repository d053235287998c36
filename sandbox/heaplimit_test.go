package sandbox

import (
	"context"
	"testing"
)

func TestHeapLimitMatchesBound(t *testing.T) {
	for _, mib := range []int{16, 64, 256} {
		e := engine(t)
		m, err := e.isolateFor(mib)
		if err != nil {
			t.Fatal(err)
		}
		ch := make(chan uint64, 1)
		m.submit(func() { ch <- m.iso.GetHeapStatistics().HeapSizeLimit; m.kill() })
		got := <-ch
		t.Logf("memory %d MiB -> V8 heap limit %.1f MiB", mib, float64(got)/(1<<20))
		if got > uint64(mib)<<20 || got < uint64(mib)<<20*3/4 {
			t.Errorf("memory %d MiB gives a V8 heap limit of %.1f MiB", mib, float64(got)/(1<<20))
		}
	}
	_ = context.Background
}
