package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
)

// whatwgUTF8 is the Encoding Standard's UTF-8 decoder, written from the
// standard's steps: the reference the native conversions (natives.cc) are
// held to. Each maximal subpart of an invalid sequence becomes one U+FFFD.
func whatwgUTF8(b []byte) string {
	var out strings.Builder
	needed, seen, cp := 0, 0, 0
	lower, upper := byte(0x80), byte(0xbf)
	for i := 0; i < len(b); {
		c := b[i]
		if needed == 0 {
			i++
			switch {
			case c < 0x80:
				out.WriteByte(c)
			case c >= 0xc2 && c <= 0xdf:
				needed, cp = 1, int(c&0x1f)
			case c >= 0xe0 && c <= 0xef:
				if c == 0xe0 {
					lower = 0xa0
				}
				if c == 0xed {
					upper = 0x9f
				}
				needed, cp = 2, int(c&0xf)
			case c >= 0xf0 && c <= 0xf4:
				if c == 0xf0 {
					lower = 0x90
				}
				if c == 0xf4 {
					upper = 0x8f
				}
				needed, cp = 3, int(c&0x7)
			default:
				out.WriteRune(utf8.RuneError)
			}
			continue
		}
		if c < lower || c > upper {
			// The byte is not consumed: it starts over.
			needed, seen, cp = 0, 0, 0
			lower, upper = 0x80, 0xbf
			out.WriteRune(utf8.RuneError)
			continue
		}
		i++
		lower, upper = 0x80, 0xbf
		cp = cp<<6 | int(c&0x3f)
		if seen++; seen == needed {
			out.WriteRune(rune(cp))
			needed, seen, cp = 0, 0, 0
		}
	}
	if needed != 0 {
		out.WriteRune(utf8.RuneError)
	}
	return out.String()
}

// randomUTF8ish is bytes that are mostly near UTF-8: lead bytes of every
// length, the edges of the ranges the standard cuts (C0, C1, E0 80, ED A0,
// F0 80, F4 90, F5), continuations, ASCII, and cut sequences.
func randomUTF8ish(r *rand.Rand) []byte {
	edges := []byte{0x00, 0x41, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf3, 0xf4, 0xf5, 0xfe, 0xff}
	n := r.Intn(12)
	b := make([]byte, 0, n*4)
	for range n {
		switch r.Intn(4) {
		case 0:
			b = append(b, edges[r.Intn(len(edges))])
		case 1:
			b = utf8.AppendRune(b, rune(r.Intn(0x110000)))
		case 2:
			full := utf8.AppendRune(nil, rune(0x80+r.Intn(0x10ff80)))
			b = append(b, full[:1+r.Intn(len(full))]...) // perhaps cut
		default:
			b = append(b, byte(r.Intn(256)))
		}
	}
	return b
}

// The native UTF-8 decoding answers what the Encoding Standard's decoder
// does, byte for byte, through TextDecoder (and its fatal mode) and
// through a body read as text (Response.text, which drops a leading byte
// order mark), for 3,000 sequences made to hit every invalid case.
func TestNativeUTF8MatchesTheStandard(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	cases := make([][]int, 3000)
	for i := range cases {
		for _, c := range randomUTF8ish(r) {
			cases[i] = append(cases[i], int(c))
		}
	}
	cases = append(cases, []int{0xef, 0xbb, 0xbf, 0x41}, []int{0xef, 0xbf, 0xbd}, []int{})
	in, _ := json.Marshal(cases)
	out := mustRunLong(t, `async () => {
		const d = new TextDecoder(), f = new TextDecoder('utf-8', {fatal: true, ignoreBOM: true}), keep = new TextDecoder('utf-8', {ignoreBOM: true});
		const res = [];
		for (const c of `+string(in)+`) {
			const b = new Uint8Array(c);
			let fatal;
			try { fatal = f.decode(b) } catch (e) { fatal = e.name }
			res.push([d.decode(b), keep.decode(b), fatal, await new Response(b).text()]);
		}
		return res;
	}`)
	var got [][4]string
	if err := json.Unmarshal(out.Result, &got); err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		b := make([]byte, len(c))
		for j, x := range c {
			b[j] = byte(x)
		}
		kept := whatwgUTF8(b)
		dropped := strings.TrimPrefix(kept, "\ufeff")
		fatal := kept // Go's utf8.Valid is the standard's well-formed UTF-8
		if !utf8.Valid(b) {
			fatal = "TypeError"
		}
		want := [4]string{dropped, kept, fatal, dropped}
		if got[i] != want {
			t.Fatalf("% x: got %q, want %q", b, got[i], want)
		}
	}
}

// TextEncoder and every string made into bytes write UTF-8 with each lone
// surrogate as U+FFFD (what Go's utf16.Decode does), through encode,
// encodeInto (whole and cut short) and a text body read as bytes.
func TestNativeUTF8EncodeMatchesTheStandard(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	cases := make([][]uint16, 2000)
	for i := range cases {
		cases[i] = []uint16{}
		for range r.Intn(10) {
			switch r.Intn(4) {
			case 0:
				cases[i] = append(cases[i], uint16(0xd800+r.Intn(0x800))) // a surrogate, maybe paired by luck
			case 1:
				hi, lo := utf16.EncodeRune(rune(0x10000 + r.Intn(0x100000)))
				cases[i] = append(cases[i], uint16(hi), uint16(lo))
			case 2:
				cases[i] = append(cases[i], uint16(r.Intn(0x80)))
			default:
				cases[i] = append(cases[i], uint16(r.Intn(0x10000)))
			}
		}
	}
	in, _ := json.Marshal(cases)
	out := mustRunLong(t, `async () => {
		const e = new TextEncoder(), res = [];
		for (const units of `+string(in)+`) {
			const s = String.fromCharCode(...units);
			const whole = e.encode(s);
			const into = new Uint8Array(whole.length + 2), cut = new Uint8Array(Math.max(0, whole.length - 2));
			const a = e.encodeInto(s, into), c = e.encodeInto(s, cut);
			const body = new Uint8Array(await new Response(s).arrayBuffer());
			res.push([Array.from(whole), a.read, a.written, Array.from(into.subarray(0, a.written)), c.read, c.written, Array.from(cut.subarray(0, c.written)), Array.from(body)]);
		}
		return res;
	}`)
	var got [][8]json.RawMessage
	if err := json.Unmarshal(out.Result, &got); err != nil {
		t.Fatal(err)
	}
	bytesOf := func(raw json.RawMessage) []byte {
		var xs []int
		json.Unmarshal(raw, &xs)
		b := make([]byte, len(xs))
		for i, x := range xs {
			b[i] = byte(x)
		}
		return b
	}
	numOf := func(raw json.RawMessage) int {
		var n int
		json.Unmarshal(raw, &n)
		return n
	}
	for i, units := range cases {
		want := []byte(string(utf16.Decode(units)))
		g := got[i]
		if string(bytesOf(g[0])) != string(want) || string(bytesOf(g[7])) != string(want) {
			t.Fatalf("%04x: encode % x, body % x, want % x", units, bytesOf(g[0]), bytesOf(g[7]), want)
		}
		if numOf(g[1]) != len(units) || numOf(g[2]) != len(want) || string(bytesOf(g[3])) != string(want) {
			t.Fatalf("%04x: encodeInto with room read %s wrote %s", units, g[1], g[2])
		}
		// Cut short: the longest prefix of whole characters that fits.
		room, read, wrote := max(0, len(want)-2), 0, 0
		for read < len(units) {
			n, w := 1, 0
			if u := units[read]; u >= 0xd800 && u <= 0xdbff && read+1 < len(units) && units[read+1] >= 0xdc00 && units[read+1] <= 0xdfff {
				n, w = 2, 4
			} else {
				w = len(string(utf16.Decode(units[read : read+1])))
			}
			if wrote+w > room {
				break
			}
			read, wrote = read+n, wrote+w
		}
		if numOf(g[4]) != read || numOf(g[5]) != wrote || string(bytesOf(g[6])) != string(want[:wrote]) {
			t.Fatalf("%04x into %d bytes: read %s wrote %s, want %d and %d", units, room, g[4], g[5], read, wrote)
		}
	}
}

// Bytes cross to the host and back as Latin-1 strings (natives.cc's latin1
// and writeLatin1): every byte value survives the trip, checked by a
// digest of all 256 made in Go, and by bytes a handler echoes.
func TestNativeLatin1RoundTrip(t *testing.T) {
	all := make([]byte, 256*3)
	for i := range all {
		all[i] = byte(i)
	}
	sum := sha256.Sum256(all)
	out := mustRun(t, `async () => {
		const b = new Uint8Array(768);
		for (let i = 0; i < b.length; i++) b[i] = i;
		const d = new Uint8Array(await crypto.subtle.digest('SHA-256', b.subarray(0, 768)));
		const small = new Uint8Array(await crypto.subtle.digest('SHA-256', new Uint8Array(0)));
		return [Array.from(d, x => x.toString(16).padStart(2, '0')).join(''), Array.from(small, x => x.toString(16).padStart(2, '0')).join('')];
	}`)
	empty := sha256.Sum256(nil)
	want := fmt.Sprintf("[%q,%q]", hex.EncodeToString(sum[:]), hex.EncodeToString(empty[:]))
	if string(out.Result) != want {
		t.Fatalf("got %s, want %s", out.Result, want)
	}
	e := engine(t)
	if _, err := e.Run(context.Background(), program.Job{ID: "latin1-echo", RetainHandles: true, Program: program.Program{Code: `async () => ({ async fetch(req) { const b = new Uint8Array(await req.arrayBuffer()); return new Response(b.subarray(1)) } })`}}); err != nil {
		t.Fatal(err)
	}
	defer e.Close("latin1-echo")
	res, err := e.Invoke(context.Background(), "latin1-echo", "fetch", program.NewWireRequest("POST", "https://x.test/", nil, append([]byte{0}, all...)))
	if err != nil || string(res.BodyBytes()) != string(all) {
		t.Fatalf("echo: %v, % x", err, res.BodyBytes())
	}
}

// The conversions are the bootstrap's alone: a program finds no trace of
// them, and arguments they were not made for take the JavaScript path
// with its usual answers.
func TestNativesStayInTheRuntime(t *testing.T) {
	runCases(t, []jsCase{
		{"no global", `async () => [typeof __retainerNatives, Object.getOwnPropertyNames(globalThis).filter(n => /native/i.test(n))]`, `["undefined",[]]`},
		{"encodeInto into a view of another type", `async () => { try { new TextEncoder().encodeInto('a', new Uint16Array(2)); return 'no' } catch (e) { return e.name } }`, `"TypeError"`},
		{"decode a DataView", `async () => new TextDecoder().decode(new DataView(new TextEncoder().encode('h€').buffer))`, `"h€"`},
		{"decode part of a buffer", `async () => new TextDecoder().decode(new TextEncoder().encode('xxh€yy').subarray(2, 6))`, `"h€"`},
		{"encode a non-string", `async () => Array.from(new TextEncoder().encode({ toString() { return 'é' } }))`, `[195,169]`},
	})
}

// forgivingBase64 is the Infra standard's forgiving-base64 decode, from its
// steps (ok false: failure), the reference atob is held to.
func forgivingBase64(s string) ([]byte, bool) {
	s = strings.Map(func(r rune) rune {
		if strings.ContainsRune("\t\n\f\r ", r) {
			return -1
		}
		return r
	}, s)
	if len(s)%4 == 0 {
		s = strings.TrimSuffix(s, "=")
		s = strings.TrimSuffix(s, "=")
	}
	if len(s)%4 == 1 || strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") != "" {
		return nil, false
	}
	b, err := base64.RawStdEncoding.DecodeString(s) // not strict: a partial byte's bits are ignored
	return b, err == nil
}

// btoa and atob (and every base64 the runtime makes or reads) answer what
// Go's encoder and the standard's forgiving decoder do: 1,000 byte strings
// encoded, 3,000 strings of base64 characters, whitespace, padding in and
// out of place, stray and non-Latin-1 characters decoded.
func TestNativeBase64MatchesTheStandard(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	enc := make([]string, 1000)
	for i := range enc {
		b := make([]byte, r.Intn(40))
		r.Read(b)
		enc[i] = string(b)
	}
	alphabet := []rune("ABCZaz09+/= \t\n\f\r=-_*\u00e9\u20ac\x00")
	dec := make([]string, 3000)
	for i := range dec {
		if i%2 == 0 { // valid base64, then perhaps disturbed
			b := make([]byte, r.Intn(30))
			r.Read(b)
			dec[i] = base64.StdEncoding.EncodeToString(b)
			if r.Intn(2) == 0 && len(dec[i]) > 0 {
				k := r.Intn(len(dec[i]) + 1)
				dec[i] = dec[i][:k] + string(alphabet[r.Intn(len(alphabet))]) + dec[i][k:]
			}
			continue
		}
		var sb strings.Builder
		for range r.Intn(12) {
			sb.WriteRune(alphabet[r.Intn(len(alphabet))])
		}
		dec[i] = sb.String()
	}
	latin1 := func(s string) string { // the JavaScript string whose characters are s's bytes
		u := make([]rune, len(s))
		for i := 0; i < len(s); i++ {
			u[i] = rune(s[i])
		}
		return string(u)
	}
	encJS := make([]string, len(enc))
	for i, e := range enc {
		encJS[i] = latin1(e)
	}
	in, _ := json.Marshal([2][]string{encJS, dec})
	out := mustRunLong(t, `async () => {
		const [enc, dec] = `+string(in)+`;
		return [enc.map(s => btoa(s)), dec.map(s => { try { return Array.from(atob(s), c => c.charCodeAt(0)) } catch (e) { return e.name } })];
	}`)
	var got [2][]json.RawMessage
	if err := json.Unmarshal(out.Result, &got); err != nil {
		t.Fatal(err)
	}
	for i, e := range enc {
		want, _ := json.Marshal(base64.StdEncoding.EncodeToString([]byte(e)))
		if string(got[0][i]) != string(want) {
			t.Fatalf("btoa(% x) = %s, want %s", e, got[0][i], want)
		}
	}
	for i, d := range dec {
		want := []byte(`"InvalidCharacterError"`)
		if b, ok := forgivingBase64(d); ok {
			xs := make([]int, len(b))
			for j, c := range b {
				xs[j] = int(c)
			}
			want, _ = json.Marshal(xs)
		}
		if string(got[1][i]) != string(want) {
			t.Fatalf("atob(%q) = %s, want %s", d, got[1][i], want)
		}
	}
}

// mustRunLong is mustRun with a bound long enough for a test's loop.
func mustRunLong(t *testing.T, code string) program.Outcome {
	t.Helper()
	out, err := engine(t).Run(context.Background(), program.Job{Timeout: 20 * time.Second, Program: program.Program{Code: code}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Large inputs end in an answer or in the isolate's MEMORY bound, never in
// a crash of the process: the natives allocate no buffer a program sizes
// but through V8, and their scratch buffers are bounded by strings the
// heap already holds.
func TestNativesUnderLargeInputs(t *testing.T) {
	for name, code := range map[string]string{
		"encode 40 MB":       `async () => new TextEncoder().encode('\u00e9'.repeat(20e6)).length`,
		"btoa 20 MB":         `async () => btoa('\u00e9'.repeat(20e6)).length`,
		"atob 40 MB":         `async () => atob('QUJD'.repeat(10e6)).length`,
		"atob 40 MB invalid": `async () => { try { atob('QUJD'.repeat(10e6) + '*') } catch (e) { return e.name } }`,
		"text of 30 MB":      `async () => (await new Response(new Uint8Array(30e6).fill(0xc3)).text()).length`,
	} {
		t.Run(name, func(t *testing.T) {
			out, err := engine(t).Run(context.Background(), program.Job{Timeout: 20 * time.Second, Program: program.Program{Code: code}})
			if err != nil {
				wantFault(t, err, fault.Memory, fault.OutOfMemory(64).Message)
			} else if len(out.Result) == 0 {
				t.Fatal("no answer")
			}
			t.Logf("%s: %s %v", name, out.Result, err)
			afterHostile(t)
		})
	}
}
