package wirejson

import (
	"math"
	"math/rand/v2"
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

// AppendString and AppendFloat write the bytes Marshal writes: fixed
// cases, then every byte value and random strings and floats.
func TestAppendMatchesMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(62, 1))
	strs := []string{"", "plain", "<>&", "\x00\x01\x1f\x7f", "\"\\\n\r\t\b\f", "é漢🙂", "\u2028\u2029", "bad\xffutf8\xc3", "\xe2\x80", "\xed\xa0\x80"}
	for c := range 256 {
		strs = append(strs, string([]byte{byte(c)}), "a"+string([]byte{byte(c)})+"b")
	}
	pieces := []string{"a", "\"", "\\", "\n", "\x01", "é", "\u2028", "\xff", "<", "🙂", "\xf0\x9f"}
	for range 2000 {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		strs = append(strs, b.String())
	}
	for _, s := range strs {
		want, err := Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Errorf("AppendString(%q) = %s, Marshal %s", s, got[1:], want)
		}
	}
	floats := []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 1e-6, 9.99e-7, 1e-7, 1e-10, 1e20, 1e21, 1.5e21, 123.456, math.MaxFloat64, math.SmallestNonzeroFloat64, 1e-100, -3e-9}
	for range 2000 {
		floats = append(floats, rng.NormFloat64()*math.Pow(10, float64(rng.IntN(60)-30)))
	}
	for _, f := range floats {
		want, _ := Marshal(f)
		if got, ok := AppendFloat(nil, f); !ok || string(got) != string(want) {
			t.Errorf("AppendFloat(%v) = %s, Marshal %s", f, got, want)
		}
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, ok := AppendFloat(nil, f); ok {
			t.Errorf("AppendFloat(%v) answered, Marshal refuses it", f)
		}
	}
}
