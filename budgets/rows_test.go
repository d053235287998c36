package budgets

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A cap has one name, its row here: a max* constant elsewhere that only
// renames a row (`maxOpen = budgets.SQLOpen`) is a second place to look
// for it and to change it, and is refused (docs/architecture.md,
// "Budgets").
func TestNoCapIsARowUnderAnotherName(t *testing.T) {
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
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				v := spec.(*ast.ValueSpec)
				for i, name := range v.Names {
					if i >= len(v.Values) || !strings.HasPrefix(strings.ToLower(name.Name), "max") {
						continue
					}
					if sel, ok := v.Values[i].(*ast.SelectorExpr); ok {
						if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "budgets" {
							t.Errorf("%s: %s is budgets.%s under another name; use the row", path, name.Name, sel.Sel.Name)
						}
					}
				}
			}
		}
		return nil
	})
}
