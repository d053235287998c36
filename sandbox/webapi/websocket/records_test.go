package websocket

import (
	"encoding/binary"
	"errors"
	"testing"
)

func record(kind byte, payload []byte) []byte {
	b := []byte{kind, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

// Records come whole whatever the chunks cut them into; a close carries
// its code (1000 when it has none); a record over the bound is refused at
// its head, and an unknown kind at once.
func TestRecords(t *testing.T) {
	stream := append(record(Text, []byte("héllo")), record(Binary, []byte{1, 2, 255})...)
	stream = append(stream, record(Close, append([]byte{0x0f, 0xa0}, "bye"...))...)
	stream = append(stream, record(Close, nil)...)
	r := &Records{Max: 16}
	var got []Record
	for _, c := range stream {
		recs, err := r.Add([]byte{c})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, recs...)
	}
	if len(got) != 4 || string(got[0].Data) != "héllo" || got[1].Kind != Binary || got[2].Code != 4000 || string(got[2].Data) != "bye" || got[3].Code != 1000 {
		t.Fatalf("records: %+v", got)
	}
	big := record(Text, make([]byte, 17))
	if _, err := (&Records{Max: 16}).Add(big[:5]); !errors.Is(err, ErrMessageTooBig) {
		t.Fatalf("a record over the bound, by its head: %v", err)
	}
	if _, err := (&Records{}).Add(record('x', nil)); err == nil {
		t.Fatal("a record of an unknown kind was taken")
	}
	if u := EventURL(7, Close, 1001); u != "socket:7:c:1001" || !IsEventURL(u) || IsEventURL("https://x/") {
		t.Fatalf("event url %q", u)
	}
}
