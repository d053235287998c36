package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

func sampleHello(st *Startup) HelloRequest {
	return HelloRequest{Version: ProtocolVersion, Config: WorkerConfig{Landlock: true, Seccomp: true, FrameCap: 1 << 20, Engine: EngineConfig{Prewarm: 2}}, Startup: st, WantStartup: st == nil}
}

// A hello crosses whole: its settings in JSON, its startup's bytes as
// they were; one without a startup too.
func TestHelloCrossesWhole(t *testing.T) {
	st := &Startup{Snapshot: bytes.Repeat([]byte{0, 1, 0xff, '"'}, 100_000), Sum: []byte("sum"), Modules: map[string][]byte{"a.js": []byte("cache a"), "b.js": {}, "c.js": bytes.Repeat([]byte{7}, 5000)}}
	for _, h := range []HelloRequest{sampleHello(st), sampleHello(nil)} {
		got, err := DecodeHello(h.EncodeFrame())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, h) {
			t.Fatalf("decoded %+v, sent %+v", got.Config, h.Config)
		}
	}
}

// A hello cut short or with bytes after it is refused, never read in
// part: cut anywhere but right after its settings (a hello without a
// startup), it is an error.
func TestATruncatedHelloIsRefused(t *testing.T) {
	st := &Startup{Snapshot: []byte("snapshot"), Sum: []byte("sum"), Modules: map[string][]byte{"a.js": []byte("cache")}}
	frame := sampleHello(st).EncodeFrame()
	head, _, _ := takeBytes(frame)
	settings := bytes.Index(frame, head) + len(head) // the bytes before the startup
	for n := 0; n < len(frame); n++ {
		h, err := DecodeHello(frame[:n])
		if n == settings {
			if err != nil || h.Startup != nil {
				t.Fatalf("the settings alone: %+v %v", h.Startup, err)
			}
			continue
		}
		if err == nil {
			t.Fatalf("a hello cut at %d of %d bytes was read", n, len(frame))
		}
	}
	if _, err := DecodeHello(append(frame, 0)); err == nil {
		t.Fatal("a hello with a byte after it was read")
	}
}

// go test ./workers/wire -run ^$ -bench HelloCodec: a ~490 KB startup
// in the hello's JSON against its binary form, encoded and decoded.
func BenchmarkHelloCodec(b *testing.B) {
	st := &Startup{Snapshot: bytes.Repeat([]byte{1, 2, 3, 4}, 96_000), Sum: make([]byte, 32), Modules: map[string][]byte{"a": make([]byte, 60_000), "b": make([]byte, 40_000), "c": make([]byte, 8_000)}}
	h := sampleHello(st)
	b.Run("json", func(b *testing.B) {
		for range b.N {
			data, _ := json.Marshal(h)
			var back HelloRequest
			if err := json.Unmarshal(data, &back); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("binary", func(b *testing.B) {
		for range b.N {
			if _, err := DecodeHello(h.EncodeFrame()); err != nil {
				b.Fatal(err)
			}
		}
	})
}
