package wire

// The kv.batch frame (/kv-batch, worker → gateway): the writes a worker's
// flusher sends in one round trip (kvcache.go), in the binary layout of
// the invocation frames (invokewire.go): a version byte, the count of
// writes, then each write's run or handle id, its op (a byte: 1 put,
// 2 delete), its key, and for a put its value. It was JSON inside the
// generic /host call, decoded twice in the gateway (the call, then its
// arguments) and encoded twice in the worker. The gateway decodes it as
// everything a worker sends: every length checked against what is left, a
// frame with bytes left over or missing is malformed, which kills the
// worker.
type KVBatch struct {
	Writes []KVBatchWrite
}

const (
	kvOpPut    = 1
	kvOpDelete = 2
)

func (b KVBatch) EncodeFrame() []byte {
	size := 16
	for _, w := range b.Writes {
		size += len(w.ID) + len(w.Key) + 12
		if w.Value != nil {
			size += len(*w.Value)
		}
	}
	w := wireWriter{b: make([]byte, 0, size)}
	w.b = append(w.b, invokeWireVersion)
	w.num(int64(len(b.Writes)))
	for _, x := range b.Writes {
		w.str(x.ID)
		if x.Op == "kv.delete" {
			w.b = append(w.b, kvOpDelete)
			w.str(x.Key)
			continue
		}
		w.b = append(w.b, kvOpPut)
		w.str(x.Key)
		v := ""
		if x.Value != nil {
			v = *x.Value
		}
		w.str(v)
	}
	return w.b
}

func (b *KVBatch) DecodeFrame(data []byte) error {
	r := wireReader{b: data}
	r.version()
	// Each write takes at least 3 bytes (an empty id, the op, an empty key).
	n := r.count(3)
	b.Writes = make([]KVBatchWrite, 0, n)
	for i := 0; i < n && !r.bad; i++ {
		x := KVBatchWrite{ID: r.str()}
		var op byte
		if len(r.b) > 0 {
			op, r.b = r.b[0], r.b[1:]
		}
		switch op {
		case kvOpPut:
			x.Op, x.Key = "kv.put", r.str()
			v := r.str()
			x.Value = &v
		case kvOpDelete:
			x.Op, x.Key = "kv.delete", r.str()
		default:
			r.fail()
		}
		b.Writes = append(b.Writes, x)
	}
	return r.end()
}

// KVHint is the gateway's word, with a kv answer, on the space it reached.
type KVHint struct {
	Space string `json:"space"`
	// Write: the run may write the space too (its writes may be answered
	// at once).
	Write bool `json:"write,omitempty"`
}

type KVInvalidate struct {
	Space string   `json:"space,omitempty"`
	Keys  []string `json:"keys,omitempty"` // every key one write batch changed
	All   bool     `json:"all,omitempty"`  // every space (a failed commit)
}

// KVWrite is one write of a kv.batch as the gateway applies it.
type KVWrite struct {
	Op    string // kv.put or kv.delete
	Key   string
	Value *string // nil for a delete
}

// KVBatchWrite is one queued write as the kv batch carries it: the
// write and whose it is.
type KVBatchWrite struct {
	ID string // the run or handle that wrote
	KVWrite
}
