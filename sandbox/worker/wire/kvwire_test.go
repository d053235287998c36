package wire

import (
	"encoding/binary"
	"reflect"
	"testing"
)

func sampleBatch() KVBatch {
	v, empty := "41", ""
	return KVBatch{Writes: []KVBatchWrite{
		{ID: "run-1", KVWrite: KVWrite{Op: "kv.put", Key: "c", Value: &v}},
		{ID: "run-1", KVWrite: KVWrite{Op: "kv.delete", Key: "old"}},
		{ID: "handle-2", KVWrite: KVWrite{Op: "kv.put", Key: "naïve ☃", Value: &empty}},
	}}
}

// A kv batch crosses whole; a worker's malformed one (cut, a byte over,
// another version, an unknown op, a count or length past the frame) is
// refused without allocating for what the frame does not hold.
func TestKVBatchFrame(t *testing.T) {
	frame := sampleBatch().EncodeFrame()
	var got KVBatch
	if err := got.DecodeFrame(frame); err != nil || !reflect.DeepEqual(got, sampleBatch()) {
		t.Fatalf("decoded %+v (%v)", got, err)
	}
	refusesMangled(t, "a batch", frame, func(data []byte) error {
		var b KVBatch
		return b.DecodeFrame(data)
	})
	var b KVBatch
	badOp := []byte{invokeWireVersion}
	badOp = binary.AppendVarint(badOp, 1)
	badOp = binary.AppendUvarint(badOp, 0)
	badOp = append(badOp, 9)
	badOp = binary.AppendUvarint(badOp, 0)
	if b.DecodeFrame(badOp) == nil {
		t.Fatal("a write with an unknown op was accepted")
	}
	huge := binary.AppendVarint([]byte{invokeWireVersion}, 1<<40)
	refusesCheaply(t, "a count past the frame", huge, 1, func(data []byte) error {
		var b KVBatch
		return b.DecodeFrame(data)
	})
	long := binary.AppendVarint([]byte{invokeWireVersion}, 1)
	long = binary.AppendUvarint(long, 1<<62)
	if b.DecodeFrame(long) == nil {
		t.Fatal("an id past the frame was accepted")
	}
}

func FuzzKVBatchDecode(f *testing.F) {
	f.Add(sampleBatch().EncodeFrame())
	f.Add([]byte{invokeWireVersion, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var b KVBatch
		if b.DecodeFrame(data) != nil {
			return
		}
		var again KVBatch
		if err := again.DecodeFrame(b.EncodeFrame()); err != nil || !reflect.DeepEqual(b, again) {
			t.Fatalf("decoded %+v, re-encoded to %+v (%v)", b, again, err)
		}
	})
}
