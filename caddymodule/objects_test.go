package caddymodule

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
)

// objectsFiles is docs/objects.md's file-upload handler: PUT stores the
// request body as it arrives, GET answers the object from storage (a
// Range header, conditional headers), DELETE removes it; a closure
// counter that must survive what other programs do to the gateway.
const objectsFiles = `async () => {
	let served = 0;
	return { async fetch(request, env) {
		served++;
		const url = new URL(request.url);
		const key = decodeURIComponent(url.pathname.slice(1));
		if (key === 'served') return Response.json({served});
		switch (request.method) {
		case 'PUT': {
			const object = await env.bucket.put(key, request.body, {httpMetadata: request.headers});
			return Response.json({key: object.key, size: object.size, etag: object.etag});
		}
		case 'DELETE':
			await env.bucket.delete(key);
			return new Response(null, {status: 204});
		case 'GET': {
			const object = await env.bucket.get(key, {onlyIf: request.headers});
			if (object === null) return new Response('not found', {status: 404});
			const headers = new Headers();
			object.writeHttpMetadata(headers);
			headers.set('etag', object.httpEtag);
			if (!object.body) return new Response(null, {status: 304, headers});
			return new Response(object.body, {headers});
		}
		}
		return new Response('method not allowed', {status: 405});
	} };
}`

// deployObjects deploys objectsFiles for tok and answers its host.
func deployObjects(t *testing.T, tok string) string {
	t.Helper()
	a := do(t, "POST", api("/executions"), tok, mustJSON(map[string]any{"code": objectsFiles, "retainHandles": true, "timeoutMs": 2000, "capabilities": []string{"objectsRead", "objectsWrite"}}))
	if a.status != 200 {
		t.Fatalf("deploy the file handler: %d %s", a.status, a.body)
	}
	return a.json(t)["executionId"].(string) + ".apps.localhost"
}

// TestObjects is docs/objects.md through a real gateway: the R2 API and
// its shapes, grants and the objectsWrite denial, tenants apart, the
// control plane (Range included), an object's body relayed past
// max_response_body, the quota, an upload cut half-way, bad keys and
// arguments; a bystander's handler keeps its state throughout.
func TestObjects(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	caddytest.NewTester(t).InitServer(gatewayConfig(store, "max_request_body 4MiB\n\t\tmax_response_body 256KiB\n\t\tmax_object 3MiB\n\t\tobjects_quota 6MiB"), "caddyfile")
	alice := token(t, "alice", allScopes)
	bob := token(t, "bob", allScopes)
	exec := func(tok, code string, caps ...string) string {
		t.Helper()
		a := do(t, "POST", api("/executions"), tok, mustJSON(map[string]any{"code": code, "capabilities": caps, "timeoutMs": 5000}))
		if a.status != 200 {
			t.Fatalf("%d %s", a.status, a.body)
		}
		b, _ := json.Marshal(a.json(t)["result"])
		return string(b)
	}

	// The bystander: bob's file handler, its counter kept.
	bobFiles := deployObjects(t, bob)
	if a := do(t, "PUT", site(bobFiles, "/keep.txt"), "", []byte("bob's"), "Content-Type", "text/plain"); a.status != 200 {
		t.Fatalf("bob's put: %d %s", a.status, a.body)
	}

	// The API and its shapes.
	code := `async () => {
		const out = {};
		const p = await bucket.put('dir/a.txt', 'hello world', {httpMetadata: {contentType: 'text/plain', cacheControl: 'max-age=60', cacheExpiry: new Date(Date.UTC(2030, 0, 2))}, customMetadata: {who: 'alice'}});
		out.put = [p.key, p.size, p.etag, p.httpEtag === '"' + p.etag + '"', p.uploaded instanceof Date, typeof p.version, p.httpMetadata.contentType, p.customMetadata.who];
		await bucket.put('dir/b.bin', new Uint8Array([0, 1, 2, 255]));
		await bucket.put('dir/sub/c', new Blob(['blob']));
		await bucket.put('e', new ReadableStream({start(c) { c.enqueue(new TextEncoder().encode('str')); c.enqueue(new TextEncoder().encode('eam')); c.close(); }}));
		await bucket.put('big', new Uint8Array(300000).fill(7));
		await bucket.put('empty', null);
		const g = await bucket.get('dir/a.txt');
		out.get = [await g.text(), g.bodyUsed, g.size, g.range.offset, g.range.length];
		const h = new Headers(); g.writeHttpMetadata(h);
		out.headers = [h.get('content-type'), h.get('cache-control'), h.get('expires'), g.httpMetadata.cacheExpiry instanceof Date];
		out.bin = [...new Uint8Array(await (await bucket.get('dir/b.bin')).arrayBuffer())];
		out.blob = await (await bucket.get('dir/sub/c')).blob().then(b => b.text());
		out.stream = await (await bucket.get('e')).text();
		const big = new Uint8Array(await (await bucket.get('big')).arrayBuffer());
		out.big = [big.length, big[0], big[299999]];
		out.empty = (await (await bucket.get('empty')).arrayBuffer()).byteLength;
		out.range = [await (await bucket.get('dir/a.txt', {range: {offset: 6}})).text(), await (await bucket.get('dir/a.txt', {range: {offset: 0, length: 5}})).text(), await (await bucket.get('dir/a.txt', {range: {suffix: 3}})).text()];
		const bigRange = await bucket.get('big', {range: {offset: 100000, length: 150000}});
		out.bigRange = [(await bigRange.arrayBuffer()).byteLength, bigRange.range.offset, bigRange.range.length];
		try { await bucket.get('dir/a.txt', {range: {offset: 50}}); out.badRange = 'answered'; } catch (e) { out.badRange = e.message; }
		out.head = [(await bucket.head('dir/a.txt')).size, await bucket.head('nope'), await bucket.get('nope')];
		out.noBody = [(await bucket.get('dir/a.txt', {onlyIf: {etagDoesNotMatch: p.etag}})).body === undefined, (await bucket.get('dir/a.txt', {onlyIf: {etagMatches: p.etag}})).body !== undefined];
		out.putIf = [await bucket.put('dir/a.txt', 'no', {onlyIf: {etagMatches: 'other'}}), (await bucket.put('dir/a.txt', 'hello world', {onlyIf: {etagMatches: p.etag}, customMetadata: {who: 'alice'}})).size, await bucket.put('dir/a.txt', 'no', {onlyIf: {uploadedBefore: new Date(0)}})];
		// A program's stream that fails half-way, and a chunked put whose
		// condition fails, leave the old object.
		let sent = 0;
		try {
			await bucket.put('dir/a.txt', new ReadableStream({pull(c) { if (sent++ < 3) c.enqueue(new Uint8Array(200000)); else c.error(new Error('boom')); }}));
			out.cut = 'stored';
		} catch (e) { out.cut = [e.message, await (await bucket.get('dir/a.txt')).text()]; }
		out.cutIf = [await bucket.put('dir/a.txt', new Uint8Array(400000), {onlyIf: {etagMatches: 'other'}}), (await bucket.head('dir/a.txt')).size];
		const l = await bucket.list();
		out.list = [l.objects.map(o => o.key), l.truncated, l.cursor, l.delimitedPrefixes, l.objects[0].httpMetadata];
		const d = await bucket.list({prefix: 'dir/', delimiter: '/', include: ['customMetadata']});
		out.delim = [d.objects.map(o => o.key), d.delimitedPrefixes, d.objects[0].customMetadata];
		const p1 = await bucket.list({limit: 2}), p2 = await bucket.list({limit: 2, cursor: p1.cursor});
		out.pages = [p1.objects.map(o => o.key), p1.truncated, p2.objects.map(o => o.key)];
		await bucket.delete(['dir/sub/c', 'e']);
		await bucket.delete('empty');
		out.afterDelete = (await bucket.list()).objects.map(o => o.key);
		out.errors = [];
		for (const f of [() => bucket.put('', 'x'), () => bucket.put('k'.repeat(1025), 'x'), () => bucket.get(7), () => bucket.list({limit: 1001}), () => bucket.put('x', {}), () => bucket.list({cursor: '!!'}), () => bucket.put('x', 'y', {httpMetadata: {colour: 'red'}})]) {
			try { await f(); out.errors.push('answered'); } catch (e) { out.errors.push(e.message); }
		}
		out.env = typeof bucket.put;
		return out;
	}`
	got := exec(alice, code, "objectsRead", "objectsWrite")
	md5hw := md5.Sum([]byte("hello world"))
	etag := hex.EncodeToString(md5hw[:])
	for _, w := range []string{
		`"put":["dir/a.txt",11,"` + etag + `",true,true,"string","text/plain","alice"]`,
		`"get":["hello world",true,11,0,11]`, `"headers":["text/plain","max-age=60","Wed, 02 Jan 2030 00:00:00 GMT",true]`, `"bin":[0,1,2,255]`, `"blob":"blob"`, `"stream":"stream"`,
		`"big":[300000,7,7]`, `"empty":0`, `"range":["world","hello","rld"]`, `"bigRange":[150000,100000,150000]`,
		`"badRange":"bucket.get: the range is not satisfiable (the object is 11 bytes)."`,
		`"head":[11,null,null]`, `"noBody":[true,true]`, `"putIf":[null,11,null]`,
		`"cut":["boom","hello world"]`, `"cutIf":[null,11]`,
		`"list":[["big","dir/a.txt","dir/b.bin","dir/sub/c","e","empty"],false,null,[],null]`,
		`"delim":[["dir/a.txt","dir/b.bin"],["dir/sub/"],{"who":"alice"}]`,
		`"pages":[["big","dir/a.txt"],true,["dir/b.bin","dir/sub/c"]]`,
		`"afterDelete":["big","dir/a.txt","dir/b.bin"]`,
		`"errors":["An object key is 1 to 1024 bytes of UTF-8: this one is empty.","An object key is 1 to 1024 bytes of UTF-8: this one is 1025 bytes.","bucket.get: a key is a string.","bucket.list: limit is 1 to 1000.","bucket.put: a value is a string, ArrayBuffer, typed array, Blob, ReadableStream or null.","list: the cursor is not one a list answered.","httpMetadata has no field \"colour\": its fields are contentType, contentLanguage, contentDisposition, contentEncoding, cacheControl, cacheExpiry."]`,
		`"env":"function"`,
	} {
		if !strings.Contains(got, w) {
			t.Errorf("the API: want %s in %s", w, got)
		}
	}

	// A run that ends in the middle of a put leaves the old object, and
	// its key is free at once for the next put (not after the 30 s idle
	// bound of an unfinished one).
	exec(alice, `async () => {
		bucket.put('dir/a.txt', new ReadableStream({pull(c) { c.enqueue(new Uint8Array(1000)); return new Promise(() => {}); }}));
		await new Promise(r => setTimeout(r, 300));
		return 'left';
	}`, "objectsWrite")
	if got := exec(alice, `async () => [await (await bucket.get('dir/a.txt')).text(), (await bucket.put('dir/a.txt', 'hello world', {customMetadata: {who: 'alice'}})).size]`, "objectsWrite"); got != `["hello world",11]` {
		t.Fatalf("after a run ended in the middle of a put: %s", got)
	}

	// Grants: none, no bucket; a write under objectsRead is a recorded
	// denial and changes nothing.
	if got := exec(alice, `async () => typeof bucket`); got != `"undefined"` {
		t.Fatalf("bucket without a grant: %s", got)
	}
	a := do(t, "POST", site("api.localhost", "/executions"), alice, mustJSON(map[string]any{"capabilities": []string{"objectsRead"},
		"code": `async () => { const r = [(await bucket.head('dir/a.txt')).size]; for (const f of [() => bucket.put('dir/a.txt', 'x'), () => bucket.delete('dir/a.txt')]) { try { await f(); r.push('wrote'); } catch (e) { r.push(e.message); } } return r; }`}))
	if b, _ := json.Marshal(a.json(t)["result"]); !strings.Contains(string(b), `[11,"bucket.put needs the objectsWrite capability`) || !strings.Contains(string(b), `"bucket.delete needs the objectsWrite capability`) {
		t.Fatalf("writes under objectsRead: %s", b)
	}
	if r := do(t, "GET", site("api.localhost", "/results/"+a.json(t)["resultId"].(string)+".json"), alice, nil); !strings.Contains(string(r.body), `"denials":["`) || !strings.Contains(string(r.body), "objectsWrite") {
		t.Fatalf("the denial is not in the receipt: %s", r.body)
	}
	if got := exec(alice, `async () => (await bucket.get('dir/a.txt')).text()`, "objectsRead"); got != `"hello world"` {
		t.Fatalf("after the refused writes: %s", got)
	}

	// Tenants apart: bob sees none of alice's keys, alice none of his.
	if got := exec(bob, `async () => [(await bucket.list()).objects.map(o => o.key), await bucket.head('dir/a.txt')]`, "objectsRead"); got != `[["keep.txt"],null]` {
		t.Fatalf("bob's bucket: %s", got)
	}
	if a := do(t, "GET", api("/objects/keep.txt"), alice, nil); a.status != 404 {
		t.Fatalf("alice reads bob's key through the control plane: %d %s", a.status, a.body)
	}

	// The control plane: list, download with Range, upload, delete.
	l := do(t, "GET", api("/objects?prefix=dir/"), alice, nil)
	if l.status != 200 || !strings.Contains(string(l.body), `{"key":"dir/a.txt","size":11,"etag":"`+etag+`","uploaded":"`) || !strings.Contains(string(l.body), `"truncated":false`) {
		t.Fatalf("GET /objects: %d %s", l.status, l.body)
	}
	if a := do(t, "GET", api("/objects/dir/a.txt"), alice, nil, "Range", "bytes=6-9"); a.status != 206 || string(a.body) != "worl" || a.header.Get("Content-Range") != "bytes 6-9/11" || a.header.Get("Etag") != `"`+etag+`"` {
		t.Fatalf("a range: %d %q %v", a.status, a.body, a.header)
	}
	if a := do(t, "GET", api("/objects/dir/a.txt"), alice, nil, "Range", "bytes=-3"); a.status != 206 || string(a.body) != "rld" {
		t.Fatalf("a suffix range: %d %q", a.status, a.body)
	}
	if a := do(t, "GET", api("/objects/dir/a.txt"), alice, nil, "Range", "bytes=20-"); a.status != 416 || a.header.Get("Content-Range") != "bytes */11" {
		t.Fatalf("a range past the end: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", api("/objects/dir/a.txt"), alice, nil); a.status != 200 || string(a.body) != "hello world" || a.header.Get("Content-Security-Policy") != "sandbox" {
		t.Fatalf("a download: %d %q %v", a.status, a.body, a.header)
	}
	up := do(t, "PUT", api("/objects/up%20load.bin"), alice, []byte(strings.Repeat("u", 1000)))
	if up.status != 200 || !strings.HasPrefix(string(up.body), `{"etag":"`) || !strings.Contains(string(up.body), `"key":"up load.bin","size":1000}`) {
		t.Fatalf("PUT /objects: %d %s", up.status, up.body)
	}
	if a := do(t, "DELETE", api("/objects/up%20load.bin"), alice, nil); a.status != 204 {
		t.Fatalf("DELETE /objects: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", api("/objects/up%20load.bin"), alice, nil); a.status != 404 || a.code() != "NOT_FOUND" {
		t.Fatalf("after DELETE: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", api("/objects"), "", nil); a.status != 401 {
		t.Fatalf("without a token: %d", a.status)
	}
	if a := do(t, "PUT", api("/objects/"+strings.Repeat("k", 1025)), alice, []byte("x")); a.status != 400 || a.code() != "BAD_REQUEST" {
		t.Fatalf("a long key: %d %s", a.status, a.body)
	}

	// A handler's upload and download: 2.5 MiB in through request.body,
	// out through new Response(object.body), past max_response_body
	// (256 KiB) and within max_object (3 MiB); conditional GET.
	files := deployObjects(t, alice)
	blob := []byte(strings.Repeat("0123456789abcdef", 5<<16))[:5<<19]
	put := do(t, "PUT", site(files, "/photo.jpg"), "", blob, "Content-Type", "image/jpeg", "Expires", "not a date")
	sum := md5.Sum(blob)
	if put.status != 200 || string(put.body) != fmt.Sprintf(`{"key":"photo.jpg","size":%d,"etag":"%x"}`, len(blob), sum) {
		t.Fatalf("a handler's upload: %d %s", put.status, put.body)
	}
	get := do(t, "GET", site(files, "/photo.jpg"), "", nil)
	if get.status != 200 || len(get.body) != len(blob) || string(get.body) != string(blob) || get.header.Get("Content-Type") != "image/jpeg" || get.header.Get("Expires") != "" {
		t.Fatalf("a handler's download: %d, %d bytes, %v", get.status, len(get.body), get.header)
	}
	if a := do(t, "GET", site(files, "/photo.jpg"), "", nil, "If-None-Match", get.header.Get("Etag")); a.status != 304 {
		t.Fatalf("a conditional GET: %d", a.status)
	}
	if a := putEarly(t, "api.localhost", "/objects/huge", alice, make([]byte, 3<<20+1)); a.code() != "TOO_LARGE" || !strings.Contains(string(a.body), "max_object") {
		t.Fatalf("past max_object: %d %s", a.status, a.body)
	}
	if a := putEarly(t, files, "/huge", "", make([]byte, 3<<20+1)); a.status != 500 {
		t.Fatalf("past max_object through the handler: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", api("/objects/huge"), alice, nil); a.status != 404 {
		t.Fatalf("an object past max_object was written: %d", a.status)
	}

	// An upload cut half-way, through the control plane and through the
	// handler, leaves the old object whole.
	for _, target := range []struct{ host, path, tok string }{{"api.localhost", "/objects/photo.jpg", alice}, {files, "/photo.jpg", ""}} {
		cutUpload(t, target.host, target.path, target.tok, 2<<20, 1<<20)
		if a := do(t, "GET", api("/objects/photo.jpg"), alice, nil); a.status != 200 || string(a.body) != string(blob) {
			t.Fatalf("after an upload to %s cut half-way: %d, %d bytes", target.host, a.status, len(a.body))
		}
	}

	// The quota (6 MiB): 2.5 MiB + 300 KB + a little are used; another
	// 3 MiB object passes it: QUOTA_EXCEEDED, nothing written, the old
	// objects whole. Replacing an object counts only the difference.
	if a := do(t, "PUT", api("/objects/second.bin"), alice, blob); a.status != 200 {
		t.Fatalf("within the quota: %d %s", a.status, a.body)
	}
	over := putEarly(t, "api.localhost", "/objects/third.bin", alice, make([]byte, 3<<20))
	if over.code() != "QUOTA_EXCEEDED" || !strings.Contains(string(over.body), "objects_quota") {
		t.Fatalf("past the quota: %d %s", over.status, over.body)
	}
	if a := do(t, "GET", api("/objects/third.bin"), alice, nil); a.status != 404 {
		t.Fatalf("a put past the quota was written: %d", a.status)
	}
	if got := exec(alice, `async () => { try { await bucket.put('third.bin', new Uint8Array(3 << 20)); return 'written'; } catch (e) { return [e.code, (await bucket.head('third.bin'))]; } }`, "objectsWrite"); got != `["QUOTA_EXCEEDED",null]` {
		t.Fatalf("a program's put past the quota: %s", got)
	}
	if a := do(t, "PUT", api("/objects/second.bin"), alice, blob[:100]); a.status != 200 {
		t.Fatalf("replacing within the quota: %d %s", a.status, a.body)
	}
	// Bob's quota is his own.
	if a := do(t, "PUT", api("/objects/b.bin"), bob, blob); a.status != 200 {
		t.Fatalf("bob charged for alice's objects: %d %s", a.status, a.body)
	}

	// A visitor who sends an upload slowly spends the visitor's time, not
	// the handler's: 4 parts 800 ms apart through a handler bound at 2 s
	// (a length past 1 MiB announced: the handler is called at once and
	// its put waits for the parts).
	pr, pw := io.Pipe()
	go func() {
		for i := 0; i < 4; i++ {
			time.Sleep(800 * time.Millisecond)
			pw.Write([]byte(strings.Repeat(string(rune('p'+i)), 400000)))
		}
		pw.Close()
	}()
	slow, err := http.NewRequest("PUT", site(files, "/slow.txt"), pr)
	if err != nil {
		t.Fatal(err)
	}
	slow.ContentLength = 1600000
	res, err := client.Do(slow)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), `"size":1600000`) {
		t.Fatalf("a slow upload: %d %s", res.StatusCode, body)
	}

	// The bystander kept its state and its object.
	if a := do(t, "GET", site(bobFiles, "/keep.txt"), "", nil); a.status != 200 || string(a.body) != "bob's" || a.header.Get("Content-Type") != "text/plain" {
		t.Fatalf("the bystander's object: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", site(bobFiles, "/served"), "", nil); string(a.body) != `{"served":3}` {
		t.Fatalf("the bystander's counter: %d %s", a.status, a.body)
	}

	// Usage shows each tenant's own bucket (docs/usage.md): what its
	// listing adds up to, not the other's.
	for _, tok := range []string{alice, bob} {
		var list struct{ Objects []struct{ Size int64 } }
		json.Unmarshal(do(t, "GET", api("/objects?prefix="), tok, nil).body, &list)
		want := int64(0)
		for _, o := range list.Objects {
			want += o.Size
		}
		a = do(t, "GET", api("/usage?by=day"), tok, nil)
		var u struct{ Usage []struct{ ObjectBytes int64 } }
		json.Unmarshal(a.body, &u)
		if a.status != 200 || len(u.Usage) == 0 || want == 0 || u.Usage[len(u.Usage)-1].ObjectBytes != want {
			t.Fatalf("usage (the bucket lists %d bytes): %d %s", want, a.status, a.body)
		}
	}
}

// putEarly sends a PUT whose answer may come before its body is read
// (a bound refused it): the body is written on the side and its write's
// failure ignored, and the answer read.
func putEarly(t *testing.T, host, path, tok string, body []byte) answer {
	t.Helper()
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", httpPort))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	head := fmt.Sprintf("PUT %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Length: %d\r\nConnection: close\r\n", path, host, httpPort, len(body))
	if tok != "" {
		head += "Authorization: Bearer " + tok + "\r\n"
	}
	go conn.Write(append([]byte(head+"\r\n"), body...))
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("PUT %s: %v", path, err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	return answer{status: res.StatusCode, header: res.Header, body: data}
}

// cutUpload sends a PUT that announces size bytes and sends sent of
// them, then closes the connection.
func cutUpload(t *testing.T, host, path, tok string, size, sent int) {
	t.Helper()
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", httpPort))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	head := fmt.Sprintf("PUT %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Length: %d\r\n", path, host, httpPort, size)
	if tok != "" {
		head += "Authorization: Bearer " + tok + "\r\n"
	}
	conn.Write([]byte(head + "\r\n"))
	conn.Write(make([]byte, sent))
	time.Sleep(200 * time.Millisecond) // the gateway is reading the body
}

// genReader is n deterministic bytes (a counter through SHA-256), made as
// they are read: a test's 256 MiB is never in its memory.
type genReader struct {
	n, off int64
	block  [32]byte
	ctr    [8]byte
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.off >= g.n {
		return 0, io.EOF
	}
	i := 0
	for i < len(p) && g.off < g.n {
		if g.off%32 == 0 {
			binary.BigEndian.PutUint64(g.ctr[:], uint64(g.off))
			g.block = sha256.Sum256(g.ctr[:])
		}
		c := copy(p[i:], g.block[g.off%32:])
		if rest := g.n - g.off; int64(c) > rest {
			c = int(rest)
		}
		i += c
		g.off += int64(c)
	}
	return i, nil
}

// TestObjectsStream256MiB moves 256 MiB up through a handler's
// bucket.put(key, request.body) and down through new Response(object.body):
// the gateway's and the worker's peak RSS rise by a few MiB at most, and
// the bytes come back the same (SHA-256).
func TestObjectsStream256MiB(t *testing.T) {
	const size = 256 << 20
	store := filepath.Join(t.TempDir(), "registry.db")
	caddytest.NewTester(t).InitServer(gatewayConfig(store, "max_request_body 512MiB\n\t\tmax_object 512MiB\n\t\tobjects_quota 1GiB\n\t\tstream_timeout 2m"), "caddyfile")
	alice := token(t, "alice", allScopes)
	files := deployObjects(t, alice)
	// Warm the handler's worker and the gateway's paths with a small one.
	if a := do(t, "PUT", site(files, "/warm"), "", make([]byte, 1<<20)); a.status != 200 {
		t.Fatalf("warm: %d %s", a.status, a.body)
	}
	do(t, "GET", site(files, "/warm"), "", nil)
	long := &http.Client{Transport: client.Transport, Timeout: 3 * time.Minute}
	var workers []int
	for _, pid := range workerPIDs(t) {
		if pid != 0 {
			workers = append(workers, pid)
		}
	}
	resetWorkers := func() map[int]int64 {
		base := map[int]int64{}
		for _, pid := range workers {
			if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
				t.Skipf("cannot reset a worker's peak RSS: %v", err)
			}
			base[pid] = procStatus(t, strconv.Itoa(pid), "VmRSS")
		}
		return base
	}
	workerRise := func(base map[int]int64) int64 {
		most := int64(0)
		for pid, b := range base {
			most = max(most, procStatus(t, strconv.Itoa(pid), "VmHWM")-b)
		}
		return most
	}

	// Up.
	gwBase := resetPeak(t)
	wBase := resetWorkers()
	want := sha256.New()
	req, _ := http.NewRequest("PUT", site(files, "/big.bin"), io.TeeReader(&genReader{n: size}, want))
	req.ContentLength = size
	start := time.Now()
	res, err := long.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	upTime := time.Since(start)
	if res.StatusCode != 200 || !strings.Contains(string(body), fmt.Sprintf(`"size":%d`, size)) {
		t.Fatalf("the upload: %d %s", res.StatusCode, body)
	}
	gwUp, wUp := procStatus(t, "self", "VmHWM")-gwBase, workerRise(wBase)

	// Down.
	gwBase = resetPeak(t)
	wBase = resetWorkers()
	start = time.Now()
	res, err = long.Get(site(files, "/big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.New()
	n, err := io.Copy(got, res.Body)
	res.Body.Close()
	downTime := time.Since(start)
	if err != nil || n != size || res.StatusCode != 200 {
		t.Fatalf("the download: %d, %d bytes, %v", res.StatusCode, n, err)
	}
	gwDown, wDown := procStatus(t, "self", "VmHWM")-gwBase, workerRise(wBase)
	if hex.EncodeToString(got.Sum(nil)) != hex.EncodeToString(want.Sum(nil)) {
		t.Fatal("the object came back different (SHA-256)")
	}
	t.Logf("256 MiB up in %v (%.0f MiB/s), down in %v (%.0f MiB/s); peak RSS rise: gateway %d KiB up, %d KiB down; worker %d KiB up, %d KiB down",
		upTime.Round(time.Millisecond), 256/upTime.Seconds(), downTime.Round(time.Millisecond), 256/downTime.Seconds(), gwUp, gwDown, wUp, wDown)
	// The gateway is this test's process (the client's buffers count
	// too); a whole object would be 262,144 KiB.
	for what, rise := range map[string]int64{"gateway up": gwUp, "gateway down": gwDown, "worker up": wUp, "worker down": wDown} {
		if rise > 8<<10 {
			t.Errorf("%s: peak RSS rose %d KiB", what, rise)
		}
	}
}

// TestObjectsFromFetch: bucket.put(key, (await fetch(url)).body) has the
// gateway read the upstream's answer into the object itself; an answer
// cut half-way leaves the old object.
func TestObjectsFromFetch(t *testing.T) {
	big := []byte(strings.Repeat("0123456789abcdef", 3<<16)) // 3 MiB: streamed, not read ahead
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/cut" {
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			w.Write(big[:len(big)/2])
			panic(http.ErrAbortHandler)
		}
		w.Write(big)
	}))
	defer upstream.Close()
	store := filepath.Join(t.TempDir(), "registry.db")
	caddytest.NewTester(t).InitServer(upstreamGatewayConfig(store, "5s"), "caddyfile")
	run := func(code string) string {
		t.Helper()
		a := do(t, "POST", site("anon.localhost", "/executions"), "", mustJSON(map[string]any{"code": fmt.Sprintf(code, upstream.URL),
			"capabilities": []string{"fetch", "objectsWrite"}, "outbound": map[string]any{"allow": []string{strings.TrimPrefix(upstream.URL, "http://")}}}))
		if a.status != 200 {
			t.Fatalf("%d %s", a.status, a.body)
		}
		b, _ := json.Marshal(a.json(t)["result"])
		return string(b)
	}
	sum := md5.Sum(big)
	if got := run(`async () => { const o = await bucket.put('f', (await fetch('%s/big')).body); return [o.size, o.etag, await (await bucket.get('f', {range: {suffix: 4}})).text()]; }`); got != fmt.Sprintf(`[%d,"%x","cdef"]`, len(big), sum) {
		t.Fatalf("a fetch answer put: %s", got)
	}
	if got := run(`async () => { try { await bucket.put('f', (await fetch('%s/cut')).body); return 'stored'; } catch (e) { return (await bucket.head('f')).size; } }`); got != strconv.Itoa(len(big)) {
		t.Fatalf("a cut fetch answer: %s", got)
	}
}

// TestObjectsAnsweredBodiesAreNotHeld: a handler of concurrency 16 whose
// every invocation answers an object's body unread. Such a body is the
// gateway's to relay once answered, not one of the handle's 16 unread
// ones; but it is taken only after the answer has come back, while the
// next invocation already runs: 64 visitors' 1,280 gets once saw 4-13 of
// them throw "holds 16 fetch answers unread" (500). Every get answers the
// object whole, and the closure counter saw every request.
func TestObjectsAnsweredBodiesAreNotHeld(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	caddytest.NewTester(t).InitServer(gatewayConfig(store, ""), "caddyfile")
	alice := token(t, "alice", allScopes)
	a := do(t, "POST", api("/executions"), alice, mustJSON(map[string]any{"code": objectsFiles, "retainHandles": true, "timeoutMs": 10000, "concurrency": 16, "capabilities": []string{"objectsRead", "objectsWrite"}}))
	if a.status != 200 {
		t.Fatalf("deploy: %d %s", a.status, a.body)
	}
	files := a.json(t)["executionId"].(string) + ".apps.localhost"
	const keys, size = 5, 100 << 10 // past 64 KiB: streamed, relayed by the gateway
	for i := 0; i < keys; i++ {
		if a := do(t, "PUT", site(files, fmt.Sprintf("/k%d", i)), "", bytes.Repeat([]byte{byte('a' + i)}, size)); a.status != 200 {
			t.Fatalf("put: %d %s", a.status, a.body)
		}
	}
	const visitors, each = 64, 20
	var mu sync.Mutex
	failed := map[string]int{}
	var wg sync.WaitGroup
	for v := 0; v < visitors; v++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < each; j++ {
				k := (v + j) % keys
				g := do(t, "GET", site(files, fmt.Sprintf("/k%d", k)), "", nil)
				if g.status != 200 || !bytes.Equal(g.body, bytes.Repeat([]byte{byte('a' + k)}, size)) {
					mu.Lock()
					failed[fmt.Sprintf("%d %.200s", g.status, g.body)]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("gets that failed, by answer: %v", failed)
	}
	s := do(t, "GET", site(files, "/served"), "", nil)
	if want := fmt.Sprintf(`{"served":%d}`, keys+visitors*each+1); s.status != 200 || string(s.body) != want {
		t.Fatalf("the closure counter: %d %s, want %s", s.status, s.body, want)
	}
}

// TestObjectsConcurrent: 48 visitors at once put and get five keys
// through one handler (concurrency 16): every put answers, and every get
// answers one put's object whole, never a mix of two.
func TestObjectsConcurrent(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	caddytest.NewTester(t).InitServer(gatewayConfig(store, "max_request_body 4MiB"), "caddyfile")
	alice := token(t, "alice", allScopes)
	a := do(t, "POST", api("/executions"), alice, mustJSON(map[string]any{"code": objectsFiles, "retainHandles": true, "timeoutMs": 5000, "concurrency": 16, "capabilities": []string{"objectsRead", "objectsWrite"}}))
	if a.status != 200 {
		t.Fatalf("deploy: %d %s", a.status, a.body)
	}
	files := a.json(t)["executionId"].(string) + ".apps.localhost"
	const size = 1200 << 10 // streamed to the handler, past 64 KiB: relayed back
	errs := make(chan error, 96)
	for i := 0; i < 48; i++ {
		go func() {
			key := fmt.Sprintf("/k%d", i%5)
			body := []byte(strings.Repeat(string(rune('a'+i%26)), size))
			if a := do(t, "PUT", site(files, key), "", body); a.status != 200 {
				errs <- fmt.Errorf("put %s: %d %s", key, a.status, a.body)
				return
			}
			g := do(t, "GET", site(files, key), "", nil)
			if g.status != 200 || len(g.body) != size || strings.Count(string(g.body), string(g.body[:1])) != size {
				errs <- fmt.Errorf("get %s: %d, %d bytes, torn or short", key, g.status, len(g.body))
				return
			}
			errs <- nil
		}()
	}
	for i := 0; i < 48; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	l := do(t, "GET", api("/objects"), alice, nil)
	if n := strings.Count(string(l.body), `"key":`); n != 5 {
		t.Fatalf("listed %d keys: %s", n, l.body)
	}
}
