package deptest

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/retainer-gw/retainer"

// allowed lists, for each package, the project packages it may import.
// Third-party rules follow below.
var allowed = map[string][]string{
	"fault":                    {},
	"budgets":                  {"fault"},
	"authz":                    {},
	"receipts":                 {"budgets", "store", "internal/wirejson"},
	"logstore":                 {"fault", "budgets", "store", "internal/wirejson"},
	"internal/wirejson":        {},
	"internal/readsome":        {},
	"internal/urlparse":        {},
	"internal/gctarget":        {},
	"store":                    {},
	"store/storetest":          {"store"},
	"internal/etcdtest":        {"internal/freeport"},
	"internal/pgtest":          {"internal/freeport"},
	"internal/dnstest":         {},
	"internal/docstest":        {},
	"internal/waitfor":         {},
	"internal/freeport":        {},
	"cluster":                  {"store"},
	"internal/hostcache":       {},
	"kv":                       {"fault", "budgets", "store", "internal/wirejson", "kv/kvop"},
	"kv/kvop":                  {},
	"kv/cache":                 {"fault", "budgets", "internal/wirejson", "internal/hostcache", "kv/kvop"},
	"sqldb":                    {"fault", "budgets", "internal/wirejson"},
	"objects":                  {"fault", "budgets"},
	"objects/s3":               {"objects"},
	"objects/objectstest":      {"objects"},
	"internal/s3test":          {"internal/freeport"},
	"objects/files":            {"objects"},
	"capability":               {"fault", "budgets", "store", "kv", "kv/kvop", "sqldb", "objects", "internal/wirejson", "internal/readsome"},
	"sandbox/webapi":           {},
	"sandbox/webapi/crypto":    {"sandbox/webapi", "internal/wirejson"},
	"sandbox/webapi/text":      {"budgets", "sandbox/webapi", "internal/wirejson"},
	"sandbox/webapi/websocket": {},
	"sandbox/webapi/url":       {"sandbox/webapi", "internal/urlparse"},
	"program":                  {"sandbox/webapi/websocket"},
	"sandbox":                  {"fault", "budgets", "program", "internal/wirejson", "internal/urlparse", "sandbox/webapi", "sandbox/webapi/crypto", "sandbox/webapi/text", "sandbox/webapi/websocket", "sandbox/webapi/url"},
	"workers/wire":             {"fault", "budgets", "program"},
	"workers":                  {"fault", "budgets", "program", "workers/wire", "internal/wirejson", "internal/gctarget", "internal/hostcache"},
	"sandbox/child":            {"fault", "budgets", "program", "sandbox", "workers/wire", "internal/wirejson", "internal/gctarget", "internal/hostcache", "kv/cache"},
	"handles":                  {"fault", "budgets", "store", "program", "workers", "capability", "kv", "kv/kvop", "internal/wirejson", "internal/readsome"},
	"caddymodule":              {"fault", "budgets", "store", "cluster", "program", "workers", "handles", "authz", "receipts", "logstore", "capability", "sandbox/webapi/websocket", "kv", "kv/cache", "sqldb", "objects", "objects/files", "objects/s3", "internal/wirejson", "internal/gctarget"},
	// The Go client is a host's library: nothing of the gateway.
	"client": {},
	// The xcaddy plugin: the modules and the worker subcommand.
	".": {"caddymodule", "workers", "sandbox/child"},
}

// only lists third-party import prefixes that only some packages may use.
var only = map[string][]string{
	"github.com/caddyserver/caddy":  {"caddymodule", "cmd/retainer", "."},
	"rogchap.com/v8go":              {"sandbox"},
	"go.etcd.io/bbolt":              {"store"},
	"github.com/ncruces/go-sqlite3": {"sqldb"},
	"github.com/jackc/pgx":          {"store"},
	"go.etcd.io/etcd":               {"store", "cluster", "internal/etcdtest"},
	"github.com/minio/minio-go":     {"objects/s3"},
}

func imports(t *testing.T, dir string) map[string]bool {
	out := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			out[p] = true
		}
	}
	return out
}

func TestDependencyArrows(t *testing.T) {
	root := "../.."
	for pkg, ok := range allowed {
		okSet := map[string]bool{}
		for _, p := range ok {
			okSet[module+"/"+p] = true
		}
		for imp := range imports(t, filepath.Join(root, pkg)) {
			if strings.HasPrefix(imp, module+"/") && !okSet[imp] {
				t.Errorf("%s imports %s, against the arrows", pkg, imp)
			}
		}
	}
	filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() || strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		for imp := range imports(t, path) {
			for prefix, pkgs := range only {
				if !strings.HasPrefix(imp, prefix) {
					continue
				}
				allowedHere := false
				for _, p := range pkgs {
					if rel == p {
						allowedHere = true
					}
				}
				if !allowedHere {
					t.Errorf("%s imports %s; only %v may", rel, imp, pkgs)
				}
			}
		}
		return nil
	})
}

// linksV8 lists the packages that may link V8, through any chain of
// imports: the engine, the worker process that hosts it, and where the
// binary is assembled with the worker subcommand (the xcaddy plugin,
// command.go, and cmd/retainer above it). The gateway's own packages
// (caddymodule, the pool, its wire protocol, handles and below) name a
// program's values through package program and link no V8
// (docs/architecture.md, "Which binaries link V8").
var linksV8 = map[string]bool{
	"sandbox":       true,
	"sandbox/child": true,
	"cmd/retainer":  true,
	".":             true, // retainer.go and command.go, the xcaddy plugin
}

// TestGatewayLinksNoV8 follows each package's imports (its non-test
// files) through the module: a package outside linksV8 that reaches
// rogchap.com/v8go by any path fails, with the path.
func TestGatewayLinksNoV8(t *testing.T) {
	root := "../.."
	deps := map[string][]string{} // package (relative) -> what it imports
	filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, path)
		for imp := range imports(t, path) {
			deps[rel] = append(deps[rel], imp)
		}
		return nil
	})
	// via answers the imports by which pkg reaches v8go, or nil (Go
	// allows no import cycles, so the walk ends).
	memo := map[string][]string{}
	var via func(pkg string) []string
	via = func(pkg string) []string {
		if p, ok := memo[pkg]; ok {
			return p
		}
		var path []string
		for _, imp := range deps[pkg] {
			if strings.HasPrefix(imp, "rogchap.com/v8go") {
				path = []string{imp}
				break
			}
			if rel, ok := strings.CutPrefix(imp, module+"/"); ok {
				if p := via(rel); p != nil {
					path = append([]string{rel}, p...)
					break
				}
			}
		}
		memo[pkg] = path
		return path
	}
	if via("sandbox") == nil {
		t.Fatal("sandbox links no V8: the walk is broken")
	}
	for pkg := range deps {
		if linksV8[pkg] {
			continue
		}
		if p := via(pkg); p != nil {
			t.Errorf("%s links V8 (%s -> %s); only %v may", pkg, pkg, strings.Join(p, " -> "), keys(linksV8))
		}
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
