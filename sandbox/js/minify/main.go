//go:build ignore

// Command minify writes gen/runtime.min.js: the runtime's files
// (runtime/*.js and the web API folders' numbered ../webapi/*/NN-*.js,
// joined in the order of their names as the engine joins them) without
// comments and indentation, as the startup snapshot holds them
// (sandbox/snapshot.go says why). esbuild minifies whitespace only: every
// name stays. Run through `go generate ./sandbox`;
// TestMinifiedRuntimeIsCurrent fails when it is out of date.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/evanw/esbuild/pkg/api"
)

func main() {
	files, err := filepath.Glob(filepath.Join("runtime", "*.js"))
	if err != nil {
		panic(err)
	}
	apis, err := filepath.Glob(filepath.Join("..", "webapi", "*", "[0-9][0-9]-*.js"))
	if err != nil {
		panic(err)
	}
	files = append(files, apis...)
	sort.Slice(files, func(i, j int) bool { return filepath.Base(files[i]) < filepath.Base(files[j]) })
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			panic(err)
		}
		b.Write(data)
	}
	res := api.Transform(b.String(), api.TransformOptions{Loader: api.LoaderJS, MinifyWhitespace: true, Target: api.ES2022})
	if len(res.Errors) > 0 {
		fmt.Fprintln(os.Stderr, res.Errors[0].Text)
		os.Exit(1)
	}
	out := filepath.Join("gen", "runtime.min.js")
	if err := os.WriteFile(out, res.Code, 0o644); err != nil {
		panic(err)
	}
	fmt.Printf("%s: %d bytes (from %d)\n", out, len(res.Code), b.Len())
}
