package sandbox

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// WebSockets to a handle (docs/websockets.md). A handler accepts one with
// `new Response(null, {status: 101, webSocket: client})`: the answer is a
// streamed response of status 101 whose stream carries what the handler
// sends, as records; what the visitor sends comes back as invocations
// named SocketEvent, one an event, in order, under the handle's
// concurrency rules and bounds. The isolate's side is the runtime's
// WebSocket (js/runtime/24-websocket.js).

// SocketEvent is the invocation name of an event for a handler's socket;
// only the gateway sends it (the API and the executor socket invoke
// "fetch" only).
const SocketEvent = "websocket"

// Kinds of socket records and events.
const (
	SocketText   byte = 't' // a text message (UTF-8)
	SocketBinary byte = 'b' // a binary message
	SocketClose  byte = 'c' // a close: its code, then its reason (UTF-8)
)

// socketRecordHead is a record's kind and its payload's length (4 bytes,
// big endian).
const socketRecordHead = 5

// SocketRecord is one thing a handler sent: a message or its close.
type SocketRecord struct {
	Kind byte
	Data []byte // a message's bytes; a close's reason
	Code int    // a close's code
}

// SocketRecords splits the bytes of a socket's stream into records, keeping
// a partial record for the next chunk. A record longer than max is refused
// (the message bound) as soon as its head is read.
type SocketRecords struct {
	buf []byte
	Max int
}

// Add appends a chunk of the stream and answers the whole records in it.
func (s *SocketRecords) Add(chunk []byte) ([]SocketRecord, error) {
	s.buf = append(s.buf, chunk...)
	var out []SocketRecord
	for len(s.buf) >= socketRecordHead {
		kind := s.buf[0]
		n := int(binary.BigEndian.Uint32(s.buf[1:5]))
		if kind != SocketText && kind != SocketBinary && kind != SocketClose {
			return out, fmt.Errorf("a socket record of unknown kind %q", kind)
		}
		if s.Max > 0 && n > s.Max {
			return out, ErrSocketMessageTooBig
		}
		if len(s.buf) < socketRecordHead+n {
			break
		}
		data := s.buf[socketRecordHead : socketRecordHead+n]
		rec := SocketRecord{Kind: kind, Data: append([]byte(nil), data...)}
		if kind == SocketClose {
			if len(data) < 2 {
				rec.Code, rec.Data = 1000, nil
			} else {
				rec.Code, rec.Data = int(binary.BigEndian.Uint16(data)), rec.Data[2:]
			}
		}
		out = append(out, rec)
		s.buf = s.buf[socketRecordHead+n:]
	}
	if len(s.buf) == 0 {
		s.buf = nil // let a large record's buffer go
	}
	return out, nil
}

// ErrSocketMessageTooBig is a message over the socket's bound.
var ErrSocketMessageTooBig = fmt.Errorf("a message over the bound")

// SocketEventRequest is the invocation that delivers an event to the
// handler's socket opened as stream: a message (SocketText, SocketBinary)
// or the visitor's close (code, reason in data).
func SocketEventRequest(stream int64, kind byte, code int, data []byte) WireRequest {
	return NewWireRequest("GET", "socket:"+strconv.FormatInt(stream, 10)+":"+string(kind)+":"+strconv.Itoa(code), nil, data)
}

// socketEventLines marks an event's wire lines: they start with an empty
// line, which no request has (its method is a token), so a visitor's
// request can never be taken for an event.
func socketEventLines(lines string) string { return "\n" + lines }

// socketEventURL checks an event's url (the gateway's own, checked again).
func socketEventURL(url string) bool {
	parts := strings.Split(url, ":")
	return len(parts) == 4 && parts[0] == "socket"
}
