package text

import (
	"testing"

	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/sandbox/webapi"
)

func call(t *testing.T, s webapi.Session, name string, args ...string) (string, error) {
	t.Helper()
	return API.Run(s, name, args...)
}

// A session keeps a streaming decoder's unfinished bytes between calls
// (a Shift_JIS character cut in two) and a compression stream between its
// chunks, without an isolate; Close ends the streams it holds.
func TestSessionsKeepStreams(t *testing.T) {
	s := API.NewSession()
	if name, _ := call(t, nil, "encodingName", "sjis"); name != "shift_jis" {
		t.Fatalf("the label sjis resolved to %q", name)
	}
	// あ in Shift_JIS is 0x82 0xA0, sent a byte at a time.
	first, err := call(t, s, "decodeLegacy", "1", "shift_jis", wirejson.Latin1([]byte{0x82}), "true")
	if err != nil || first != "" {
		t.Fatalf("the first half: %q %v", first, err)
	}
	second, err := call(t, s, "decodeLegacy", "1", "shift_jis", wirejson.Latin1([]byte{0xa0}), "false")
	if err != nil || second != "あ" {
		t.Fatalf("the second half: %q %v", second, err)
	}
	if _, err := call(t, s, "codecInit", "7", "gzip", "true"); err != nil {
		t.Fatal(err)
	}
	packed, err := call(t, s, "codecChunk", "7", "hello, hello, hello", "true")
	if err != nil || len(packed) == 0 {
		t.Fatalf("compressing: %v", err)
	}
	call(t, s, "codecInit", "8", "gzip", "false")
	out, err := call(t, s, "codecChunk", "8", packed, "true")
	if err != nil || string(wirejson.Latin1Bytes(out)) != "hello, hello, hello" {
		t.Fatalf("decompressing: %q %v", out, err)
	}
	call(t, s, "codecInit", "9", "deflate", "false")
	s.Close()
	if _, err := call(t, s, "codecChunk", "9", "", "true"); err == nil {
		t.Fatal("a stream outlived its session's Close")
	}
}
