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
}
