package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/program"
)

// The web-platform-tests `.any.js` files vendored under testdata/wpt run
// here inside real isolates, with WPT's own testharness.js in its shell
// environment (no window, no worker). testdata/wpt-expectations.txt lists
// every subtest expected to fail, under a reason per file; a failure not
// listed, or a listed subtest that passes, fails the test. Regenerate the
// lists (reasons kept) with
//
//	RETAINER_WPT_UPDATE=1 go test ./sandbox -run TestWPTAny
//
// and docs/runtime.md's table with bench/wpt-table.sh.

const wptRoot = "testdata/wpt"

var metaScript = regexp.MustCompile(`(?m)^// META: script=(\S+)`)

// wptProgram is one .any.js file with its META scripts and testharness.js,
// as a program that answers the subtests' results.
func wptProgram(file string) (string, error) {
	src, err := os.ReadFile(filepath.Join(wptRoot, file))
	if err != nil {
		return "", err
	}
	harness, err := os.ReadFile(filepath.Join(wptRoot, "resources/testharness.js"))
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("async () => {\nglobalThis.self = globalThis;\nglobalThis.location = { search: '', href: 'https://wpt.test/" + file + "' };\n")
	b.WriteString("const __results = [];\nlet __finish;\nconst __done = new Promise(r => { __finish = r; });\n")
	b.Write(harness)
	// WPT's generated wrapper for an .any.js file defines self.GLOBAL; an
	// isolate is a worker-like global (no window, no document).
	b.WriteString("\nself.GLOBAL = { isWindow() { return false; }, isWorker() { return true; }, isShadowRealm() { return false; } };\nadd_result_callback(t => __results.push([t.name, t.status, String(t.message || '').slice(0, 300)]));\n")
	b.WriteString("add_completion_callback((tests, s) => __finish({status: s.status, message: String(s.message || '')}));\n")
	for _, m := range metaScript.FindAllStringSubmatch(string(src), -1) {
		p := m[1]
		if strings.HasPrefix(p, "/") {
			p = strings.TrimPrefix(p, "/")
		} else {
			p = path.Join(path.Dir(file), p)
		}
		helper, err := os.ReadFile(filepath.Join(wptRoot, p))
		if err != nil {
			// Not vendored (idlharness, WebIDLParser): the file's
			// subtests fail as they would without it.
			fmt.Fprintf(&b, "\nthrow new Error(%q);\n", "helper not vendored: "+p)
			continue
		}
		b.Write(helper)
		b.WriteString("\n")
	}
	b.Write(src)
	b.WriteString("\nconst harness = await Promise.race([__done, new Promise(r => setTimeout(() => r({status: 'timeout'}), 20000))]);\nreturn {harness, results: __results};\n}")
	return strings.ReplaceAll(b.String(), "\x00", "\\0"), nil
}

type wptResult struct {
	Harness struct {
		Status  any    `json:"status"`
		Message string `json:"message"`
	} `json:"harness"`
	Results [][3]any `json:"results"`
}

// runWPTAny runs one file and answers its subtests: name → passed, and
// a failure's message.
func runWPTAny(e *Engine, file string) (map[string]bool, map[string]string, error) {
	code, err := wptProgram(file)
	if err != nil {
		return nil, nil, err
	}
	out, err := e.Run(context.Background(), program.Job{Program: program.Program{Code: code}, Timeout: 60 * time.Second, MemoryMiB: 256})
	if err != nil {
		// The whole file failed to run (a helper threw, a bound): one
		// pseudo-subtest says so.
		return map[string]bool{"(file)": false}, map[string]string{"(file)": err.Error()}, nil
	}
	var r wptResult
	if err := json.Unmarshal(out.Result, &r); err != nil {
		return nil, nil, fmt.Errorf("%s: %v (%.200s)", file, err, out.Result)
	}
	passed, why := map[string]bool{}, map[string]string{}
	for _, t := range r.Results {
		name, _ := t[0].(string)
		status, _ := t[1].(float64)
		passed[name] = status == 0
		if status != 0 {
			why[name], _ = t[2].(string)
		}
	}
	if s, ok := r.Harness.Status.(float64); !ok || s != 0 {
		passed["(harness)"] = false
		why["(harness)"] = fmt.Sprint(r.Harness.Status, " ", r.Harness.Message)
	}
	return passed, why, nil
}

func wptFiles(t *testing.T) []string {
	var files []string
	filepath.WalkDir(wptRoot, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".any.js") {
			rel, _ := filepath.Rel(wptRoot, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(files)
	if len(files) == 0 {
		t.Fatal("no .any.js files under testdata/wpt")
	}
	return files
}

// expectations reads the expectations file: per file, its reason and the
// subtests expected to fail.
func expectations(t *testing.T) (reasons map[string]string, failing map[string]map[string]bool) {
	reasons, failing = map[string]string{}, map[string]map[string]bool{}
	f, err := os.Open("testdata/wpt-expectations.txt")
	if err != nil {
		return
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if rest, ok := strings.CutPrefix(line, "## "); ok {
			file, reason, _ := strings.Cut(rest, ": ")
			reasons[file] = reason
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		file, name, _ := strings.Cut(line, "\t")
		if failing[file] == nil {
			failing[file] = map[string]bool{}
		}
		failing[file][unescapeName(name)] = true
	}
	return
}

func escapeName(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func unescapeName(s string) string {
	var out string
	if json.Unmarshal([]byte(s), &out) != nil {
		return s
	}
	return out
}

func TestWPTAny(t *testing.T) {
	e := engine(t)
	files := wptFiles(t)
	// RETAINER_WPT_ONLY=<substring> runs only the matching files (and does
	// not check the others' expectations); RETAINER_WPT_WHY=1 logs every
	// failing subtest's message. Both are for working on the runtime.
	if only := os.Getenv("RETAINER_WPT_ONLY"); only != "" {
		var some []string
		for _, f := range files {
			if strings.Contains(f, only) {
				some = append(some, f)
			}
		}
		files = some
	}
	verbose := os.Getenv("RETAINER_WPT_WHY") != ""
	reasons, failing := expectations(t)
	type fileResult struct {
		passed map[string]bool
		why    map[string]string
		err    error
	}
	results := make([]fileResult, len(files))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	for i, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			p, w, err := runWPTAny(e, f)
			results[i] = fileResult{p, w, err}
		}()
	}
	wg.Wait()
	update := os.Getenv("RETAINER_WPT_UPDATE") != ""
	var out strings.Builder
	out.WriteString("# web-platform-tests subtests expected to fail inside an isolate, by file\n# (sandbox/wpt_any_test.go). `## <file>: <reason>` gives the reason for a\n# file's failures; each line after it is one failing subtest (JSON string).\n")
	totalPass, totalAll := 0, 0
	for i, f := range files {
		r := results[i]
		if r.err != nil {
			t.Errorf("%s: %v", f, r.err)
			continue
		}
		names := make([]string, 0, len(r.passed))
		for n := range r.passed {
			names = append(names, n)
		}
		sort.Strings(names)
		var fails []string
		for _, n := range names {
			totalAll++
			if r.passed[n] {
				totalPass++
				if failing[f][n] && !update {
					t.Errorf("unexpected pass (remove it from the expectations): %s %q", f, n)
				}
				continue
			}
			fails = append(fails, n)
			if verbose {
				t.Logf("FAIL %s %q: %s", f, n, r.why[n])
			}
			if !failing[f][n] && !update {
				t.Errorf("unexpected failure: %s %q: %s", f, n, r.why[n])
			}
		}
		if len(fails) > 0 {
			reason := reasons[f]
			if reason == "" {
				reason = "TODO: say why"
			}
			fmt.Fprintf(&out, "\n## %s: %s\n", f, reason)
			for _, n := range fails {
				fmt.Fprintf(&out, "%s\t%s\n", f, escapeName(n))
			}
		}
	}
	t.Logf("%d files, %d of %d subtests pass", len(files), totalPass, totalAll)
	if dir := os.Getenv("RETAINER_WPT_DUMP"); dir != "" {
		// For bench/wpt-table.sh: each program (to run in Node too) and
		// the isolate's results.
		isolate := map[string]map[string]bool{}
		for i, f := range files {
			isolate[f] = results[i].passed
			code, _ := wptProgram(f)
			name := filepath.Join(dir, strings.ReplaceAll(f, "/", "__"))
			os.WriteFile(name, []byte(code), 0o644)
		}
		data, _ := json.Marshal(isolate)
		os.WriteFile(filepath.Join(dir, "isolate.json"), data, 0o644)
	}
	if update && os.Getenv("RETAINER_WPT_ONLY") == "" {
		if err := os.WriteFile("testdata/wpt-expectations.txt", []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
