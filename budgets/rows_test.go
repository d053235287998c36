package budgets

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// maxConsts calls f with every max*-named constant (any case) of the
// module's Go files outside budgets, tests included, with the file's path
// from the module's root.
func maxConsts(t *testing.T, f func(path, name string, value ast.Expr)) {
	root := ".."
	filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "third_party", "testdata", "budgets":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, path)
		ast.Inspect(file, func(n ast.Node) bool {
			g, ok := n.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				return true
			}
			for _, spec := range g.Specs {
				v := spec.(*ast.ValueSpec)
				for i, name := range v.Names {
					if i < len(v.Values) && strings.HasPrefix(strings.ToLower(name.Name), "max") {
						f(filepath.ToSlash(rel), name.Name, v.Values[i])
					}
				}
			}
			return true
		})
		return nil
	})
}

// A cap has one name, its row here: a max* constant elsewhere that only
// renames a row (`maxOpen = budgets.SQLOpen`) is a second place to look
// for it and to change it, and is refused (docs/architecture.md,
// "Budgets").
func TestNoCapIsARowUnderAnotherName(t *testing.T) {
	maxConsts(t, func(path, name string, value ast.Expr) {
		if sel, ok := value.(*ast.SelectorExpr); ok {
			if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "budgets" {
				t.Errorf("%s: %s is budgets.%s under another name; use the row", path, name, sel.Sel.Name)
			}
		}
	})
}

// notCaps are the max* constants with a value of their own outside
// budgets that are no cap a tenant, visitor or program is charged
// against: an external format's or protocol's fact, or a bound past which
// nothing is refused. Each says why; anything else is a row of budgets.
var notCaps = map[string]string{
	"objects/objects.go MaxKey":                 "R2's and S3's longest key (1,024 bytes): the API's contract, not a budget",
	"objects/objects.go MaxListLimit":           "R2's most keys a list page answers (1,000): the API's contract",
	"objects/objects.go maxDeleteKeys":          "R2's most keys one delete takes (1,000): the API's contract",
	"objects/s3/names.go maxName":               "S3's longest object name (1,024 bytes): the backend's format",
	"internal/urlparse/urlparse.go MaxLength":   "past it the parse is left to the JavaScript parser (Deferred), nothing refused",
	"internal/urlparse/urlparse.go maxSegments": "past it the parse is left to the JavaScript parser (Deferred), nothing refused",
	"internal/urlparse/urlparse.go maxHost":     "DNS's longest name (255 bytes); past it the parse is Deferred, nothing refused",
	"authz/authz.go MaxTenantBytes":             "a tenant id's longest form (README.md, API): the token format's contract, not a resource held",
	"workers/wire/write.go maxHeld":             "answers held back to share one write (a batching knob): past it they are written, nothing refused",
	"workers/wire/protocol.go MaxWorkerPost":    "the protocol's frame bound on a worker's own request, against a broken worker: a program's output is held below it by LogBytes and the other rows",
	"workers/wire/protocol.go MaxGatewayFrame":  "what a worker reads from the trusted gateway, sized for ResponseBodyBytes' worst encoding: nothing a tenant sends reaches it",
	"kv/cache/queue.go maxCarriedBytes":         "answers carried in one frame with the writes they wait for (a batching knob): past it an answer goes on its own, nothing refused",
	"kv/cache/queue.go MaxCarriedAnswer":        "the largest answer carried with writes (a batching knob): a larger one goes on its own, nothing refused",
	"workers/wire/write.go maxSpare":            "the largest write buffer kept for reuse: a larger one is dropped, nothing refused",
	"sandbox/child/serve.go maxReplyBuffer":     "the largest answer buffer a worker keeps for reuse: a larger one is dropped, nothing refused",
	"kv/cache/wire.go maxLeft":                  "the most time left a batch's write may claim (a day): a larger claim is a malformed frame; the wait itself is bounded by the kv store's own bound",
}

// A cap is a row of budgets, so that the table in docs/architecture.md
// ("Budgets") is the whole list: a max* constant with a value of its own
// outside budgets is refused unless notCaps names it with its reason. A
// constant derived from a row (`MaxCalls = budgets.WireRequestsServing / 2`)
// is allowed; one that only renames a row is refused above.
func TestEveryCapIsARow(t *testing.T) {
	seen := map[string]bool{}
	maxConsts(t, func(path, name string, value ast.Expr) {
		if strings.HasSuffix(path, "_test.go") {
			return
		}
		key := path + " " + name
		if _, ok := notCaps[key]; ok {
			seen[key] = true
			return
		}
		fromRow := false
		ast.Inspect(value, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "budgets" {
					fromRow = true
				}
			}
			return true
		})
		if !fromRow {
			t.Errorf("%s: %s is a cap outside budgets; make it a row of budgets (or, if it is an external format's fact, name it in notCaps with the reason)", path, name)
		}
	})
	for key := range notCaps {
		if !seen[key] {
			t.Errorf("notCaps names %s, which no longer exists; drop it", key)
		}
	}
}

// rowsOf answers the exported constants of a file of this package.
func rowsOf(t *testing.T, file string) []string {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, decl := range f.Decls {
		if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, spec := range g.Specs {
				for _, name := range spec.(*ast.ValueSpec).Names {
					if name.IsExported() {
						rows = append(rows, name.Name)
					}
				}
			}
		}
	}
	sort.Strings(rows)
	return rows
}

// The Budgets section of docs/architecture.md names every row of
// budgets.go and defaults.go in backquotes, so a new cap cannot land
// without a word on who is charged and what they get past it, and names
// no row that is gone.
func TestArchitectureNamesEveryRow(t *testing.T) {
	text, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(text)
	start := strings.Index(s, "\n## Budgets\n")
	if start < 0 {
		t.Fatal(`docs/architecture.md has no "## Budgets" section`)
	}
	section := s[start+1:]
	if end := strings.Index(section[1:], "\n## "); end >= 0 {
		section = section[:end+1]
	}
	rows := map[string]bool{}
	for _, file := range []string{"budgets.go", "defaults.go"} {
		for _, row := range rowsOf(t, file) {
			rows[row] = true
			if !strings.Contains(section, "`"+row+"`") {
				t.Errorf("docs/architecture.md's Budgets section does not name %s (%s)", row, file)
			}
		}
	}
	// A backquoted name that looks like a row (a capital, a small letter,
	// letters; not a test's name) that budgets has not is a row that is
	// gone.
	for _, m := range regexp.MustCompile("`([A-Z][a-z][A-Za-z]*)`").FindAllStringSubmatch(section, -1) {
		name := m[1]
		if !rows[name] && !strings.HasPrefix(name, "Test") && looksLikeRow(name) {
			t.Errorf("docs/architecture.md's Budgets section names %s, which budgets has not", name)
		}
	}
}

// looksLikeRow: a name the row check above holds to budgets (the Budgets
// section names some Go identifiers of other packages, e.g. MaxCalls,
// LimitCalls; those are written with their package or are in this list).
func looksLikeRow(name string) bool {
	switch name {
	case "MaxCalls", "LimitCalls", "Limits", "WithDefaults", "DefaultWorkerMemory":
		return false
	}
	return true
}
