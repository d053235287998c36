package cache

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/kv/kvop"
)

// What the cache's two sides say to each other. The transport carries it
// as opaque bytes (internal/hostcache): a note with a kv call's answer
// (hint), a message to a worker's cache (drop), and the batch of queued
// writes a worker's cache sends with the gateway's reply to it.

// The kv operations (kv/kvop names them).
const (
	opGet    = string(kvop.Get)
	opPut    = string(kvop.Put)
	opDelete = string(kvop.Delete)
	opList   = string(kvop.List)
)

// Write is one write of a batch as the gateway applies it.
type Write struct {
	Op    string // kv.put or kv.delete
	Key   string
	Value *string // nil for a delete
}

// BatchWrite is one queued write as the batch carries it: the write, whose
// it is, and when the bound of the invocation that made it ends.
type BatchWrite struct {
	ID string // the run or handle that wrote
	// Due is when the writing invocation's bound ends (zero: not known),
	// so the gateway waits for the store at most half what is left of it,
	// as for a kv call the worker sends (wire.HostPost's Left). The frame
	// carries what is left when it is sent.
	Due time.Time
	Write
}

// hint is the gateway's note, with a kv answer, on the space it reached.
type hint struct {
	Space string `json:"space"`
	// Write: the run may write the space too (its writes may be answered
	// at once).
	Write bool `json:"write,omitempty"`
}

// drop is the gateway's message to a worker's cache: the keys of a space
// another worker's write changed, or every space (a failed commit).
type drop struct {
	Space string   `json:"space,omitempty"`
	Keys  []string `json:"keys,omitempty"` // every key one write batch changed
	All   bool     `json:"all,omitempty"`
}

// batchReply is the gateway's answer to a batch: how many writes were
// applied before the one it refused, and why.
type batchReply struct {
	Applied int        `json:"applied,omitempty"`
	Code    fault.Code `json:"code,omitempty"`
	Message string     `json:"message,omitempty"`
}

func (r batchReply) err() error {
	if r.Code == "" {
		return nil
	}
	return fault.New(r.Code, "%s", r.Message)
}

// The batch frame (worker → gateway): the writes a worker's flusher sends
// in one round trip, binary: its own version byte, the count of writes,
// then each write's run or handle id, what was left of its invocation's
// bound as the frame was made (microseconds, a uvarint; 0 not known, and
// at least 1 when known), its op (a byte: 1 put, 2 delete), its key, and
// for a put its value; strings are length-prefixed (uvarint) and the
// count a varint. The gateway decodes it as everything a worker
// sends: every length checked against what is left, a frame with bytes
// left over or missing is malformed, which ends the worker.
type batch struct {
	Writes []BatchWrite
}

const (
	batchVersion = 2
	batchPut     = 1
	batchDelete  = 2
)

func (b batch) encode() []byte {
	size := 16
	for _, w := range b.Writes {
		size += len(w.ID) + len(w.Key) + 12
		if w.Value != nil {
			size += len(*w.Value)
		}
	}
	out := make([]byte, 0, size)
	out = append(out, batchVersion)
	now := time.Now()
	out = binary.AppendVarint(out, int64(len(b.Writes)))
	str := func(s string) {
		out = binary.AppendUvarint(out, uint64(len(s)))
		out = append(out, s...)
	}
	for _, x := range b.Writes {
		str(x.ID)
		left := uint64(0)
		if !x.Due.IsZero() {
			left = uint64(max(x.Due.Sub(now).Microseconds(), 1))
		}
		out = binary.AppendUvarint(out, left)
		if x.Op == opDelete {
			out = append(out, batchDelete)
			str(x.Key)
			continue
		}
		out = append(out, batchPut)
		str(x.Key)
		v := ""
		if x.Value != nil {
			v = *x.Value
		}
		str(v)
	}
	return out
}

var errMalformed = errors.New("a malformed kv batch")

func (b *batch) decode(data []byte) error {
	r := reader{b: data}
	if len(r.b) == 0 || r.b[0] != batchVersion {
		return errMalformed
	}
	r.b = r.b[1:]
	// Each write takes at least 4 bytes (an empty id, no time left, the
	// op, an empty key).
	n, k := binary.Varint(r.b)
	if k <= 0 || n < 0 || n > int64(len(r.b[k:])/4) {
		return errMalformed
	}
	r.b = r.b[k:]
	b.Writes = make([]BatchWrite, 0, n)
	now := time.Now()
	for i := int64(0); i < n && !r.bad; i++ {
		x := BatchWrite{ID: r.str()}
		if left := r.uvarint(); left > 0 && left <= maxLeft {
			x.Due = now.Add(time.Duration(left) * time.Microsecond)
		} else if left > maxLeft {
			r.bad = true
		}
		var op byte
		if len(r.b) > 0 {
			op, r.b = r.b[0], r.b[1:]
		}
		switch op {
		case batchPut:
			x.Op, x.Key = opPut, r.str()
			v := r.str()
			x.Value = &v
		case batchDelete:
			x.Op, x.Key = opDelete, r.str()
		default:
			r.bad = true
		}
		b.Writes = append(b.Writes, x)
	}
	if r.bad || len(r.b) != 0 {
		return errMalformed
	}
	return nil
}

// maxLeft is the most time left a batch's write may claim (a day, in
// microseconds): a run's bound is far shorter, and a larger number is a
// malformed frame.
const maxLeft = uint64(24 * time.Hour / time.Microsecond)

// reader reads the batch frame's strings; the first malformed one sets bad.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) uvarint() uint64 {
	n, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.bad, r.b = true, nil
		return 0
	}
	r.b = r.b[k:]
	return n
}

func (r *reader) str() string {
	n, k := binary.Uvarint(r.b)
	if k <= 0 || n > uint64(len(r.b)-k) {
		r.bad, r.b = true, nil
		return ""
	}
	s := string(r.b[k : k+int(n)])
	r.b = r.b[k+int(n):]
	return s
}

// encodeJSON is the notes' and messages' encoding (keys as they are: a
// '<' is one byte, internal/wirejson).
func encodeJSON(v any) []byte {
	b, _ := wirejson.Marshal(v)
	return b
}
