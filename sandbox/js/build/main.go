//go:build ignore

// Command build bundles the npm parts of the runtime into gen/ with
// esbuild's Go API. Run through `go generate ./sandbox` after `npm ci` in
// sandbox/js; the output is committed so `go build` needs no npm.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/evanw/esbuild/pkg/api"
)

// prelude runs inside each bundle's function scope, before its modules:
// webidl-conversions reads SharedArrayBuffer's getters at load time, and
// the runtime removes SharedArrayBuffer (docs/runtime.md); a local stand-in that
// nothing can be an instance of keeps the checks working.
//
// A module is loaded on a program's first touch of one of its globals,
// after the program ran, and a property descriptor's fields are read as
// properties, inherited ones too: a program that put get, set or value on
// Object.prototype turned the modules' descriptors into others, or errors
// ("Getter must be a function"). The modules' defineProperty,
// defineProperties and Reflect.defineProperty are the runtime's own, which
// read a descriptor's own fields only: each factory is given them
// (__retainer_own, 00-prelude.js's ownDefiners), and ownDescriptors below
// sends the modules' calls there.
const prelude = `const SharedArrayBuffer = class SharedArrayBuffer { get byteLength() { return 0; } get growable() { return false; } };
const { defineProperty: __retainerDefineProperty, defineProperties: __retainerDefineProperties, reflectDefineProperty: __retainerReflectDefineProperty } = __retainer_own;
`

// helperDefineProperty is esbuild's capture of Object.defineProperty for
// its helpers, as it minifies it.
var helperDefineProperty = regexp.MustCompile(`(var \w+=)Object\.defineProperty;`)

// ownDescriptors sends the modules' property definitions through the
// prelude's stand-ins.
var ownDescriptors = map[string]string{
	"Object.defineProperty":   "__retainerDefineProperty",
	"Object.defineProperties": "__retainerDefineProperties",
	"Reflect.defineProperty":  "__retainerReflectDefineProperty",
}

// utf8Only drops whatwg-url's side-effect import of the legacy multi-byte
// encodings (~400 KB of tables): a URL in an isolate is always parsed with
// UTF-8, the only encoding of the Encoding Standard's API here.
var utf8Only = api.Plugin{
	Name: "utf8-only",
	Setup: func(b api.PluginBuild) {
		b.OnResolve(api.OnResolveOptions{Filter: `^@exodus/bytes/encoding\.js$`}, func(api.OnResolveArgs) (api.OnResolveResult, error) {
			return api.OnResolveResult{Path: "legacy-encodings", Namespace: "empty"}, nil
		})
		b.OnLoad(api.OnLoadOptions{Filter: ".*", Namespace: "empty"}, func(api.OnLoadArgs) (api.OnLoadResult, error) {
			empty := ""
			return api.OnLoadResult{Contents: &empty}, nil
		})
	},
}

// lazyTR46 puts tr46-lazy.js in place of tr46 in the url module (the real
// tr46 is the tr46 module, loaded on first need), and percent-utf8.js in
// place of @exodus/bytes/whatwg.js (see those files).
var lazyTR46 = api.Plugin{
	Name: "lazy-tr46",
	Setup: func(b api.PluginBuild) {
		abs := func(p string) string { a, _ := filepath.Abs(p); return a }
		b.OnResolve(api.OnResolveOptions{Filter: `^tr46$`}, func(api.OnResolveArgs) (api.OnResolveResult, error) {
			return api.OnResolveResult{Path: abs("../webapi/url/tr46-lazy.js")}, nil
		})
		b.OnResolve(api.OnResolveOptions{Filter: `^@exodus/bytes/whatwg\.js$`}, func(api.OnResolveArgs) (api.OnResolveResult, error) {
			return api.OnResolveResult{Path: abs("../webapi/url/percent-utf8.js")}, nil
		})
	},
}

// urlFastPath appends url-fast.js to whatwg-url's url-state-machine module
// and urlencoded-fast.js to its urlencoded module (see those files).
var urlFastPath = api.Plugin{
	Name: "url-fast-path",
	Setup: func(b api.PluginBuild) {
		for module, fastFile := range map[string]string{"url-state-machine": "../webapi/url/url-fast.js", "urlencoded": "../webapi/url/urlencoded-fast.js"} {
			b.OnLoad(api.OnLoadOptions{Filter: `whatwg-url/lib/` + module + `\.js$`}, func(a api.OnLoadArgs) (api.OnLoadResult, error) {
				orig, err := os.ReadFile(a.Path)
				if err != nil {
					return api.OnLoadResult{}, err
				}
				fast, err := os.ReadFile(fastFile)
				if err != nil {
					return api.OnLoadResult{}, err
				}
				src := string(orig) + "\n" + string(fast)
				return api.OnLoadResult{Contents: &src, Loader: api.LoaderJS}, nil
			})
		}
	},
}

func main() {
	// Each module's sources are in its web API's folder; the npm packages
	// they import are here (node_modules, package.json).
	entries := map[string]string{
		"url":     "../webapi/url/url-entry.js",
		"streams": "../webapi/streams/streams-entry.js",
		"tr46":    "../webapi/url/tr46-entry.js",
	}
	nodeModules, _ := filepath.Abs("node_modules")
	for _, name := range []string{"url", "streams", "tr46"} {
		plugins := []api.Plugin{utf8Only, lazyTR46, urlFastPath}
		if name == "tr46" {
			plugins = nil
		}
		res := api.Build(api.BuildOptions{
			EntryPoints:       []string{entries[name]},
			NodePaths:         []string{nodeModules},
			Bundle:            true,
			Format:            api.FormatIIFE,
			GlobalName:        "__retainer_module",
			Target:            api.ES2022,
			Platform:          api.PlatformNeutral,
			MainFields:        []string{"module", "main"},
			MinifySyntax:      true,
			MinifyWhitespace:  true,
			MinifyIdentifiers: true,
			KeepNames:         true,
			LegalComments:     api.LegalCommentsEndOfFile,
			Charset:           api.CharsetUTF8,
			Write:             false,
			Plugins:           plugins,
			Define:            ownDescriptors,
		})
		if len(res.Errors) > 0 {
			for _, e := range res.Errors {
				fmt.Fprintln(os.Stderr, e.Text, e.Location)
			}
			os.Exit(1)
		}
		// esbuild's own helpers (__defProp, which __toESM's property
		// copies use with literal descriptors) escape Define: they take
		// the stand-in here.
		body := helperDefineProperty.ReplaceAllString(string(res.OutputFiles[0].Contents), "${1}__retainerDefineProperty;")
		body, err := ownKeysExports(body)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			os.Exit(1)
		}
		// A module is a factory the runtime calls with its loader
		// (__retainer_load, for the modules it loads on first need) and
		// its definers (__retainer_own).
		src := "(function (__retainer_load, __retainer_own) {\n" + prelude + body + "\nreturn __retainer_module;\n})"
		out := filepath.Join("gen", name+".js")
		if err := os.WriteFile(out, []byte("// Code generated by sandbox/js/build; DO NOT EDIT.\n"+src), 0o644); err != nil {
			panic(err)
		}
		fmt.Printf("%s: %d bytes\n", out, len(src))
	}
}

// exportHelper is esbuild's __export helper as it minifies it:
// (target, all) => { for (var name in all) defineProperty(target, name,
// { get: all[name], enumerable: true }) }. A module is loaded when a program
// first touches one of its globals, after the program has run, and for...in
// also walks what the program added to Object.prototype: a program that
// did (Object.prototype.x = 1, as some libraries do) then got "Getter must
// be a function" from URL, URLSearchParams, Request and the streams. The
// helper is rewritten to walk the exports' own keys, with a descriptor that
// inherits nothing.
var exportHelper = regexp.MustCompile(`\((\w+),(\w+)\)=>\{for\(var (\w+) in (\w+)\)(\w+)\((\w+),(\w+),\{get:(\w+)\[(\w+)\],enumerable:!0\}\)\}`)

// ownKeysExports rewrites esbuild's __export helper in a bundle (at most
// one; one whose shape is not the helper's is left alone and reported).
func ownKeysExports(src string) (string, error) {
	n, bad := 0, 0
	out := exportHelper.ReplaceAllStringFunc(src, func(m string) string {
		g := exportHelper.FindStringSubmatch(m)
		target, all, key, def := g[1], g[2], g[3], g[5]
		if g[4] != all || g[6] != target || g[7] != key || g[8] != all || g[9] != key {
			bad++
			return m
		}
		n++
		return fmt.Sprintf("(%s,%s)=>{for(var %s of Object.keys(%s))%s(%s,%s,{__proto__:null,get:%s[%s],enumerable:!0})}", target, all, key, all, def, target, key, all, key)
	})
	if n > 1 || bad > 0 {
		return "", fmt.Errorf("esbuild's __export helper: %d rewritten, %d of another shape", n, bad)
	}
	return out, nil
}
