package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/program"
)

// wptDir is the vendored web-platform-tests URL data (testdata/wpt, with
// WPT's license), so a plain clone runs the test.
const wptDir = "testdata/wpt/url/resources"

// wptHarness runs inside an isolate; it answers the names of the failing
// cases of one data file.
const wptHarness = `import data from './data.js';
async () => {
	const failures = [];
	const fields = ['href', 'protocol', 'username', 'password', 'host', 'hostname', 'port', 'pathname', 'search', 'hash'];
	const name = (kind, c) => kind + ' ' + JSON.stringify(c.input !== undefined ? c.input : c.href) + (c.base ? ' base ' + JSON.stringify(c.base) : '') + (c.new_value !== undefined ? ' = ' + JSON.stringify(c.new_value) : '');
	if (data.kind === 'urltestdata') {
		for (const c of data.cases) {
			if (typeof c === 'string') continue;
			let url;
			try { url = c.base === null || c.base === undefined ? new URL(c.input) : new URL(c.input, c.base); } catch (e) {
				if (!c.failure) failures.push(name('parse', c) + ': threw ' + e.message);
				continue;
			}
			if (c.failure) { failures.push(name('parse', c) + ': parsed'); continue; }
			for (const f of fields) if (url[f] !== c[f]) { failures.push(name('parse', c) + ': ' + f + ' ' + JSON.stringify(url[f])); break; }
			if (c.origin !== undefined && url.origin !== c.origin) failures.push(name('origin', c) + ': ' + url.origin);
			if (c.searchParams !== undefined && url.searchParams.toString() !== c.searchParams) failures.push(name('searchParams', c));
		}
	} else if (data.kind === 'setters') {
		for (const [setter, cases] of Object.entries(data.cases)) {
			if (setter === 'comment') continue;
			for (const c of cases) {
				const url = new URL(c.href);
				try { url[setter] = c.new_value; } catch (e) { failures.push(name(setter, c) + ': threw'); continue; }
				for (const [f, v] of Object.entries(c.expected)) if (url[f] !== v) { failures.push(name(setter, c) + ': ' + f + ' ' + JSON.stringify(url[f])); break; }
			}
		}
	} else if (data.kind === 'searchfast') {
		// The urlencoded fast path against the full parser: a '%' anywhere
		// sends a string through the full one.
		for (const q of data.cases) {
			const fast = JSON.stringify([...new URLSearchParams(q)]);
			const full = JSON.stringify([...new URLSearchParams(q + '&%7A=1')].slice(0, -1));
			if (fast !== full) failures.push('searchfast ' + JSON.stringify(q) + ': ' + fast + ' vs ' + full);
		}
	} else if (data.kind === 'fastpath') {
		// The parser's fast path (webapi/url/url-fast.js) against the full state
		// machine: a base URL forces the full parser, and does not change
		// what an input of the form scheme://... means.
		const inputs = data.cases.map(c => typeof c === 'string' ? c : c.input).filter(i => typeof i === 'string' && /^https?:\/\//i.test(i));
		for (const input of inputs) {
			let fast = null, full = null;
			try { fast = new URL(input).href } catch (e) { fast = 'throws' }
			try { full = new URL(input, 'http://base.invalid/base/path?q#f').href } catch (e) { full = 'throws' }
			if (fast !== full) failures.push('fastpath ' + JSON.stringify(input) + ': ' + fast + ' vs ' + full);
		}
	} else {
		for (const c of data.cases) {
			if (typeof c === 'string') continue;
			let host = null;
			try { host = new URL('https://' + c.input + '/x').host; } catch (e) { host = null; }
			if (host !== c.output) failures.push(name('toascii', c) + ': ' + JSON.stringify(host));
		}
	}
	return failures;
}`

func runWPTFile(t *testing.T, file, kind string) []string {
	data, err := os.ReadFile(filepath.Join(wptDir, file))
	if err != nil {
		t.Fatalf("the WPT data must be beside the checkout (%v)", err)
	}
	return runWPTData(t, kind, string(data))
}

func runWPTData(t *testing.T, kind, data string) []string {
	module := "export default {kind: " + jsonString(kind) + ", cases: " + data + "};"
	out, err := engine(t).Run(context.Background(), program.Job{
		Program:   program.Program{Code: wptHarness, Modules: map[string]string{"./data.js": module}},
		Timeout:   60 * time.Second,
		MemoryMiB: 256,
	})
	if err != nil {
		t.Fatalf("%s: %v", kind, err)
	}
	var failures []string
	if err := json.Unmarshal(out.Result, &failures); err != nil {
		t.Fatal(err)
	}
	return failures
}

func jsonString(s string) string { b, _ := json.Marshal(s); return string(b) }

// TestWPTURL runs the URL data of web-platform-tests inside a real isolate.
// testdata/wpt-url-expectations.txt lists each known failure with its
// reason; an unexpected failure or an unexpected pass fails the test.
func TestWPTURL(t *testing.T) {
	expected := map[string]string{}
	if f, err := os.Open("testdata/wpt-url-expectations.txt"); err == nil {
		s := bufio.NewScanner(f)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		for s.Scan() {
			line := s.Text()
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			name, reason, _ := strings.Cut(line, "\t# ")
			expected[name] = reason
		}
		f.Close()
	}
	seen := map[string]bool{}
	for _, c := range []struct{ file, kind string }{
		{"urltestdata.json", "urltestdata"},
		{"setters_tests.json", "setters"},
		{"toascii.json", "toascii"},
	} {
		failures := runWPTFile(t, c.file, c.kind)
		sort.Strings(failures)
		unexpected := 0
		for _, f := range failures {
			seen[f] = true
			if _, ok := expected[f]; !ok {
				unexpected++
				t.Errorf("unexpected failure: %s", f)
			}
		}
		t.Logf("%s: %d failures (%d unexpected)", c.file, len(failures), unexpected)
	}
	// The fast path against the full parser, on WPT's inputs and on inputs
	// at the edges of what the fast path accepts.
	edges := []string{"http://a/", "http://a", "https://example.com/a/b/?x=1&y=2", "http://example.com:80/", "http://example.com:0/",
		"https://example.com:443/x", "http://example.com:65535/", "http://example.com:65536/", "http://example.com:08/",
		"http://1.2.3.4/", "http://1.2.3/", "http://a.0x/", "http://a.0x1f/", "http://a.09/", "http://a.b1/", "http://xn--nxasmq6b.com/",
		"http://xn--a.com/", "http://a..b/", "http://a./", "http://-a-.b-/", "http://a/./b", "http://a/../b", "http://a/b/..",
		"http://a/%2e/b", "http://a/.%2E/b", "http://a/b%2f", "http://a/%zz", "http://a/b?c'd", "http://a/b'c", "http://a/b?c?d",
		"http://a/b?", "http://a/b#c", "http://a/ b", "http://a/b\\c", "HTTP://a/", "http://A/", "http://a/b/c/d/e/f/g",
		"http://a/@:!$&()*+,;=~-._", "http://a/?@:!$&()*+,;=~-._/?", "http://user@a/", "http://a:b@c/", "http://[::1]/"}
	for _, c := range []struct{ file, kind string }{{"urltestdata.json", "fastpath"}} {
		data, _ := os.ReadFile(filepath.Join(wptDir, c.file))
		var cases []any
		json.Unmarshal(data, &cases)
		for _, e := range edges {
			cases = append(cases, e)
		}
		all, _ := json.Marshal(cases)
		for _, f := range runWPTData(t, c.kind, string(all)) {
			t.Errorf("%s", f)
		}
	}
	queries := []string{"", "a=b", "a=b&c=d", "a", "a=", "=b", "&&a=b&&", "a=b=c", "?a=b", "a b=c d", "a=b;c=d", "x=%41", "a+b=c+d",
		"é=ü", "\u007f=1", "a=\u0000", "\U0001F600=1", "k='v'", "a=b&a=c", "~!@$^*()_-`{}|[]:;\"<>,./?=1"}
	qs, _ := json.Marshal(queries)
	for _, f := range runWPTData(t, "searchfast", string(qs)) {
		t.Errorf("%s", f)
	}
	for name := range expected {
		if !seen[name] {
			t.Errorf("unexpected pass (remove it from the expectations): %s", name)
		}
	}
}
