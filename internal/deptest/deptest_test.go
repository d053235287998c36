package deptest

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
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
	"internal/etcdtest":        {},
	"internal/pgtest":          {},
	"internal/dnstest":         {},
	"internal/docstest":        {},
	"cluster":                  {"store"},
	"internal/hostcache":       {},
	"kv":                       {"fault", "budgets", "store", "internal/wirejson"},
	"kv/cache":                 {"fault", "budgets", "internal/wirejson", "internal/hostcache"},
	"sqldb":                    {"fault", "budgets", "internal/wirejson"},
	"objects":                  {"fault", "budgets"},
	"capability":               {"fault", "budgets", "store", "kv", "sqldb", "internal/wirejson", "internal/readsome"},
	"sandbox/webapi":           {},
	"sandbox/webapi/crypto":    {"sandbox/webapi", "internal/wirejson"},
	"sandbox/webapi/text":      {"sandbox/webapi", "internal/wirejson"},
	"sandbox/webapi/websocket": {},
	"sandbox/webapi/url":       {"sandbox/webapi", "internal/urlparse"},
	"sandbox":                  {"fault", "budgets", "internal/wirejson", "internal/urlparse", "sandbox/webapi", "sandbox/webapi/crypto", "sandbox/webapi/text", "sandbox/webapi/websocket", "sandbox/webapi/url"},
	"sandbox/worker/wire":      {"fault", "budgets", "sandbox"},
	"sandbox/worker":           {"fault", "budgets", "sandbox", "sandbox/worker/wire", "internal/wirejson", "internal/gctarget", "internal/hostcache"},
	"sandbox/worker/child":     {"fault", "budgets", "sandbox", "sandbox/worker/wire", "internal/wirejson", "internal/gctarget", "internal/hostcache", "kv/cache"},
	"handles":                  {"fault", "budgets", "store", "sandbox", "sandbox/worker", "capability", "internal/wirejson", "internal/readsome"},
	"caddymodule":              {"fault", "budgets", "store", "cluster", "sandbox", "sandbox/worker", "sandbox/worker/child", "handles", "authz", "receipts", "logstore", "capability", "sandbox/webapi/websocket", "kv", "kv/cache", "sqldb", "internal/wirejson", "internal/gctarget"},
	// The Go client is a host's library: nothing of the gateway.
	"client": {},
}

// only lists third-party import prefixes that only some packages may use.
var only = map[string][]string{
	"github.com/caddyserver/caddy":  {"caddymodule", "cmd/retainer"},
	"rogchap.com/v8go":              {"sandbox"},
	"go.etcd.io/bbolt":              {"store"},
	"github.com/ncruces/go-sqlite3": {"sqldb"},
	"github.com/jackc/pgx":          {"store"},
	"go.etcd.io/etcd":               {"store", "cluster", "internal/etcdtest"},
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
