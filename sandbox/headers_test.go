package sandbox

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/retainer-gw/retainer/program"
)

// TestHeaderChecksRemembered: the runtime remembers the header names and
// values it has checked (so the regular expressions run once per distinct
// string), and what it remembers never lets through what the check refuses
// or changes what it answers: a name's case, a value's trimming, a bad
// string after a good one, and more distinct strings than it keeps.
func TestHeaderChecksRemembered(t *testing.T) {
	runCases(t, []jsCase{
		{"names come out lower case each time", `() => { const h = new Headers(); h.set('X-Mixed', 'a'); h.set('x-mixed', 'b'); h.append('X-MIXED', 'c'); return [...h] }`, `[["x-mixed","b, c"]]`},
		{"a value with whitespace is trimmed each time", `() => { const h = new Headers(); h.set('a', ' v '); h.set('b', ' v '); h.set('c', 'v'); return [...h] }`, `[["a","v"],["b","v"],["c","v"]]`},
		{"a bad name after good ones throws", `() => { const h = new Headers(); h.set('ok', '1'); try { h.set('bad name', '1'); return 'accepted' } catch (e) { return e.constructor.name } }`, `"TypeError"`},
		{"a bad value after good ones throws", `() => { const h = new Headers(); h.set('a', 'x'); h.set('a', 'x'); try { h.set('a', 'x\ny'); return 'accepted' } catch (e) { return e.constructor.name } }`, `"TypeError"`},
		{"more distinct strings than are kept", `() => { const seen = []; for (let i = 0; i < 600; i++) { const h = new Headers(); h.append('X-N' + i, ' v' + i); h.append('Y', 'w' + i); seen.push(h.get('x-n' + i) === 'v' + i && h.get('y') === 'w' + i); } let bad = 0; for (const s of ['a b', 'c\u0100']) { try { new Headers().set(s, 'v'); } catch (e) { bad++ } try { new Headers().set('ok', s + '\rx'); } catch (e) { bad++ } } return [seen.every(Boolean), bad] }`, `[true,4]`},
		{"what a program changes does not reach what is remembered", `() => { const h = new Headers(); h.set('ok', 'v'); Map.prototype.get = () => 'x'; Set.prototype.has = () => true; Object.defineProperty(Object.prototype, 'bad name', { get() { return 'x' } }); Object.defineProperty(Object.prototype, 'v\nw', { get() { return true } }); let bad = 0; try { h.set('bad name', 'v'); } catch (e) { bad++ } try { h.set('ok', 'v\nw'); } catch (e) { bad++ } return [bad, h.get('ok')] }`, `[2,"v"]`},
		{"set keeps one of each name", `() => { const h = new Headers([['a', '1'], ['b', '2'], ['a', '3']]); h.set('a', '4'); return [...h] }`, `[["a","4"],["b","2"]]`},
		{"a number converts the same way twice", `() => { const h = new Headers(); h.set('n', 1); h.set('m', 1); return [h.get('n'), h.get('m'), h.has('N'), h.has('z')] }`, `["1","1",true,false]`},
	})
}

// An invocation's request headers are made from its lines the first time
// the handler asks for them (webapi/fetch/17-request.js, #hdrs): whenever
// that is (after an await, never, through a copy), they are the
// gateway's, each invocation its own, and one object.
func TestInvocationHeadersMadeWhenAsked(t *testing.T) {
	id := deploy(t, `async () => { let kept; return { async fetch(request) {
		const url = new URL(request.url);
		if (url.pathname === '/never') return new Response('none read');
		if (url.pathname === '/kept') return Response.json([...kept.headers]);
		await new Promise(r => setTimeout(r, 1));
		if (url.pathname === '/keep') { kept = request; return new Response('kept'); }
		const copy = new Request(request), cloned = request.clone();
		request.headers.set('x-added', 'by the handler');
		return Response.json({
			same: request.headers === request.headers,
			all: [...request.headers],
			accept: request.headers.get('accept'),
			copy: [...copy.headers], cloned: [...cloned.headers],
			added: copy.headers.has('x-added') || cloned.headers.has('x-added'),
		});
	} } }`)
	defer engine(t).Close(id)
	invoke := func(path string, headers [][2]string) string {
		t.Helper()
		res, err := engine(t).Invoke(context.Background(), id, "fetch", program.NewWireRequest("GET", "https://x.test"+path, headers, nil))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return string(res.BodyBytes())
	}
	first := [][2]string{{"host", "x.test"}, {"accept", "text/html"}, {"x-b", " padded\t"}, {"X-A", "one"}}
	if got := invoke("/never", first); got != "none read" {
		t.Fatalf("/never: %s", got)
	}
	want := `{"same":true,"all":[["accept","text/html"],["host","x.test"],["x-a","one"],["x-added","by the handler"],["x-b","padded"]],"accept":"text/html",` +
		`"copy":[["accept","text/html"],["host","x.test"],["x-a","one"],["x-b","padded"]],"cloned":[["accept","text/html"],["host","x.test"],["x-a","one"],["x-b","padded"]],"added":false}`
	if got := invoke("/", first); got != want {
		t.Fatalf("headers:\n got %s\nwant %s", got, want)
	}
	// A request kept past its invocation keeps its own headers, read
	// only after later invocations with others came and went.
	if got := invoke("/keep", [][2]string{{"host", "x.test"}, {"x-kept", "1"}}); got != "kept" {
		t.Fatal(got)
	}
	invoke("/never", [][2]string{{"host", "x.test"}, {"x-other", "2"}})
	if got := invoke("/kept", nil); got != `[["host","x.test"],["x-kept","1"]]` {
		t.Fatalf("kept request's headers: %s", got)
	}
}

// Response.json's own headers are made only when the program asks for
// them (webapi/fetch/18-response.js): an answer whose headers were never
// made, one whose headers were read or changed, a clone, and one with
// headers of its own all leave with what the program would read.
func TestResponseJSONHeadersMadeWhenAsked(t *testing.T) {
	id := deploy(t, `async () => ({ fetch(request) {
		const path = new URL(request.url).pathname;
		const r = path === '/init' ? Response.json({a: 1}, {headers: {'x-own': '1'}}) : Response.json({a: 1});
		if (path === '/changed') r.headers.set('x-added', 'yes');
		if (path === '/read' && (r.headers !== r.headers || r.headers.get('content-type') !== 'application/json')) return new Response('wrong');
		return path === '/clone' ? r.clone() : r;
	} })`)
	defer engine(t).Close(id)
	for path, want := range map[string]string{
		"/":        `[["content-type","application/json"]]`,
		"/read":    `[["content-type","application/json"]]`,
		"/changed": `[["content-type","application/json"],["x-added","yes"]]`,
		"/clone":   `[["content-type","application/json"]]`,
		"/init":    `[["content-type","application/json"],["x-own","1"]]`,
	} {
		res, err := get(t, id, "https://x.test"+path)
		if err != nil || string(res.BodyBytes()) != `{"a":1}` {
			t.Fatalf("%s: %v %q", path, err, res.BodyBytes())
		}
		got, _ := json.Marshal(res.Headers)
		if string(got) != want {
			t.Fatalf("%s: headers %s, want %s", path, got, want)
		}
	}
}
