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
	module := "export default {kind: " + jsonString(kind) + ", cases: " + string(data) + "};"
	out, err := engine(t).Run(context.Background(), Job{
		Program:   Program{Code: wptHarness, Modules: map[string]string{"./data.js": module}},
		Timeout:   60 * time.Second,
		MemoryMiB: 256,
	})
	if err != nil {
		t.Fatalf("%s: %v", file, err)
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
	for name := range expected {
		if !seen[name] {
			t.Errorf("unexpected pass (remove it from the expectations): %s", name)
		}
	}
}
