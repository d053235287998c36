package wire

import (
	"encoding/binary"
	"errors"
)

// The /cache-answers frame (worker → gateway): invocations' answers
// carried with the host cache's batch of the writes they wait for, in one
// frame instead of a batch, its reply and the answers after it (kv/cache,
// Worker.flush; docs/decisions.md, "kv answers carried with their writes").
// Binary: its own version byte, the count of answers (uvarint), each
// answer's call id (the /invoke frame it answers, 8 bytes), its run or
// handle id and its encoded InvokeReply (each length-prefixed, uvarint),
// then the cache's body to the end. The gateway reads it as everything a
// worker sends: every length checked against what is left; a malformed
// frame ends the worker.

// Carried is one answer a /cache-answers frame carries.
type Carried struct {
	Call  uint64 // the gateway's /invoke call it answers
	ID    string // the handle it answers for
	Reply []byte // the encoded InvokeReply
}

const carryVersion = 1

var errMalformedCarry = errors.New("a malformed cache-answers frame")

// EncodeCarried is the /cache-answers payload of answers and the cache's
// body.
func EncodeCarried(answers []Carried, body []byte) []byte {
	size := 16 + len(body)
	for _, a := range answers {
		size += 8 + 20 + len(a.ID) + len(a.Reply)
	}
	out := make([]byte, 0, size)
	out = append(out, carryVersion)
	out = binary.AppendUvarint(out, uint64(len(answers)))
	for _, a := range answers {
		out = binary.BigEndian.AppendUint64(out, a.Call)
		out = binary.AppendUvarint(out, uint64(len(a.ID)))
		out = append(out, a.ID...)
		out = binary.AppendUvarint(out, uint64(len(a.Reply)))
		out = append(out, a.Reply...)
	}
	return append(out, body...)
}

// DecodeCarried reads a /cache-answers payload: its answers and the
// cache's body (the rest).
func DecodeCarried(p []byte) ([]Carried, []byte, error) {
	if len(p) == 0 || p[0] != carryVersion {
		return nil, nil, errMalformedCarry
	}
	p = p[1:]
	n, k := binary.Uvarint(p)
	// Each answer takes at least 10 bytes (its call, two empty lengths).
	if k <= 0 || n > uint64(len(p[k:])/10) {
		return nil, nil, errMalformedCarry
	}
	p = p[k:]
	str := func() ([]byte, bool) {
		l, k := binary.Uvarint(p)
		if k <= 0 || l > uint64(len(p)-k) {
			return nil, false
		}
		s := p[k : k+int(l)]
		p = p[k+int(l):]
		return s, true
	}
	answers := make([]Carried, 0, n)
	for i := uint64(0); i < n; i++ {
		if len(p) < 8 {
			return nil, nil, errMalformedCarry
		}
		a := Carried{Call: binary.BigEndian.Uint64(p)}
		p = p[8:]
		id, ok := str()
		if !ok {
			return nil, nil, errMalformedCarry
		}
		if a.Reply, ok = str(); !ok {
			return nil, nil, errMalformedCarry
		}
		a.ID = string(id)
		answers = append(answers, a)
	}
	return answers, p, nil
}
