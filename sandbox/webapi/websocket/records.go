// Package websocket is the Go half of the runtime's WebSocket
// (24-websocket.js, docs/websockets.md): the record format in which a
// handler's socket speaks to the gateway. What the handler sends leaves
// its isolate as a streamed response of status 101 whose bytes are
// records (a kind byte, the payload's length in 4 bytes big endian, the
// payload; a close's payload is its code in 2 bytes, then its reason);
// what the visitor sends comes back as invocations (the engine's
// SocketEvent) whose url names the socket's stream, the kind and a close's
// code (EventURL). The gateway reads the records (Records) and the engine
// checks the events' urls (IsEventURL).
package websocket

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Kinds of records and events.
const (
	Text   byte = 't' // a text message (UTF-8)
	Binary byte = 'b' // a binary message
	Close  byte = 'c' // a close: its code, then its reason (UTF-8)
)

// recordHead is a record's kind and its payload's length.
const recordHead = 5

// Record is one thing a handler sent: a message or its close.
type Record struct {
	Kind byte
	Data []byte // a message's bytes; a close's reason
	Code int    // a close's code
}

// Records splits the bytes of a socket's stream into records, keeping a
// partial record for the next chunk. A record longer than Max is refused
// (the message bound) as soon as its head is read.
type Records struct {
	buf []byte
	Max int
}

// Add appends a chunk of the stream and answers the whole records in it.
func (s *Records) Add(chunk []byte) ([]Record, error) {
	s.buf = append(s.buf, chunk...)
	var out []Record
	for len(s.buf) >= recordHead {
		kind := s.buf[0]
		n := int(binary.BigEndian.Uint32(s.buf[1:5]))
		if kind != Text && kind != Binary && kind != Close {
			return out, fmt.Errorf("a socket record of unknown kind %q", kind)
		}
		if s.Max > 0 && n > s.Max {
			return out, ErrMessageTooBig
		}
		if len(s.buf) < recordHead+n {
			break
		}
		data := s.buf[recordHead : recordHead+n]
		rec := Record{Kind: kind, Data: append([]byte(nil), data...)}
		if kind == Close {
			if len(data) < 2 {
				rec.Code, rec.Data = 1000, nil
			} else {
				rec.Code, rec.Data = int(binary.BigEndian.Uint16(data)), rec.Data[2:]
			}
		}
		out = append(out, rec)
		s.buf = s.buf[recordHead+n:]
	}
	if len(s.buf) == 0 {
		s.buf = nil // let a large record's buffer go
	}
	return out, nil
}

// ErrMessageTooBig is a message over the socket's bound.
var ErrMessageTooBig = errors.New("a message over the bound")

// EventURL is the url of an event for the socket opened as stream: its
// kind and, for a close, its code.
func EventURL(stream int64, kind byte, code int) string {
	return "socket:" + strconv.FormatInt(stream, 10) + ":" + string(kind) + ":" + strconv.Itoa(code)
}

// IsEventURL checks an event's url (the gateway's own, checked again).
func IsEventURL(url string) bool {
	parts := strings.Split(url, ":")
	return len(parts) == 4 && parts[0] == "socket"
}
