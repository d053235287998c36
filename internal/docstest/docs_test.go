package docstest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docs are the documents that describe the code as it is (the
// performance journal describes it as it was).
var docs = []string{"README.md", "docs/architecture.md", "docs/cluster.md", "docs/performance.md", "bench/README.md"}

// fileName is a file a document names in backquotes: a path from the
// repository's root, or a bare name that some folder holds.
var fileName = regexp.MustCompile("`([A-Za-z0-9_./-]+\\.(?:go|cc|h|js|sh|md|py|json))`")

func TestDocsNameFilesThatExist(t *testing.T) {
	root := "../.."
	names := map[string]bool{}
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		names[d.Name()] = true
		return nil
	})
	for _, doc := range docs {
		text, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fileName.FindAllStringSubmatch(string(text), -1) {
			name := m[1]
			if strings.Contains(name, "/") {
				if _, err := os.Stat(filepath.Join(root, name)); err != nil {
					t.Errorf("%s names %s, which does not exist", doc, name)
				}
			} else if !names[name] {
				t.Errorf("%s names %s, which no folder holds", doc, name)
			}
		}
	}
}

// TestArchitectureNamesEveryPackage: docs/architecture.md names every
// folder of Go code (outside third_party), so its picture of the packages
// is the tree's, one to one.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	root := "../.."
	text, err := os.ReadFile(filepath.Join(root, "docs/architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", ".git", "third_party", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || filepath.Dir(path) == root {
			return nil
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		dir = filepath.ToSlash(dir)
		if !strings.Contains(string(text), "`"+dir+"`") {
			t.Errorf("docs/architecture.md does not name the package folder `%s`", dir)
		}
		return nil
	})
}

// TestNoContractSectionReferences: the project's docs and code comments
// cite the project's own docs, never the contract's section numbers,
// which move between its revisions.
func TestNoContractSectionReferences(t *testing.T) {
	root := "../.."
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git" || d.Name() == "third_party" || d.Name() == "dist") {
			return filepath.SkipDir
		}
		if ext := filepath.Ext(path); ext != ".md" && ext != ".go" && ext != ".ts" && ext != ".js" {
			return nil
		}
		text, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(text), "SPEC "+"§") {
			t.Errorf("%s cites the contract's sections (SPEC "+"§); cite the project's docs", path)
		}
		return nil
	})
}
