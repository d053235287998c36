package sandbox

import (
	"context"
	"testing"

	"github.com/retainer-gw/retainer/program"
)

// Every Value the engine makes from Go is released: a handler that throws,
// synchronously or not, or meets a host function that throws, leaves no
// Value behind per invocation (each used to keep one until the isolate
// ended). BenchmarkThrowingInvocationsStayFlat measures the RSS.
func TestThrowingInvocationsRetainNoValues(t *testing.T) {
	e := engine(t)
	for name, code := range map[string]string{
		"async throw": `async () => ({ async fetch(r) { throw new Error('boom') } })`,
		"sync throw":  `async () => ({ fetch(r) { throw new Error('boom') } })`,
		"throw value": `async () => ({ fetch(r) { throw 'a string' } })`,
		"host throws": `async () => ({ async fetch(r) { try { await kv.get('x') } catch (e) {} return new Response('x') } })`,
	} {
		id := "values " + name
		if _, err := e.Run(context.Background(), program.Job{ID: id, RetainHandles: true, Program: program.Program{Code: code}}); err != nil {
			t.Fatal(err)
		}
		req := program.NewWireRequest("GET", "https://x.test/a", nil, nil)
		values := func() int {
			e.mu.Lock()
			m := e.handles[id]
			e.mu.Unlock()
			ch := make(chan int, 1)
			m.submit(func() { ch <- m.ctx.RetainedValueCount() })
			return <-ch
		}
		e.Invoke(context.Background(), id, "fetch", req)
		before := values()
		for i := 0; i < 1000; i++ {
			e.Invoke(context.Background(), id, "fetch", req)
		}
		if grew := values() - before; grew > 0 {
			t.Errorf("%s: %d Values retained over 1000 invocations", name, grew)
		}
		e.Close(id)
	}
}

// TextEncoderStream and TextDecoderStream carry text across chunk
// boundaries (a UTF-8 sequence, a surrogate pair split in two).
func TestTextStreams(t *testing.T) {
	out := mustRun(t, `async () => {
		const enc = new TextEncoderStream();
		const w = enc.writable.getWriter();
		w.write('a\ud83d'); w.write('\ude00b'); w.close();
		const bytes = [];
		for (const r = enc.readable.getReader();;) { const {value, done} = await r.read(); if (done) break; bytes.push(...value); }
		const dec = new TextDecoderStream();
		const dw = dec.writable.getWriter();
		for (const b of bytes) dw.write(new Uint8Array([b]));
		dw.close();
		let text = '';
		for (const r = dec.readable.getReader();;) { const {value, done} = await r.read(); if (done) break; text += value; }
		return [bytes.length, text === 'a\ud83d\ude00b'];
	}`)
	if string(out.Result) != "[6,true]" {
		t.Fatalf("text streams: %s", out.Result)
	}
}

// structuredClone copies Blobs and Files (their bytes, type, name) and
// boxed BigInts.
func TestStructuredCloneBlobs(t *testing.T) {
	out := mustRun(t, `async () => {
		const f = new File(['hello'], 'a.txt', {type: 'text/plain', lastModified: 42});
		const [b2, f2, big] = structuredClone([new Blob(['xy'], {type: 'a/b'}), f, Object(5n)]);
		return [b2 instanceof Blob, await b2.text(), b2.type, f2 instanceof File, f2.name, f2.lastModified, await f2.text(), typeof big, big.valueOf() === 5n];
	}`)
	if string(out.Result) != `[true,"xy","a/b",true,"a.txt",42,"hello","object",true]` {
		t.Fatalf("structuredClone: %s", out.Result)
	}
}

func TestDOMExceptionCodes(t *testing.T) {
	out := mustRun(t, `async () => [DOMException.ABORT_ERR, new DOMException('x', 'AbortError').code, new DOMException('x', 'AbortError').ABORT_ERR, new DOMException('x', 'HierarchyRequestError').code, new DOMException('x', 'EncodingError').code]`)
	if string(out.Result) != `[20,20,20,3,0]` {
		t.Fatalf("codes: %s", out.Result)
	}
}
