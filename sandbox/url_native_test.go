package sandbox

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The Go parser (internal/urlparse, through webapi/url/url-fast.js) against
// whatwg-url's state machine, record for record: every WPT URL input with
// and without its base (the base parsed by either), then a long
// deterministic run of inputs built from the pieces parsers trip on. A
// record is compared field by field, the host as serialized.
const urlNativeHarness = `(() => {
const { native, js, serializeHost, serializeURL } = __urlModule.parsers();
const failures = [];
const outcomes = { parsed: 0, failure: 0, deferred: 0 };
function view(r) {
  if (r === null) return null;
  return { scheme: r.scheme, username: r.username, password: r.password, host: r.host === null ? null : serializeHost(r.host),
    port: r.port, path: r.path, query: r.query, fragment: r.fragment };
}
function check(input, base) {
  const jsBase = base === undefined ? null : js(base);
  if (base !== undefined && jsBase === null) return;
  const want = JSON.stringify(view(js(input, { baseURL: jsBase })));
  const got = JSON.stringify(view(native(input, { baseURL: jsBase })));
  if (got !== want) failures.push(JSON.stringify([input, base]) + ': ' + got + ' (Go) vs ' + want + ' (whatwg-url)');
  if (base !== undefined) {
    const viaNativeBase = JSON.stringify(view(native(input, { baseURL: native(base) })));
    if (viaNativeBase !== want) failures.push(JSON.stringify([input, base]) + ' on the Go parser\'s base: ' + viaNativeBase + ' vs ' + want);
  }
  const wire = __urlParse(input.toWellFormed(), jsBase === null ? '' : serializeURL(jsBase));
  outcomes[wire === '' ? 'failure' : wire === '?' ? 'deferred' : 'parsed']++;
}
for (const c of __data.urltestdata) {
  if (typeof c === 'string') continue;
  check(c.input);
  if (c.base !== null && c.base !== undefined) check(c.input, c.base);
}
// Past the Go side's length bound the state machine parses (url-fast.js).
check('https://H.test/' + 'a%'.repeat(20000) + '?q#f');
check('/' + 'b'.repeat(40000), 'http://h.test/a/b');
let seed = 7;
function rand(n) { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n; }
const schemes = ['http:', 'HTTP:', 'https:', 'ws:', 'wss:', 'ftp:', 'file:', 'foo:', 'mailto:', 'data:', 'javascript:', 'blob:', 'sc:', 'a+b-c.d:', '', '1a:', 'h\tttp:'];
const pieces = ['//', '/', '\\\\', '?', '#', '@', ':', ':80', ':443', ':0', ':65536', ':8080', '[', ']', '.', '..', '/./', '/../', '%2e', '%2E%2e',
  'example.com', 'EXAMPLE.com', 'a.b', 'a..b', '127.0.0.1', '0x7f.1', '1.2.3.4.5', '999999999999', '[::1]', '[1:2::3:4]', '[::ffff:1.2.3.4]', '[v1.x]',
  'user', 'user:pass@', ':@', 'a b', ' ', '\t', '\n', '%', '%41', '%zz', '%00', '^', '\x60', '{', '}', '|', '"', '<', '>', "'", '~', '!', '$', '&', '=', '+', ',', ';',
  'é', 'ü', '\u00a0', '\ufffd', '\ud83d\ude00', 'ß', 'C:', 'C|', 'c:/', 'localhost', 'LOCALHOST', 'x', 'yz', '0', '09', '_', '-', '*', '\x7f', '\x01', '\x00'];
const bases = [undefined, 'http://h.test/a/b?q#f', 'https://h.test:81/a/', 'file:///C:/dir/file', 'foo://h/a/b', 'sc:opaque', 'sc:/a/b', 'data:text/plain,x', 'http://[::1]/'];
const hosts = ['example.com', 'EXAMPLE.com', 'a.b', '127.0.0.1', '0x7f.1', '[::1]', 'h:8080', 'h:80', 'localhost', 'x'];
for (let i = 0; i < 30000; i++) {
  // Half of them shaped like a URL with a host, then anything.
  let s = rand(3) === 0 ? '' : schemes[rand(schemes.length)];
  if (rand(2) === 0) s += '//' + hosts[rand(hosts.length)] + '/';
  const n = 1 + rand(7);
  for (let k = 0; k < n; k++) s += pieces[rand(pieces.length)];
  check(s, bases[rand(bases.length)]);
}
return JSON.stringify({ failures: failures.slice(0, 40), count: failures.length, outcomes });
})()`

func TestURLNativeMatchesWhatwgURL(t *testing.T) {
	urltestdata, err := os.ReadFile(filepath.Join(wptDir, "urltestdata.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := runWithURLModule(t, "globalThis.__data = {urltestdata: "+string(urltestdata)+"}", urlNativeHarness)
	var res struct {
		Failures []string
		Count    int
		Outcomes struct{ Parsed, Failure, Deferred int }
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, f := range res.Failures {
		t.Error(f)
	}
	o := res.Outcomes
	t.Logf("%d inputs: %d parsed by the Go parser, %d failures, %d deferred to whatwg-url", o.Parsed+o.Failure+o.Deferred, o.Parsed, o.Failure, o.Deferred)
	if res.Count > 0 {
		t.Errorf("%d inputs differ", res.Count)
	}
	// The run must exercise the Go parser, not only its deferrals.
	if o.Parsed < 10000 || o.Failure < 1000 {
		t.Errorf("the inputs reach the Go parser too seldom: %+v", o)
	}
}
