package cache

import (
	"encoding/binary"
	"reflect"
	"testing"
	"time"
)

func sampleBatch() batch {
	v, empty := "41", ""
	return batch{Writes: []BatchWrite{
		{ID: "run-1", Write: Write{Op: opPut, Key: "c", Value: &v}},
		{ID: "run-1", Write: Write{Op: opDelete, Key: "old"}},
		{ID: "handle-2", Write: Write{Op: opPut, Key: "naïve ☃", Value: &empty}},
	}}
}

// A batch crosses whole; a worker's malformed one (cut, a byte over,
// another version, an unknown op, a count or length past the frame) is
// refused without allocating for what the frame does not hold.
func TestBatchFrame(t *testing.T) {
	frame := sampleBatch().encode()
	var got batch
	if err := got.decode(frame); err != nil || !reflect.DeepEqual(got, sampleBatch()) {
		t.Fatalf("decoded %+v (%v)", got, err)
	}
	decode := func(data []byte) error {
		var b batch
		return b.decode(data)
	}
	for i := 0; i < len(frame); i++ {
		if decode(frame[:i]) == nil {
			t.Fatalf("a batch cut at %d of %d bytes was accepted", i, len(frame))
		}
	}
	if decode(append(append([]byte{}, frame...), 0)) == nil {
		t.Fatal("a batch with a byte left over was accepted")
	}
	other := append([]byte{}, frame...)
	other[0] = batchVersion + 1
	if decode(other) == nil {
		t.Fatal("a batch of another version was accepted")
	}
	badOp := []byte{batchVersion}
	badOp = binary.AppendVarint(badOp, 1)
	badOp = binary.AppendUvarint(badOp, 0)
	badOp = append(badOp, 9)
	badOp = binary.AppendUvarint(badOp, 0)
	if decode(badOp) == nil {
		t.Fatal("a write with an unknown op was accepted")
	}
	huge := binary.AppendVarint([]byte{batchVersion}, 1<<40)
	allocs := testing.AllocsPerRun(10, func() {
		if decode(huge) == nil {
			t.Fatal("a count past the frame was accepted")
		}
	})
	if allocs > 1 {
		t.Fatalf("a count past the frame cost %v allocations", allocs)
	}
	long := binary.AppendVarint([]byte{batchVersion}, 1)
	long = binary.AppendUvarint(long, 1<<62)
	if decode(long) == nil {
		t.Fatal("an id past the frame was accepted")
	}
	lateLeft := binary.AppendVarint([]byte{batchVersion}, 1)
	lateLeft = binary.AppendUvarint(lateLeft, 0)
	lateLeft = binary.AppendUvarint(lateLeft, maxLeft+1)
	lateLeft = append(lateLeft, batchDelete)
	lateLeft = binary.AppendUvarint(lateLeft, 0)
	if decode(lateLeft) == nil {
		t.Fatal("a write with more than a day left was accepted")
	}
}

// Each write carries what is left of its invocation's bound as the frame
// is made (docs/cluster.md, "Failures"): the gateway reads it as a due of
// its own clock; a bound already passed still says so (1 µs left), and a
// write with none known carries none.
func TestBatchFrameCarriesTimeLeft(t *testing.T) {
	v := "1"
	sent := time.Now()
	frame := batch{Writes: []BatchWrite{
		{ID: "a", Due: sent.Add(2 * time.Second), Write: Write{Op: opPut, Key: "k", Value: &v}},
		{ID: "b", Due: sent.Add(-time.Second), Write: Write{Op: opDelete, Key: "k"}},
		{ID: "c", Write: Write{Op: opDelete, Key: "k"}},
	}}.encode()
	var got batch
	if err := got.decode(frame); err != nil {
		t.Fatal(err)
	}
	if left := time.Until(got.Writes[0].Due); left > 2*time.Second || left < time.Second {
		t.Fatalf("a write with 2 s left arrived with %v left", left)
	}
	if d := got.Writes[1].Due; d.IsZero() || time.Until(d) > time.Millisecond {
		t.Fatalf("a write whose bound passed arrived due %v", d)
	}
	if d := got.Writes[2].Due; !d.IsZero() {
		t.Fatalf("a write with no bound known arrived due %v", d)
	}
}

func FuzzBatchDecode(f *testing.F) {
	f.Add(sampleBatch().encode())
	f.Add([]byte{batchVersion, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var b batch
		if b.decode(data) != nil {
			return
		}
		var again batch
		if err := again.decode(b.encode()); err != nil || len(again.Writes) != len(b.Writes) {
			t.Fatalf("decoded %+v, re-encoded to %+v (%v)", b, again, err)
		}
		// What is left is read again later: compared apart.
		for i := range b.Writes {
			if b.Writes[i].Due.IsZero() != again.Writes[i].Due.IsZero() {
				t.Fatalf("write %d due %v, re-encoded due %v", i, b.Writes[i].Due, again.Writes[i].Due)
			}
			b.Writes[i].Due, again.Writes[i].Due = time.Time{}, time.Time{}
		}
		if !reflect.DeepEqual(b, again) {
			t.Fatalf("decoded %+v, re-encoded to %+v", b, again)
		}
	})
}
