package freeport

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// fixedPort is a port a test names where it would bind or dial on this
// machine: a loopback address with a port, a bare listen address (":9080",
// "http://:9080"), a Caddyfile's http_port or https_port, a port constant,
// a member's port as base+i.
var fixedPort = regexp.MustCompile(`(?:localhost|127\.0\.0\.1|\[::1\]|0\.0\.0\.0):[0-9]{2,5}\b|":[0-9]{2,5}"|//:[0-9]{2,5}\b|\bhttps?_port\s+[0-9]{2,5}\b|\b\w*[Pp]ort\w*\s*:?=\s*[0-9]{2,5}\b|\b[0-9]{4,5}\s*\+\s*[a-z]\w*\b`)

// notBound are the fixed ports tests name that nothing binds or dials:
// a URL parsed, a host or allow-list entry compared, a config validated,
// the example Caddyfile's text a test replaces with free ports.
var notBound = map[string][]string{
	"caddymodule/cluster_test.go":        {"127.0.0.1:2379", "127.0.0.1:7946"},
	"caddymodule/key_test.go":            {"localhost:8080", "[::1]:8080"},
	"caddymodule/capabilities_test.go":   {`":53"`}, // a message must not name the resolver's port
	"capability/capability_test.go":      {"localhost:9000", `":53"`},
	"cmd/retainer/cluster_test.go":       {"localhost:2019", `":8080"`},
	"cmd/retainer/main_test.go":          {"localhost:2019", `":8080"`},
	"sandbox/bench_test.go":              {"127.0.0.1:8080"},
	"sandbox/url_bench_test.go":          {"127.0.0.1:8080"},
	"sandbox/wire_test.go":               {"localhost:8089"},
	"internal/urlparse/urlparse_test.go": {"[::1]:81", "127.0.0.1:8080", "127.0.0.1:80", `":80"`, `":443"`, `":0080"`, `":8080"`, `":65535"`, `":65536"`},
}

// TestNoTestNamesAFixedPort: two runs of the tests at once on one machine
// (docs/architecture.md, internal/freeport) collide on any port a test
// names; a test takes :0 and reads the address back, or a port of this
// package.
func TestNoTestNamesAFixedPort(t *testing.T) {
	t.Parallel()
	root := "../.."
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (d.Name() == "third_party" || d.Name() == "node_modules" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		// Tests, and the packages only tests use (etcdtest, s3test...).
		if d.IsDir() || !strings.HasSuffix(path, ".go") || !strings.HasSuffix(path, "_test.go") && !strings.HasSuffix(filepath.Dir(path), "test") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if rel == "internal/freeport/fixed_test.go" {
			return nil // the list above
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			for _, m := range fixedPort.FindAllString(line, -1) {
				if allowed(rel, m) {
					continue
				}
				t.Errorf("%s:%d names the fixed port %s: listen on :0 and read the address back, or take a port of internal/freeport", rel, n+1, m)
			}
		}
		return nil
	})
}

func allowed(file, match string) bool {
	for _, ok := range notBound[file] {
		if match == ok {
			return true
		}
	}
	// Ports below 10 are the tests' "nothing listens here" (127.0.0.1:1).
	i := strings.LastIndexAny(match, ": ")
	p, err := strconv.Atoi(strings.Trim(match[i+1:], `"`))
	return err == nil && p < 10
}
