package cache

import (
	"encoding/binary"
	"reflect"
	"testing"
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
		if err := again.decode(b.encode()); err != nil || !reflect.DeepEqual(b, again) {
			t.Fatalf("decoded %+v, re-encoded to %+v (%v)", b, again, err)
		}
	})
}
