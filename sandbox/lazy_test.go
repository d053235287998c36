package sandbox

import "testing"

// TestLazyGlobals: the globals the runtime makes on first touch (lazy.go,
// bootstrap's lazyGlobal) start as accessors, become plain data properties
// when touched, keep their identity, can be replaced before they are made,
// and are the classes the runtime's own errors and objects use.
func TestLazyGlobals(t *testing.T) {
	runCases(t, []jsCase{
		{"not made at start", `() => ['DOMException', 'FileReader', 'ProgressEvent', 'CryptoKey', 'CompressionStream', 'DecompressionStream', 'TextDecoderStream', 'TextEncoderStream', 'URL', 'ReadableStream'].filter(n => typeof Object.getOwnPropertyDescriptor(globalThis, n).get !== 'function')`, `[]`},
		{"crypto.subtle not made at start", `() => typeof Object.getOwnPropertyDescriptor(crypto, 'subtle').get`, `"function"`},
		{"a data property once touched", `() => { const C = DOMException; const d = Object.getOwnPropertyDescriptor(globalThis, 'DOMException'); return [d.value === C, d.writable, d.enumerable, d.configurable, DOMException === C] }`, `[true,true,false,true,true]`},
		{"not enumerable", `() => Object.keys(globalThis).filter(k => ['DOMException', 'FileReader', 'CryptoKey', 'CompressionStream'].includes(k))`, `[]`},
		{"replaced before it is made", `() => { globalThis.FileReader = 1; return [FileReader, typeof ProgressEvent] }`, `[1,"function"]`},
		{"the runtime's errors are the global DOMException", `() => { try { atob('*') } catch (e) { return [e instanceof DOMException, e.name, e.code, DOMException.INVALID_CHARACTER_ERR, Object.getOwnPropertyDescriptor(DOMException, 'ABORT_ERR').writable] } }`, `[true,"InvalidCharacterError",5,5,false]`},
		{"an abort reason made before the global is touched", `() => { const c = new AbortController(); c.abort(); const r = c.signal.reason; return [r.name, r instanceof DOMException] }`, `["AbortError",true]`},
		{"crypto.subtle keeps its identity", `() => [crypto.subtle === crypto.subtle, typeof crypto.subtle.digest, Object.getOwnPropertyDescriptor(crypto, 'subtle').value === crypto.subtle]`, `[true,"function",true]`},
		{"CryptoKey is the class of subtle's keys", `async () => { const k = await crypto.subtle.importKey('raw', new Uint8Array(16), {name: 'HMAC', hash: 'SHA-256'}, false, ['sign']); return [k instanceof CryptoKey, k.type] }`, `[true,"secret"]`},
		{"FileReader reads with its ProgressEvent", `() => new Promise(resolve => { const r = new FileReader(); r.onload = (e) => resolve([r.result, e instanceof ProgressEvent, FileReader.DONE, r.readyState]); r.readAsText(new Blob(['hi'])) })`, `["hi",true,2,2]`},
		{"a host that is not plain ASCII loads tr46 through the url module", `() => [new URL('https://münchen.de/').host, new URL('https://xn--mnchen-3ya.de/').host, new URL('https://EXAMPLE.com').host]`, `["xn--mnchen-3ya.de","xn--mnchen-3ya.de","example.com"]`},
		{"compression round trip", `async () => { const s = new Blob(['hello hello hello']).stream().pipeThrough(new CompressionStream('gzip')).pipeThrough(new DecompressionStream('gzip')).pipeThrough(new TextDecoderStream()); let out = ''; for await (const c of s) out += c; return out }`, `"hello hello hello"`},
	})
}

// TestLazyGlobalsAfterPrototypePollution: a module made on first touch is
// made after the program ran, so what the program added to
// Object.prototype (as some libraries do, enumerable) must not reach the
// module's making: esbuild's export helper walked it with for...in, and
// URL, URLSearchParams, Request and the streams threw "Getter must be a
// function" (sandbox/js/build rewrites the helper).
func TestLazyGlobalsAfterPrototypePollution(t *testing.T) {
	const pollute = `Object.prototype.extend = function () {}; Object.prototype.leak = 3; `
	runCases(t, []jsCase{
		{"URL", `() => { ` + pollute + `return new URL('https://a.test/x?y=1').searchParams.get('y') }`, `"1"`},
		{"URLSearchParams", `() => { ` + pollute + `return new URLSearchParams('a=1&b=2').get('b') }`, `"2"`},
		{"Request", `() => { ` + pollute + `return new Request('https://a.test/x').url }`, `"https://a.test/x"`},
		{"ReadableStream", `async () => { ` + pollute + `const r = new ReadableStream({ start(c) { c.enqueue('x'); c.close() } }).getReader(); return (await r.read()).value }`, `"x"`},
		{"TextDecoderStream", `() => { ` + pollute + `return new TextDecoderStream().encoding }`, `"utf-8"`},
	})
}

// TestDescriptorFieldsOnObjectPrototype: a program that puts a property
// descriptor's field names on Object.prototype (get, set, value, writable)
// leaves the runtime's own definitions and the bundled modules' alone: they
// read a descriptor's own fields only. Each case failed with "Getter must
// be a function" or "Invalid property descriptor" before.
func TestDescriptorFieldsOnObjectPrototype(t *testing.T) {
	const pollute = `Object.prototype.get = 1; Object.prototype.set = 1; Object.prototype.value = 1; Object.prototype.writable = true; `
	runCases(t, []jsCase{
		{"URL", `() => { ` + pollute + `return new URL('https://a.test/x?y=1').searchParams.get('y') }`, `"1"`},
		{"URL with a base", `() => { ` + pollute + `return new URL('/p', 'https://a.test/').href }`, `"https://a.test/p"`},
		{"Request", `async () => { ` + pollute + `return await new Request('https://a.test/', { method: 'POST', body: 'x' }).text() }`, `"x"`},
		{"ReadableStream", `async () => { ` + pollute + `const r = new ReadableStream({ start(c) { c.enqueue('x'); c.close() } }).getReader(); return (await r.read()).value }`, `"x"`},
		{"Event", `() => { ` + pollute + `return new Event('x').isTrusted }`, `false`},
		{"FileReader", `() => { ` + pollute + `return typeof new FileReader().onload }`, `"object"`},
		{"Headers", `() => { ` + pollute + `return [...new Headers({ a: '1' })].length }`, `1`},
		{"Response", `async () => { ` + pollute + `return await new Response('hi').text() }`, `"hi"`},
	})
}
