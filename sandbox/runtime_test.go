package sandbox

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/program"
)

// TestRuntimeSpecs checks the web platform inside a real isolate, case by
// case, from the specs (Fetch, URL, Encoding, DOM, File API, WebCrypto).
func TestRuntimeSpecs(t *testing.T) { checkRuntimeSpecs(t, engine(t)) }

// TestRuntimeSpecsOnTheCompiledRuntime: the same cases where the runtime
// is compiled and installed in each isolate, as when the process's startup
// snapshot could not be made (snapshot.go).
func TestRuntimeSpecsOnTheCompiledRuntime(t *testing.T) {
	e := New(Config{CompiledRuntime: true})
	t.Cleanup(e.Shutdown)
	checkRuntimeSpecs(t, e)
}

func checkRuntimeSpecs(t *testing.T, e *Engine) {
	cases := []struct{ name, code, want string }{
		{"deep recursion ends in a RangeError, the isolate goes on", `() => { const f = (n) => f(n + 1) + 1; let first = 'no'; try { f(0) } catch (e) { first = e.constructor.name } try { f(0); return 'no' } catch (e) { return [first, e.constructor.name, [1, 2].map((x) => x + 1)] } }`, `["RangeError","RangeError",[2,3]]`},
		{"invalid header name", `() => { try { new Headers({'bad name': 'x'}); return 'no' } catch (e) { return e.constructor.name } }`, `"TypeError"`},
		{"invalid header value", `() => { try { new Headers().set('x', 'a\r\nb'); return 'no' } catch (e) { return e.constructor.name } }`, `"TypeError"`},
		{"header combining", `() => { const h = new Headers(); h.append('Accept', 'a'); h.append('accept', 'b'); return h.get('ACCEPT') }`, `"a, b"`},
		{"header value trimmed", `() => new Headers({x: '  v \t'}).get('x')`, `"v"`},
		{"set-cookie kept apart", `() => { const h = new Headers(); h.append('set-cookie', 'a=1'); h.append('set-cookie', 'b=2'); return [h.getSetCookie(), [...h].filter(([k]) => k === 'set-cookie').length] }`, `[["a=1","b=2"],2]`},
		{"headers sorted and lower-cased", `() => [...new Headers([['B', '2'], ['a', '1']])]`, `[["a","1"],["b","2"]]`},
		{"body used twice", `async () => { const r = new Response('x'); await r.text(); try { await r.text(); return 'no' } catch (e) { return [r.bodyUsed, e.constructor.name] } }`, `[true,"TypeError"]`},
		{"clone", `async () => { const r = new Response('hello'); const c = r.clone(); return [await r.text(), await c.text()] }`, `["hello","hello"]`},
		{"clone of a used body", `async () => { const r = new Response('x'); await r.text(); try { r.clone(); return 'no' } catch (e) { return e.constructor.name } }`, `"TypeError"`},
		{"Response.json content type", `async () => { const r = Response.json({a: 1}, {status: 201}); return [r.status, r.headers.get('content-type'), await r.json()] }`, `[201,"application/json",{"a":1}]`},
		{"Response.json defaults", `async () => { const r = Response.json('x'); return [r.status, r.statusText, r.type, r.url, r.ok, r.bodyUsed, [...r.headers], await r.text()] }`, `[200,"","default","",true,false,[["content-type","application/json"]],"\"x\""]`},
		{"Response.json init", `async () => { const r = Response.json({a: 1}, {status: 202, statusText: 'Accepted', headers: {'Content-Type': 'text/x', 'x-a': '1'}}); return [r.status, r.statusText, [...r.headers]] }`, `[202,"Accepted",[["content-type","text/x"],["x-a","1"]]]`},
		{"Response.json bad status", `() => { try { Response.json(1, {status: 99}); return 'no' } catch (e) { return e.constructor.name } }`, `"RangeError"`},
		{"Response.json bad statusText", `() => { try { Response.json(1, {statusText: 'a\nb'}); return 'no' } catch (e) { return e.constructor.name } }`, `"TypeError"`},
		{"Response.json headers are its own", `() => { const r = Response.json(1); const s = Response.json(2); r.headers.set('x', '1'); return s.headers.has('x') }`, `false`},
		{"Request attributes", `() => { const a = new Request('https://x.test/', {mode: 'same-origin', cache: 'no-store', keepalive: true}); const b = new Request(a); const c = new Request('https://x.test/'); return [a.mode, a.cache, a.keepalive, b.mode, b.cache, c.mode, c.cache, c.keepalive, a.clone().cache] }`, `["same-origin","no-store",true,"same-origin","no-store","cors","default",false,"no-store"]`},
		{"randomUUID is a fresh version 4 UUID", `() => { const a = crypto.randomUUID(), b = crypto.randomUUID(); return [/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(a), a !== b] }`, `[true,true]`},
		{"Response.redirect", `() => { const r = Response.redirect('https://x.test/a', 301); return [r.status, r.headers.get('location')] }`, `[301,"https://x.test/a"]`},
		{"Response.redirect bad status", `() => { try { Response.redirect('https://x.test/', 200); return 'no' } catch (e) { return e.constructor.name } }`, `"RangeError"`},
		{"Response status range", `() => { try { new Response('', {status: 600}); return 'no' } catch (e) { return e.constructor.name } }`, `"RangeError"`},
		{"Response.error", `() => { const r = Response.error(); return [r.type, r.status] }`, `["error",0]`},
		{"null body status", `() => { try { new Response('x', {status: 204}); return 'no' } catch (e) { return e.constructor.name } }`, `"TypeError"`},
		{"Request from Request", `async () => { const a = new Request('https://x.test/a', {method: 'POST', body: 'b', headers: {x: '1'}}); const b = new Request(a, {headers: {y: '2'}}); return [b.url, b.method, b.headers.get('x'), b.headers.get('y'), await b.text(), a.bodyUsed] }`, `["https://x.test/a","POST",null,"2","b",true]`},
		{"Request URL normalized", `() => new Request('HTTPS://X.test/a/../b').url`, `"https://x.test/b"`},
		{"Request GET with body", `() => { try { new Request('https://x.test/', {body: 'x'}); return 'no' } catch (e) { return e.constructor.name } }`, `"TypeError"`},
		{"Request method normalized", `() => [new Request('https://x/', {method: 'post'}).method, new Request('https://x/', {method: 'patch'}).method]`, `["POST","patch"]`},
		{"URL and searchParams", `() => { const u = new URL('https://a.test/p?x=1&y=2#h'); u.searchParams.append('z', '3 4'); return [u.href, u.searchParams.get('y'), u.origin] }`, `["https://a.test/p?x=1&y=2&z=3+4#h","2","https://a.test"]`},
		{"TextDecoder invalid UTF-8", `() => new TextDecoder().decode(new Uint8Array([0x61, 0xff, 0x62]))`, "\"a\uFFFDb\""},
		{"TextDecoder fatal", `() => { try { new TextDecoder('utf-8', {fatal: true}).decode(new Uint8Array([0xc3])); return 'no' } catch (e) { return e.constructor.name } }`, `"TypeError"`},
		{"TextEncoder surrogates", `() => [...new TextEncoder().encode('\ud83d\ude00\ud800')]`, `[240,159,152,128,239,191,189]`},
		{"structuredClone types", `() => { const d = new Date(5); const c = structuredClone({m: new Map([[1, 'a']]), s: new Set([2]), d, r: /x/gi, b: new Uint8Array([1, 2]).buffer}); return [c.m.get(1), c.s.has(2), c.d.getTime(), c.d !== d, c.r.flags, new Uint8Array(c.b)[1]] }`, `["a",true,5,true,"gi",2]`},
		{"structuredClone cycles", `() => { const a = {}; a.self = a; const c = structuredClone(a); return c.self === c && c !== a }`, `true`},
		{"structuredClone of a function", `() => { try { structuredClone({f() {}}); return 'no' } catch (e) { return [e.name, e instanceof DOMException] } }`, `["DataCloneError",true]`},
		{"atob invalid", `() => { try { atob('a'); return 'no' } catch (e) { return e.name } }`, `"InvalidCharacterError"`},
		{"atob and btoa", `() => [btoa('\xff\x00a'), atob(' YQ== ')]`, `["/wBh","a"]`},
		{"AbortSignal.timeout", `async () => { const s = AbortSignal.timeout(5); await new Promise(r => setTimeout(r, 20)); return [s.aborted, s.reason.name] }`, `[true,"TimeoutError"]`},
		{"AbortController", `() => { const c = new AbortController(); let seen = 0; c.signal.addEventListener('abort', () => seen++); c.abort('why'); c.abort(); return [c.signal.aborted, c.signal.reason, seen] }`, `[true,"why",1]`},
		{"EventTarget once", `() => { const t = new EventTarget(); let n = 0; t.addEventListener('x', () => n++, {once: true}); t.dispatchEvent(new Event('x')); t.dispatchEvent(new Event('x')); return n }`, `1`},
		{"Blob.slice and text", `async () => { const b = new Blob(['hello ', new Uint8Array([119, 111]), 'rld'], {type: 'Text/Plain'}); return [b.size, b.type, await b.slice(6, -1).text(), await b.slice(-3).text()] }`, `[11,"text/plain","worl","rld"]`},
		{"FormData from urlencoded", `async () => { const f = await new Response('a=1&b=x+y&a=2', {headers: {'content-type': 'application/x-www-form-urlencoded'}}).formData(); return [f.getAll('a'), f.get('b')] }`, `[["1","2"],"x y"]`},
		{"FormData multipart round trip", `async () => { const f = new FormData(); f.append('name', 'Ada'); f.append('file', new Blob(['bytes!'], {type: 'text/plain'}), 'a.txt'); const r = new Request('https://x.test/', {method: 'POST', body: f}); const g = await r.formData(); const file = g.get('file'); return [g.get('name'), file.name, file.type, await file.text(), r.headers.get('content-type').startsWith('multipart/form-data; boundary=')] }`, `["Ada","a.txt","text/plain","bytes!",true]`},
		{"ReadableStream body", `async () => { const s = new ReadableStream({start(c) { c.enqueue(new TextEncoder().encode('ab')); c.enqueue(new TextEncoder().encode('cd')); c.close() }}); return await new Response(s).text() }`, `"abcd"`},
		{"body as stream", `async () => { const r = new Response('stream me'); const reader = r.body.getReader(); const chunks = []; for (;;) { const {value, done} = await reader.read(); if (done) break; chunks.push(...value) } return [new TextDecoder().decode(new Uint8Array(chunks)), r.bodyUsed] }`, `["stream me",true]`},
		{"crypto.subtle.digest", `async () => { const d = await crypto.subtle.digest('SHA-256', new TextEncoder().encode('abc')); return [...new Uint8Array(d)].map(b => b.toString(16).padStart(2, '0')).join('') }`, `"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"`},
		{"crypto.subtle HMAC", `async () => { const k = await crypto.subtle.importKey('raw', new TextEncoder().encode('key'), {name: 'HMAC', hash: 'SHA-256'}, false, ['sign', 'verify']); const sig = await crypto.subtle.sign('HMAC', k, new TextEncoder().encode('The quick brown fox jumps over the lazy dog')); const ok = await crypto.subtle.verify('HMAC', k, sig, new TextEncoder().encode('The quick brown fox jumps over the lazy dog')); const bad = await crypto.subtle.verify('HMAC', k, sig, new TextEncoder().encode('x')); return [[...new Uint8Array(sig)].map(b => b.toString(16).padStart(2, '0')).join(''), ok, bad] }`, `["f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8",true,false]`},
		{"getRandomValues", `() => { const a = new Uint32Array(4); crypto.getRandomValues(a); return a.some(x => x !== 0) }`, `true`},
		{"ES2023 array methods", `() => { const a = [3, 1, 2]; return [a.toSorted(), a.toReversed(), a.with(0, 9), a, Object.keys(Object.groupBy([1, 2, 3], x => x % 2 ? 'odd' : 'even'))] }`, `[[1,2,3],[2,1,3],[9,1,2],[3,1,2],["odd","even"]]`},
		{"performance.now is coarse", `() => { const t = performance.now(); return t === Math.floor(t) }`, `true`},
		{"relative URL without a location", `() => { try { new Request('/a'); return 'no' } catch (e) { return e.constructor.name } }`, `"TypeError"`},
		{"relative URL against location", `() => { globalThis.location = {href: 'https://base.test/dir/page'}; return [new Request('x?q=1').url, Response.redirect('/r').headers.get('location')] }`, `["https://base.test/dir/x?q=1","https://base.test/r"]`},
		{"Request attributes from init", `() => { const r = new Request('https://x.test/', {mode: 'same-origin', credentials: 'include', cache: 'no-store', keepalive: 1, referrerPolicy: 'no-referrer', integrity: 'sha256-x'}); const c = r.clone(); return [c.mode, c.credentials, c.cache, c.keepalive, c.referrerPolicy, c.integrity, r.duplex] }`, `["same-origin","include","no-store",true,"no-referrer","sha256-x","half"]`},
		{"Request bad enum", `() => ['mode', 'cache', 'duplex', 'priority'].map(k => { try { new Request('https://x.test/', {[k]: 'nope'}); return 'no' } catch (e) { return e.constructor.name } })`, `["TypeError","TypeError","TypeError","TypeError"]`},
		{"no-cors headers keep only safelisted ones", `() => { const r = new Request('https://x.test/', {mode: 'no-cors', headers: {accept: 'a', 'x-custom': 'b', 'content-type': 'application/json'}}); r.headers.set('accept-language', 'en'); return [...r.headers] }`, `[["accept","a"],["accept-language","en"]]`},
		{"stream body without duplex (as workerd)", `async () => { const s = new ReadableStream({start(c) { c.enqueue(new Uint8Array([104, 105])); c.close() }}); return await new Request('https://x.test/', {method: 'POST', body: s}).text() }`, `"hi"`},
		{"a disturbed stream is no body", `async () => { const s = new ReadableStream({start(c) { c.enqueue(new Uint8Array([1])); c.close() }}); const rd = s.getReader(); await rd.read(); rd.releaseLock(); try { new Response(s); return 'no' } catch (e) { return e.constructor.name } }`, `"TypeError"`},
		{"FileReader", `async () => { const b = new Blob(['hé'], {type: 'text/plain'}); const read = (how) => new Promise((res) => { const r = new FileReader(); const seen = []; for (const t of ['loadstart', 'progress', 'load', 'loadend']) r.addEventListener(t, () => seen.push(t)); r.onloadend = () => res([r.readyState, seen.join(','), typeof r.result === 'string' ? r.result : r.result.byteLength]); r[how](b) }); return [await read('readAsText'), await read('readAsDataURL'), await read('readAsArrayBuffer')] }`, `[[2,"loadstart,progress,load,loadend","hé"],[2,"loadstart,progress,load,loadend","data:text/plain;base64,aMOp"],[2,"loadstart,progress,load,loadend",3]]`},
		{"the global object is an EventTarget", `() => { let self; addEventListener('ping', function () { self = this }); const ok = dispatchEvent(new Event('ping')); return [ok, self === globalThis] }`, `[true,true]`},
		{"empty FormData", `async () => { const r = new Response(new FormData()); const t = await r.clone().text(); const f = await r.formData(); return [t, [...f].length] }`, `["",0]`},
		{"structuredClone transfer", `() => { const b = new Uint8Array([1, 2]).buffer; const v = {a: new Uint8Array(b), d: new DataView(b)}; const c = structuredClone(v, {transfer: [b]}); let dup; try { structuredClone(1, {transfer: [b, b]}) } catch (e) { dup = e.name } return [c.a.buffer === c.d.buffer, c.a.buffer !== b, [...c.a], dup] }`, `[true,true,[1,2],"DataCloneError"]`},
		{"RSA-PSS sign and verify", `async () => { const alg = {name: 'RSA-PSS', hash: 'SHA-256', modulusLength: 1024, publicExponent: new Uint8Array([1, 0, 1])}; const k = await crypto.subtle.generateKey(alg, true, ['sign', 'verify']); const m = new TextEncoder().encode('m'); const sig = await crypto.subtle.sign({name: 'RSA-PSS', saltLength: 32}, k.privateKey, m); const jwk = await crypto.subtle.exportKey('jwk', k.publicKey); return [await crypto.subtle.verify({name: 'RSA-PSS', saltLength: 32}, k.publicKey, sig, m), sig.byteLength, jwk.alg, jwk.kty] }`, `[true,128,"PS256","RSA"]`},
		{"nothing of the host", `() => [typeof process, typeof require, typeof module, typeof __host, typeof SharedArrayBuffer, typeof Atomics.wait, typeof WebAssembly]`, `["undefined","undefined","undefined","undefined","undefined","undefined","undefined"]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := e.Run(context.Background(), program.Job{Program: program.Program{Code: c.code}, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if string(out.Result) != c.want {
				t.Fatalf("got %s, want %s", out.Result, c.want)
			}
		})
	}
}

// TestWorkersModuleVerifiesAWebhook: a handler written for Cloudflare Workers
// (JSON body, HMAC signature checked with crypto.subtle and env.SECRET,
// Response.json) deploys unchanged and serves through a retained handle.
func TestWorkersModuleVerifiesAWebhook(t *testing.T) {
	code := `const enc = new TextEncoder();
function hex(buf) { return [...new Uint8Array(buf)].map(b => b.toString(16).padStart(2, '0')).join(''); }
export default {
  async fetch(request, env, ctx) {
    const url = new URL(request.url);
    const body = await request.text();
    const key = await crypto.subtle.importKey('raw', enc.encode(env.SECRET), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
    const expected = hex(await crypto.subtle.sign('HMAC', key, enc.encode(body)));
    if (request.headers.get('x-signature') !== expected) {
      return Response.json({ error: 'bad signature' }, { status: 401 });
    }
    const event = JSON.parse(body);
    ctx.waitUntil(Promise.resolve());
    return Response.json({ ok: true, type: event.type, path: url.pathname, q: url.searchParams.get('q') });
  },
};`
	e := engine(t)
	if _, err := e.Run(context.Background(), program.Job{ID: "webhook", RetainHandles: true, Env: map[string]string{"SECRET": "s3cret"}, Program: program.Program{Code: code}}); err != nil {
		t.Fatal(err)
	}
	defer e.Close("webhook")
	body := `{"type":"invoice.paid"}`
	mac := hmac.New(sha256.New, []byte("s3cret"))
	mac.Write([]byte(body))
	sig := hex.EncodeToString(mac.Sum(nil))
	res, err := e.Invoke(context.Background(), "webhook", "fetch", program.NewWireRequest("POST", "https://hooks.test/stripe?q=1", [][2]string{{"x-signature", sig}, {"content-type", "application/json"}}, []byte(body)))
	if err != nil || res.Status != 200 || string(res.BodyBytes()) != `{"ok":true,"type":"invoice.paid","path":"/stripe","q":"1"}` {
		t.Fatalf("signed webhook: %v %d %s", err, res.Status, res.BodyBytes())
	}
	res, err = e.Invoke(context.Background(), "webhook", "fetch", program.NewWireRequest("POST", "https://hooks.test/stripe", [][2]string{{"x-signature", strings.Repeat("0", 64)}}, []byte(body)))
	if err != nil || res.Status != 401 {
		t.Fatalf("forged webhook: %v %d %s", err, res.Status, res.BodyBytes())
	}
}

// TestBinaryBodyRoundTrip: a 1 MiB binary body crosses in and out byte-exact.
func TestBinaryBodyRoundTrip(t *testing.T) {
	e := engine(t)
	if _, err := e.Run(context.Background(), program.Job{ID: "echo-bin", RetainHandles: true, Timeout: 5 * time.Second, Program: program.Program{Code: `async () => ({ async fetch(req) { return new Response(await req.arrayBuffer()) } })`}}); err != nil {
		t.Fatal(err)
	}
	defer e.Close("echo-bin")
	payload := make([]byte, 1<<20)
	for i := range payload {
		payload[i] = byte(i*7 + i>>8)
	}
	start := time.Now()
	res, err := e.Invoke(context.Background(), "echo-bin", "fetch", program.NewWireRequest("POST", "https://x.test/", nil, payload))
	if err != nil || string(res.BodyBytes()) != string(payload) {
		t.Fatalf("1 MiB round trip: %v, %d bytes back", err, len(res.BodyBytes()))
	}
	t.Logf("1 MiB binary body in and out: %v", time.Since(start))
}

// A string body leaves the isolate as text and reaches Go as its UTF-8, a
// lone surrogate as U+FFFD (the Fetch Standard's USVString), whether the
// handler answers new Response(string) or Response.json; read inside the
// isolate the same body gives the same bytes and text.
func TestTextBodiesLeaveAsUTF8(t *testing.T) {
	e := engine(t)
	code := `async () => ({ async fetch(req) {
		const u = new URL(req.url), s = 'h\u00e9\u{1F600} a\uD800b';
		if (u.pathname === '/json') return Response.json({s});
		if (u.pathname === '/empty') return new Response('');
		if (u.pathname === '/inside') {
			const r = new Response('\uFEFF' + s), c = r.clone();
			const bytes = [...new Uint8Array(await c.arrayBuffer())].length;
			return Response.json([await r.text(), bytes, await new Response(new Response(s).body).text()]);
		}
		return new Response(s);
	} })`
	if _, err := e.Run(context.Background(), program.Job{ID: "text-out", RetainHandles: true, Timeout: 5 * time.Second, Program: program.Program{Code: code}}); err != nil {
		t.Fatal(err)
	}
	defer e.Close("text-out")
	for path, want := range map[string]string{
		"/":       "h\u00e9\U0001F600 a\ufffdb",
		"/json":   "",
		"/empty":  "",
		"/inside": "[\"h\u00e9\U0001F600 a\ufffdb\",16,\"h\u00e9\U0001F600 a\ufffdb\"]",
	} {
		res, err := e.Invoke(context.Background(), "text-out", "fetch", program.NewWireRequest("GET", "https://x.test"+path, nil, nil))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if path == "/json" {
			// JSON.stringify escapes a lone surrogate (well-formed JSON.stringify).
			want = "{\"s\":\"h\u00e9\U0001F600 a\\ud800b\"}"
		}
		if got := string(res.BodyBytes()); got != want || res.Body == nil {
			t.Errorf("%s: body %q, want %q", path, got, want)
		}
	}
}

// A request body all ASCII is its text at once (the gateway marks it);
// any other is decoded from its bytes; both read the same either way.
func TestRequestBodiesReadAsTextAndBytes(t *testing.T) {
	e := engine(t)
	code := `async () => ({ async fetch(req) {
		const c = req.clone();
		const text = await req.text(), bytes = new Uint8Array(await c.arrayBuffer());
		let json = null; try { json = JSON.parse(text) } catch {}
		return Response.json([text, bytes.length, bytes[bytes.length - 1], json]);
	} })`
	if _, err := e.Run(context.Background(), program.Job{ID: "body-in", RetainHandles: true, Timeout: 5 * time.Second, Program: program.Program{Code: code}}); err != nil {
		t.Fatal(err)
	}
	defer e.Close("body-in")
	for body, want := range map[string]string{
		`{"a":[1,2]}`: `["{\"a\":[1,2]}",11,125,{"a":[1,2]}]`,
		"caf\u00e9":   "[\"caf\u00e9\",5,169,null]",
		"\ufeffbom":   `["bom",6,109,null]`,
		"bad \xff":    "[\"bad \ufffd\",5,255,null]",
	} {
		res, err := e.Invoke(context.Background(), "body-in", "fetch", program.NewWireRequest("POST", "https://x.test/", nil, []byte(body)))
		if err != nil || string(res.BodyBytes()) != want {
			t.Errorf("body %q: %s, %v; want %s", body, res.BodyBytes(), err, want)
		}
	}
}

// TestWaitUntilRunsAfterTheResponse: the answer does not wait for
// ctx.waitUntil work, which still runs (within the bound) before the next
// invocation.
func TestWaitUntilRunsAfterTheResponse(t *testing.T) {
	e := engine(t)
	if _, err := e.Run(context.Background(), program.Job{ID: "wait-until", RetainHandles: true, Timeout: 2 * time.Second, Program: program.Program{Code: `async () => {
		let done = 0;
		return { fetch(req, env, ctx) {
			if (req.url.endsWith('/later')) ctx.waitUntil(new Promise(r => setTimeout(() => { done++; console.log('background done'); r() }, 300)));
			return new Response(String(done));
		} } }`}}); err != nil {
		t.Fatal(err)
	}
	defer e.Close("wait-until")
	res, logs, err := e.InvokeWithLogs(context.Background(), "wait-until", "fetch", program.NewWireRequest("GET", "https://x.test/later", nil, nil))
	if err != nil || string(res.BodyBytes()) != "0" {
		t.Fatalf("first: %v %s", err, res.BodyBytes())
	}
	// The answer's own log lines were taken when it was answered; the
	// background line was not among them, so the answer came first.
	for _, l := range logs {
		if l.Message == "background done" {
			t.Fatal("the response waited for the waitUntil work")
		}
	}
	res, err = e.Invoke(context.Background(), "wait-until", "fetch", program.NewWireRequest("GET", "https://x.test/", nil, nil))
	if err != nil || string(res.BodyBytes()) != "1" {
		t.Fatalf("the waitUntil work did not finish before the next invocation: %v %s", err, res.BodyBytes())
	}
}

// TestStreamResponseThroughAHandle: a handler may answer a ReadableStream
// body; the head comes first and the chunks as the stream yields them.
func TestStreamResponseThroughAHandle(t *testing.T) {
	e := engine(t)
	if _, err := e.Run(context.Background(), program.Job{ID: "stream-body", RetainHandles: true, Program: program.Program{Code: `async () => ({ fetch() {
		const enc = new TextEncoder();
		let i = 0;
		const body = new ReadableStream({ async pull(c) {
			await new Promise(r => setTimeout(r, 1));
			if (i < 3) c.enqueue(enc.encode('chunk' + i++ + ';')); else c.close();
		} });
		return new Response(body, { headers: { 'content-type': 'text/plain' } });
	} })`}}); err != nil {
		t.Fatal(err)
	}
	defer e.Close("stream-body")
	res, err := e.Invoke(context.Background(), "stream-body", "fetch", program.NewWireRequest("GET", "https://x.test/", nil, nil))
	if err != nil || res.Stream == 0 || res.Body != nil {
		t.Fatalf("stream head: %v %+v", err, res)
	}
	var body []byte
	for {
		chunk, done, err := e.ReadStream(context.Background(), "stream-body", res.Stream, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if done {
			break
		}
		body = append(body, chunk...)
	}
	if string(body) != "chunk0;chunk1;chunk2;" {
		t.Fatalf("stream body: %q", body)
	}
}
