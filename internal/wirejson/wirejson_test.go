package wirejson

import (
	"strings"
	"testing"
)

func TestStringLenMatchesMarshal(t *testing.T) {
	for _, s := range []string{"", "plain", "<>&", "\x00\x01\x1f", "\"\\\n\r\t\b\f", "é漢🙂", "\u2028\u2029", "bad\xffutf8\xc3", strings.Repeat("<", 1000)} {
		b, err := Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := StringLen(s); got != len(b) {
			t.Errorf("StringLen(%q) = %d, Marshal made %d bytes (%s)", s, got, len(b), b)
		}
	}
}

func TestMarshalDoesNotEscapeHTML(t *testing.T) {
	b, _ := Marshal(map[string]string{"a": "<b>&"})
	if string(b) != `{"a":"<b>&"}` {
		t.Fatalf("got %s", b)
	}
}

func TestCutFitsTheBound(t *testing.T) {
	s := strings.Repeat("a\x01é", 100)
	for max := 2; max < 400; max += 7 {
		cut, _ := Cut(s, max)
		if StringLen(cut) > max {
			t.Fatalf("Cut(%d) encodes to %d", max, StringLen(cut))
		}
		if !strings.HasPrefix(s, cut) {
			t.Fatal("not a prefix")
		}
	}
	if c, cutIt := Cut("short", 100); c != "short" || cutIt {
		t.Fatal("cut a string that fits")
	}
}

func TestLatin1RoundTrip(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	b, ok := Latin1BytesChecked(Latin1(all))
	if !ok || string(b) != string(all) {
		t.Fatalf("round trip: %v %v", ok, b)
	}
	if _, ok := Latin1BytesChecked("a\u0100"); ok {
		t.Fatal("a character past U+00FF passed as Latin-1")
	}
	// Every string, valid UTF-8 or not, reads as ranging over it reads:
	// each rune's low byte, ok while none is past U+00FF.
	for _, s := range []string{"", "abc", "\u00e9t\u00e9", "x\u00ff\u0100y", "\xc3", "\xc3(", "a\xffb", "\xc2\x80\xc3\xbf", "\u20ac\U0001F600", "\xe2\x82"} {
		var want []byte
		wantOK := true
		for _, r := range s {
			want = append(want, byte(r))
			wantOK = wantOK && r <= 0xff
		}
		got, ok := Latin1BytesChecked(s)
		if string(got) != string(want) || ok != wantOK {
			t.Fatalf("%q: got % x %v, want % x %v", s, got, ok, want, wantOK)
		}
	}
}

// IsASCII finds a byte at or above 0x80 wherever it is, in the 8-byte
// steps or the tail; and an ASCII body's Latin-1 string is the body.
func TestIsASCII(t *testing.T) {
	for n := 0; n < 20; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + i)
		}
		if !IsASCII(b) || Latin1(b) != string(b) {
			t.Fatalf("%d ASCII bytes: not ASCII", n)
		}
		for i := 0; i < n; i++ {
			c := append([]byte(nil), b...)
			c[i] = 0x80
			if IsASCII(c) {
				t.Fatalf("0x80 at %d of %d: called ASCII", i, n)
			}
			if got := Latin1Bytes(Latin1(c)); string(got) != string(c) {
				t.Fatalf("0x80 at %d of %d: Latin-1 round trip %q", i, n, got)
			}
		}
	}
}
