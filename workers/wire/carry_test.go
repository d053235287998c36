package wire

import (
	"bytes"
	"context"
	"encoding/binary"
	"reflect"
	"sync/atomic"
	"testing"
	"time"
)

// A /cache-answers payload reads back as written; every cut of its
// answers' part is refused (a cut of the body after them is the body's
// own to refuse: kv/cache's batch is read strictly).
func TestCarriedFrameRoundTripsAndRefusesCuts(t *testing.T) {
	answers := []Carried{{Call: 7, ID: "handle-a", Reply: []byte("reply a")}, {Call: 1 << 40, ID: "b", Reply: nil}}
	body := []byte("the cache's batch")
	p := EncodeCarried(answers, body)
	got, rest, err := DecodeCarried(p)
	if err != nil || len(got) != 2 || got[0].Call != 7 || got[0].ID != "handle-a" || string(got[0].Reply) != "reply a" ||
		got[1].Call != 1<<40 || got[1].ID != "b" || len(got[1].Reply) != 0 || !bytes.Equal(rest, body) {
		t.Fatalf("read back: %+v %q %v", got, rest, err)
	}
	for n := 0; n < len(p)-len(body); n++ {
		if a, _, err := DecodeCarried(p[:n]); err == nil {
			t.Fatalf("a cut at %d of %d read as %+v", n, len(p), a)
		}
	}
	if _, _, err := DecodeCarried(append([]byte{9}, p[1:]...)); err == nil {
		t.Fatal("another version was read")
	}
	// A count past what the bytes could hold is refused before anything
	// is allocated for it.
	huge := binary.AppendUvarint([]byte{carryVersion}, 1<<40)
	if _, _, err := DecodeCarried(huge); err == nil {
		t.Fatal("a count of 2^40 answers was read")
	}
	if !reflect.DeepEqual(EncodeCarried(nil, nil), []byte{carryVersion, 0}) {
		t.Fatal("an empty frame")
	}
}

// A worker that dies in the middle of a frame (here, of a /cache-answers
// frame: an answer and the writes it waits for) leaves nothing of it: the
// gateway's side never serves the half it read, and the call the answer
// was for fails as its worker's end, never answered by half a frame.
func TestHalfAFrameIsNeverServed(t *testing.T) {
	gw, worker := socketPair(t)
	var served atomic.Int32
	c := NewConn(gw, 1<<20, 1<<20, func(context.Context, string, []byte) ([]byte, error) {
		served.Add(1)
		return nil, nil
	}, nil).Start()
	defer c.Close()
	res := make(chan error, 1)
	go func() {
		_, err := c.Call(context.Background(), PathInvoke, []byte("invocation"))
		res <- err
	}()
	// The worker reads the invocation's frame, then writes half of a
	// frame that answers it with a write, and dies.
	var head [4]byte
	if _, err := worker.Read(head[:]); err != nil {
		t.Fatal(err)
	}
	rest := make([]byte, binary.BigEndian.Uint32(head[:]))
	if _, err := worker.Read(rest); err != nil {
		t.Fatal(err)
	}
	call := binary.BigEndian.Uint64(rest[:8])
	payload := EncodeCarried([]Carried{{Call: call, ID: "h", Reply: []byte("answer")}}, []byte("writes"))
	var frame []byte
	frame = binary.BigEndian.AppendUint32(frame, uint32(frameHeader+len(PathCacheAnswers)+len(payload)))
	frame = binary.BigEndian.AppendUint64(frame, 1)
	frame = append(frame, kindRequest)
	frame = binary.BigEndian.AppendUint16(frame, uint16(len(PathCacheAnswers)))
	frame = append(append(frame, PathCacheAnswers...), payload...)
	if _, err := worker.Write(frame[:len(frame)-3]); err != nil {
		t.Fatal(err)
	}
	worker.Close()
	select {
	case err := <-res:
		if err == nil {
			t.Fatal("the call was answered by half a frame")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call never ended")
	}
	<-c.Done()
	if n := served.Load(); n != 0 {
		t.Fatalf("half a frame was served %d times", n)
	}
}

// An answer carried in another frame reaches its call as its own frame
// would (Deliver); a second answer for it, or one for a call never made,
// is dropped.
func TestDeliverAnswersItsCallOnce(t *testing.T) {
	caller, peer := socketPair(t)
	c := NewConn(caller, 1<<20, 1<<20, nil, nil).Start()
	defer c.Close()
	defer peer.Close()
	res := make(chan []byte, 1)
	go func() {
		b, _ := c.Call(context.Background(), PathInvoke, []byte("x"))
		res <- b
	}()
	var head [4]byte
	if _, err := peer.Read(head[:]); err != nil {
		t.Fatal(err)
	}
	rest := make([]byte, binary.BigEndian.Uint32(head[:]))
	if _, err := peer.Read(rest); err != nil {
		t.Fatal(err)
	}
	call := binary.BigEndian.Uint64(rest[:8])
	c.Deliver(call+1, []byte("not its")) // no such call
	c.Deliver(call, []byte("carried"))
	c.Deliver(call, []byte("again"))
	if got := <-res; string(got) != "carried" {
		t.Fatalf("the call was answered %q", got)
	}
}
