package sandbox

import (
	"strings"

	"github.com/evanw/esbuild/pkg/api"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
)

// TypeScript (docs/runtime.md, "TypeScript"): a program whose Language is
// "typescript", and every module whose name ends in .ts, .mts or .tsx, has
// its types stripped by esbuild when it is compiled, the way the bundler
// reads JavaScript; nothing is type-checked. The bundle's source map points
// at the TypeScript source, so errors and traces name its own lines.

func typeScriptName(name string) bool {
	return strings.HasSuffix(name, ".ts") || strings.HasSuffix(name, ".mts") || strings.HasSuffix(name, ".tsx")
}

// loaderFor is the esbuild loader of a module (path as the resolver
// names it) or of the entry.
func loaderFor(p program.Program, path string) api.Loader {
	if path == entryPath {
		if p.TypeScript() {
			return api.LoaderTS
		}
		return api.LoaderJS
	}
	switch {
	case strings.HasSuffix(path, ".tsx"):
		return api.LoaderTSX
	case strings.HasSuffix(path, ".ts"), strings.HasSuffix(path, ".mts"):
		return api.LoaderTS
	}
	return api.LoaderJS
}

// resolveExtension finds the module an import without an extension means,
// as TypeScript authors write them ("./util" for "util.ts"): the name as
// written first, then with .ts, .tsx, .mts, .js, .mjs added.
func resolveExtension(modules map[string]string, joined string) (string, bool) {
	if _, ok := modules[joined]; ok {
		return joined, true
	}
	for _, ext := range []string{".ts", ".tsx", ".mts", ".js", ".mjs"} {
		if _, ok := modules[joined+ext]; ok {
			return joined + ext, true
		}
	}
	return "", false
}

// entryNameTS is what errors call a TypeScript program's own code.
const entryNameTS = "program.ts"

// nameEntry calls a TypeScript program's code program.ts in a syntax
// error found while bundling.
func nameEntry(p program.Program, f *fault.Fault) *fault.Fault {
	if p.TypeScript() && p.Origin == nil {
		f.Message = strings.ReplaceAll(f.Message, "("+entryName+":", "("+entryNameTS+":")
	}
	return f
}

// nameEntry calls a TypeScript program's code program.ts in the frames
// the runtime tells.
func (w *positions) nameEntry(p program.Program) {
	if !p.TypeScript() || p.Origin != nil {
		return
	}
	for i, s := range w.sources {
		if s == entryName {
			w.sources[i] = entryNameTS
		}
	}
}
