package wire

import (
	"encoding/binary"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/program"
)

func sampleReply() InvokeReply {
	return InvokeReply{
		Response: program.WireResponse{Status: 201, StatusText: "Created", Headers: [][2]string{{"content-type", "application/json"}, {"x-empty", ""}}, Body: []byte("{\"served\":1}\x00\xff"), Stream: 7, Relay: "r1", CPUNs: 1234567},
		Logs:     []program.LogEntry{{Time: time.Unix(1700000000, 123456789).UTC(), Level: "warn", Message: "line\nwith a newline \x00 and a NUL"}},
		Fault:    &Fault{Code: fault.Timeout, Message: "slow", Collateral: true},
	}
}

// Both invocation frames come back as they were sent, strings with any
// bytes in them included.
func TestInvokeFramesRoundTrip(t *testing.T) {
	req := InvokeRequest{ID: "h-1", Name: "fetch", Request: program.WireRequest{
		Method: "POST", URL: "http://x.apps.localhost/a?b=c", Headers: [][2]string{{"a", "1"}, {"b", ""}}, Body: []byte("hi\x00\x80"), BodyStream: "s"}}
	var got InvokeRequest
	if err := got.DecodeFrame(req.EncodeFrame()); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, req) {
		t.Fatalf("request: got %+v, want %+v", got, req)
	}
	rep := sampleReply()
	var back InvokeReply
	if err := back.DecodeFrame(rep.EncodeFrame()); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, rep) {
		t.Fatalf("reply: got %+v, want %+v", back, rep)
	}
	// No body and no fault stay absent (null body, no error).
	empty := InvokeReply{Response: program.WireResponse{Status: 204, Headers: [][2]string{}}}
	back = InvokeReply{}
	if err := back.DecodeFrame(empty.EncodeFrame()); err != nil || back.Response.Body != nil || back.Fault != nil || back.Response.Status != 204 {
		t.Fatalf("empty reply: %+v, %v", back, err)
	}
	// An empty body is a body: it stays present, apart from none.
	emptyBody := InvokeReply{Response: program.WireResponse{Status: 200, Headers: [][2]string{}, Body: []byte{}}}
	back = InvokeReply{}
	if err := back.DecodeFrame(emptyBody.EncodeFrame()); err != nil || back.Response.Body == nil || len(back.Response.Body) != 0 {
		t.Fatalf("empty body: %+v, %v", back, err)
	}
}

// A worker is hostile: every cut of a reply, bytes after it, another
// version or a count larger than the frame is refused, and a count never
// makes the decoder allocate past the frame's own size.
func TestInvokeReplyFromAHostileWorker(t *testing.T) {
	refusesMangled(t, "a reply", sampleReply().EncodeFrame(), func(b []byte) error {
		var a InvokeReply
		return a.DecodeFrame(b)
	})
	var a InvokeReply
	// status, statusText "", then a header count of 2^40.
	huge := []byte{invokeReplyVersion}
	huge = binary.AppendVarint(huge, 200)
	huge = binary.AppendUvarint(huge, 0)
	huge = binary.AppendVarint(huge, 1<<40)
	refusesCheaply(t, "a header count past the frame", huge, 2, func(b []byte) error {
		var a InvokeReply
		return a.DecodeFrame(b)
	})
	// A string length past the frame.
	long := []byte{invokeReplyVersion}
	long = binary.AppendVarint(long, 200)
	long = binary.AppendUvarint(long, 1<<62)
	if a.DecodeFrame(long) == nil {
		t.Fatal("a string past the frame was accepted")
	}
}

// refusesCheaply checks that decode refuses frame (what names it) with at
// most max allocations: a count or length the frame cannot hold is never
// allocated for.
func refusesCheaply(t *testing.T, what string, frame []byte, max float64, decode func([]byte) error) {
	t.Helper()
	allocs := testing.AllocsPerRun(10, func() {
		if decode(frame) == nil {
			t.Fatalf("%s was accepted", what)
		}
	})
	if allocs > max {
		t.Fatalf("%s cost %v allocations", what, allocs)
	}
}

// refusesMangled checks that decode refuses every cut of a well-formed
// binary frame, the frame with a byte left over, and the frame of another
// version (what, such as "a reply", names it in a failure).
func refusesMangled(t *testing.T, what string, frame []byte, decode func([]byte) error) {
	t.Helper()
	for i := 0; i < len(frame); i++ {
		if decode(frame[:i]) == nil {
			t.Fatalf("%s cut at %d of %d bytes was accepted", what, i, len(frame))
		}
	}
	if decode(append(append([]byte{}, frame...), 0)) == nil {
		t.Fatalf("%s with a byte left over was accepted", what)
	}
	other := append([]byte{}, frame...)
	other[0]++
	if decode(other) == nil {
		t.Fatalf("%s of another version was accepted", what)
	}
}

func FuzzInvokeReplyDecode(f *testing.F) {
	f.Add(sampleReply().EncodeFrame())
	f.Add([]byte{invokeReplyVersion})
	f.Fuzz(func(t *testing.T, b []byte) {
		var a InvokeReply
		if a.DecodeFrame(b) != nil {
			return
		}
		// What decodes encodes back to the same bytes.
		var again InvokeReply
		if err := again.DecodeFrame(a.EncodeFrame()); err != nil || !reflect.DeepEqual(a, again) {
			t.Fatalf("decoded %+v, re-encoded to %+v (%v)", a, again, err)
		}
	})
}

func BenchmarkInvokeReplyCodec(b *testing.B) {
	rep := sampleReply()
	rep.Logs, rep.Fault = nil, nil
	b.Run("binary", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			var a InvokeReply
			if err := a.DecodeFrame(rep.EncodeFrame()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) { // what these frames were before
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			var a InvokeReply
			data, _ := wirejson.Marshal(rep)
			if err := json.Unmarshal(data, &a); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A stream read's answer comes back as it was sent (a chunk with any bytes,
// the end, a fault), and a worker's mangled one is refused.
func TestStreamReplyFrame(t *testing.T) {
	for _, rep := range []StreamReply{
		{Data: []byte("data: x\n\n\x00\xff")},
		{Data: []byte{}, Done: true},
		{Data: []byte{}, Done: true, Fault: &Fault{Code: fault.Timeout, Message: "slow"}},
	} {
		var back StreamReply
		if err := back.DecodeFrame(rep.EncodeFrame()); err != nil || !reflect.DeepEqual(back, rep) {
			t.Fatalf("stream reply: got %+v (%v), want %+v", back, err, rep)
		}
	}
	refusesMangled(t, "a stream reply", StreamReply{Data: []byte("chunk"), Fault: &Fault{Code: fault.Timeout, Message: "slow"}}.EncodeFrame(), func(b []byte) error {
		var a StreamReply
		return a.DecodeFrame(b)
	})
}
