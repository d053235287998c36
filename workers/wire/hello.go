package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"sort"
)

// A hello travels as its JSON without the startup, then the startup in
// binary: its length-prefixed snapshot, sum and modules. In the JSON the
// startup's ~490 KB went as ~650 KB of base64 that the gateway encoded
// (2.6 ms) and the worker scanned and decoded (4 ms) at every start, a
// third of a start's CPU (docs/decisions.md, "Workers start from the
// first one's snapshot").

// EncodeFrame implements FrameEncoder.
func (h HelloRequest) EncodeFrame() []byte {
	st := h.Startup
	h.Startup = nil
	head, _ := json.Marshal(h)
	n := len(head) + 32
	if st != nil {
		n += len(st.Snapshot) + len(st.Sum)
		for name, m := range st.Modules {
			n += len(name) + len(m) + 20
		}
	}
	out := binary.AppendUvarint(make([]byte, 0, n), uint64(len(head)))
	out = append(out, head...)
	if st == nil {
		return out
	}
	out = appendBytes(out, st.Snapshot)
	out = appendBytes(out, st.Sum)
	names := make([]string, 0, len(st.Modules))
	for name := range st.Modules {
		names = append(names, name)
	}
	sort.Strings(names)
	out = binary.AppendUvarint(out, uint64(len(names)))
	for _, name := range names {
		out = appendBytes(out, []byte(name))
		out = appendBytes(out, st.Modules[name])
	}
	return out
}

func appendBytes(out, b []byte) []byte {
	return append(binary.AppendUvarint(out, uint64(len(b))), b...)
}

var errHello = errors.New("a malformed hello")

// DecodeHello reads a hello EncodeFrame wrote. The startup's bytes are
// copies, not views of b.
func DecodeHello(b []byte) (HelloRequest, error) {
	var h HelloRequest
	head, rest, ok := takeBytes(b)
	if !ok {
		return h, errHello
	}
	if err := json.Unmarshal(head, &h); err != nil {
		return h, err
	}
	h.Startup = nil
	if len(rest) == 0 {
		return h, nil
	}
	st := &Startup{Modules: map[string][]byte{}}
	var snapshot, sum []byte
	if snapshot, rest, ok = takeBytes(rest); !ok {
		return h, errHello
	}
	if sum, rest, ok = takeBytes(rest); !ok {
		return h, errHello
	}
	st.Snapshot, st.Sum = bytes.Clone(snapshot), bytes.Clone(sum)
	count, k := binary.Uvarint(rest)
	if k <= 0 || count > uint64(len(rest)) {
		return h, errHello
	}
	rest = rest[k:]
	for range count {
		var name, m []byte
		if name, rest, ok = takeBytes(rest); !ok {
			return h, errHello
		}
		if m, rest, ok = takeBytes(rest); !ok {
			return h, errHello
		}
		st.Modules[string(name)] = bytes.Clone(m)
	}
	if len(rest) != 0 {
		return h, errHello
	}
	h.Startup = st
	return h, nil
}

// takeBytes reads a length-prefixed run of bytes from b.
func takeBytes(b []byte) (run, rest []byte, ok bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, nil, false
	}
	return b[k : k+int(n)], b[k+int(n):], true
}
