package sandbox

import (
	"bytes"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
	"unicode"

	"github.com/evanw/esbuild/pkg/api"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
)

// entryName is the file name programs report in stack traces and errors. It
// names nothing on the host.
const entryName = "program.js"

// compiled is a program turned into one classic script whose completion value
// is the program's function (or module default export).
type compiled struct {
	source string
	// module is true for the Workers form: the default export is the result
	// itself, not a function to call.
	module bool
	// where maps source positions to the author's (sourcemap.go).
	where positions
}

// compile checks a program and produces the script an isolate runs. A program
// without imports or exports is wrapped directly (no bundler on the hot path);
// anything else is bundled with esbuild against the in-memory modules map.
func compile(p program.Program) (compiled, error) {
	if strings.TrimSpace(p.Code) == "" {
		return compiled{}, fault.New(fault.BadRequest, "code is empty.")
	}
	if strings.IndexByte(p.Code, 0) >= 0 {
		return compiled{}, fault.New(fault.BadRequest, "code contains a NUL byte.")
	}
	for name, src := range p.Modules {
		if strings.IndexByte(src, 0) >= 0 || strings.IndexByte(name, 0) >= 0 {
			return compiled{}, fault.New(fault.BadRequest, "module %q contains a NUL byte.", strings.ReplaceAll(name, "\x00", ""))
		}
	}
	imports, rest := splitImports(p.Code)
	if imports == "" && len(p.Modules) == 0 && !strings.Contains(rest, "export") && !p.TypeScript() {
		// The fast path: V8 itself reports syntax errors with line and column.
		// "(" and the code share the first line, so line numbers are the user's.
		return compiled{source: "(" + p.Code + "\n)", where: positions{origin: p.Origin, firstColumn: 1}}, nil
	}
	return bundle(p, imports, rest)
}

// splitImports separates the leading ES import declarations of code from the
// expression that follows them. It understands comments and string literals,
// which is all an import declaration can contain.
func splitImports(code string) (imports, rest string) {
	i := 0
	end := 0
	for {
		i = skipSpaceAndComments(code, i)
		if !strings.HasPrefix(code[i:], "import") {
			break
		}
		j := i + len("import")
		if j < len(code) {
			c := rune(code[j])
			// import( and import.meta are expressions, not declarations.
			if c == '(' || c == '.' || c == '_' || c == '$' || unicode.IsLetter(c) || unicode.IsDigit(c) {
				break
			}
		}
		k, ok := scanImportDeclaration(code, j)
		if !ok {
			break
		}
		i, end = k, k
	}
	return code[:end], code[end:]
}

func skipSpaceAndComments(s string, i int) int {
	for i < len(s) {
		switch {
		case s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r':
			i++
		case strings.HasPrefix(s[i:], "//"):
			nl := strings.IndexByte(s[i:], '\n')
			if nl < 0 {
				return len(s)
			}
			i += nl + 1
		case strings.HasPrefix(s[i:], "/*"):
			e := strings.Index(s[i+2:], "*/")
			if e < 0 {
				return len(s)
			}
			i += 2 + e + 2
		default:
			return i
		}
	}
	return i
}

// scanImportDeclaration reads from just after the `import` keyword to the end
// of the declaration: the module specifier string (after `from`, or directly
// after `import`), optional import attributes, and an optional semicolon.
func scanImportDeclaration(s string, i int) (int, bool) {
	expectSpecifier := true // `import "x"` has the specifier first
	for i < len(s) {
		i = skipSpaceAndComments(s, i)
		if i >= len(s) {
			return 0, false
		}
		c := s[i]
		if c == '"' || c == '\'' {
			j, ok := skipString(s, i)
			if !ok {
				return 0, false
			}
			i = j
			if expectSpecifier {
				// Optional `with { ... }` / `assert { ... }` attributes.
				k := skipSpaceAndComments(s, i)
				for _, kw := range []string{"with", "assert"} {
					if strings.HasPrefix(s[k:], kw) {
						if b := strings.IndexByte(s[k:], '}'); b >= 0 {
							i = k + b + 1
						}
					}
				}
				k = skipSpaceAndComments(s, i)
				if k < len(s) && s[k] == ';' {
					return k + 1, true
				}
				return i, true
			}
			continue
		}
		if strings.HasPrefix(s[i:], "from") && (i+4 >= len(s) || !isIdent(s[i+4])) {
			expectSpecifier = true
			i += 4
			continue
		}
		expectSpecifier = false
		i++
	}
	return 0, false
}

func isIdent(c byte) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func skipString(s string, i int) (int, bool) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case q:
			return j + 1, true
		case '\n':
			return 0, false
		}
	}
	return 0, false
}

// exportWord finds the export keyword's spelling; it only chooses which
// parse error to report, never the program's form.
var exportWord = regexp.MustCompile(`\bexport\b`)

const (
	entryPath     = "/" + entryName
	resolverSpace = "retainer"
	bundleGlobal  = "__retainer_program"
)

// bundle resolves imports with esbuild against the modules map. The form
// is decided by parsing (docs/runtime.md): the expression form
// (`export default (<expression>)`) when it parses, else the code as a
// module as written (the Workers form), whatever the shape of its lines.
//
// Code that opens with a statement no expression can begin with (`export
// default …`, `let n = 0; …`: statementFirst) is built as a module at once:
// its expression form cannot parse, and building it first was a second
// esbuild run in every Workers-form deploy, a new tenant's first one
// included (docs/decisions.md, "A module program is bundled once"). The
// outcome is the same as trying both in turn: the expression form's
// error is still the one reported for code without `export`.
func bundle(p program.Program, imports, rest string) (compiled, error) {
	expression := imports + "export default (" + rest + "\n);"
	var exprErr error
	if !statementFirst(rest) {
		out, err := build(p, expression, false)
		if err == nil {
			return out, nil
		}
		exprErr = err
	}
	out, moduleErr := build(p, p.Code, true)
	if moduleErr == nil {
		return out, nil
	}
	if exportWord.MatchString(rest) {
		return compiled{}, moduleErr
	}
	if exprErr != nil {
		return compiled{}, exprErr
	}
	// Only for the error: statementFirst says this does not parse, and
	// if it did, its program is what trying it first would have run.
	return build(p, expression, false)
}

// statementWords are the words that never begin an expression: reserved
// words that open a declaration or a statement. `let` is an identifier
// in sloppy code, so it counts only before a binding's name (statementFirst).
var statementWords = map[string]bool{
	"export": true, "const": true, "var": true, "if": true, "for": true, "while": true,
	"do": true, "switch": true, "try": true, "throw": true, "return": true, "break": true,
	"continue": true, "debugger": true,
}

// statementFirst says code (what follows its imports) opens with a word
// no expression can begin with, so its expression form cannot parse.
func statementFirst(code string) bool {
	i := skipSpaceAndComments(code, 0)
	word := leadingWord(code[i:])
	if statementWords[word] {
		return true
	}
	if word != "let" {
		return false
	}
	// `let x`, but not `let in o` or `let instanceof C` (an identifier
	// named let, in sloppy code).
	j := skipSpaceAndComments(code, i+len(word))
	next := leadingWord(code[j:])
	return next != "" && next != "in" && next != "instanceof" && !(next[0] >= '0' && next[0] <= '9')
}

// leadingWord is the identifier that s opens with, if it is all ASCII;
// else (a non-ASCII letter or an escape goes on) "".
func leadingWord(s string) string {
	n := 0
	for n < len(s) && isIdent(s[n]) {
		n++
	}
	if n < len(s) && (s[n] >= 0x80 || s[n] == '\\') {
		return ""
	}
	return s[:n]
}

func build(p program.Program, entry string, module bool) (compiled, error) {
	bundled.Store(true)
	modules := make(map[string]string, len(p.Modules))
	for name, src := range p.Modules {
		modules[path.Join("/", name)] = src
	}
	plugin := api.Plugin{
		Name: "retainer-modules",
		Setup: func(b api.PluginBuild) {
			b.OnResolve(api.OnResolveOptions{Filter: ".*"}, func(a api.OnResolveArgs) (api.OnResolveResult, error) {
				if a.Kind == api.ResolveEntryPoint {
					return api.OnResolveResult{Path: entryPath, Namespace: resolverSpace}, nil
				}
				spec := a.Path
				if !strings.HasPrefix(spec, "./") && !strings.HasPrefix(spec, "../") && !strings.HasPrefix(spec, "/") {
					return api.OnResolveResult{}, fmt.Errorf("cannot import %q: only relative specifiers that name a module of the request are allowed", spec)
				}
				dir := path.Dir(a.Importer)
				if dir == "" || dir == "." {
					dir = "/"
				}
				joined := path.Join(dir, spec)
				if strings.HasPrefix(spec, "/") {
					joined = path.Clean(spec)
				}
				if escapes(dir, spec) {
					return api.OnResolveResult{}, fmt.Errorf("cannot import %q: it leads outside the modules map", spec)
				}
				joined, ok := resolveExtension(modules, joined)
				if !ok {
					return api.OnResolveResult{}, fmt.Errorf("cannot import %q: no such module in the request's modules (have: %s)", spec, moduleList(modules))
				}
				return api.OnResolveResult{Path: joined, Namespace: resolverSpace}, nil
			})
			b.OnLoad(api.OnLoadOptions{Filter: ".*", Namespace: resolverSpace}, func(a api.OnLoadArgs) (api.OnLoadResult, error) {
				src := entry
				if a.Path != entryPath {
					src = modules[a.Path]
				}
				return api.OnLoadResult{Contents: &src, Loader: loaderFor(p, a.Path), ResolveDir: "/"}, nil
			})
		},
	}
	res := api.Build(api.BuildOptions{
		EntryPoints:       []string{entryPath},
		Outfile:           entryPath,
		Sourcemap:         api.SourceMapExternal,
		SourcesContent:    api.SourcesContentExclude,
		Bundle:            true,
		Write:             false,
		Format:            api.FormatIIFE,
		GlobalName:        bundleGlobal,
		Target:            api.ES2022,
		Platform:          api.PlatformNeutral,
		Plugins:           []api.Plugin{plugin},
		LogLevel:          api.LogLevelSilent,
		Charset:           api.CharsetUTF8,
		LegalComments:     api.LegalCommentsNone,
		MinifyWhitespace:  false,
		MinifyIdentifiers: false,
	})
	if len(res.Errors) > 0 {
		return compiled{}, nameEntry(p, syntaxFault(res.Errors[0], p.Origin))
	}
	var script, sourceMap []byte
	for _, f := range res.OutputFiles {
		if strings.HasSuffix(f.Path, ".map") {
			sourceMap = f.Contents
		} else {
			script = f.Contents
		}
	}
	if script == nil {
		return compiled{}, fault.New(fault.Syntax, "the program did not bundle into one script")
	}
	// The IIFE declares a var; wrapping it in a function keeps it off the
	// global object and makes the namespace the script's completion value.
	script = bytes.TrimSuffix(bytes.TrimRight(script, "\n"), []byte("//# sourceMappingURL=program.js.map"))
	src := "(() => {\n" + string(script) + "\nconst m = " + bundleGlobal + ";\nreturn m && m.default;\n})()"
	where := positions{origin: p.Origin, lineShift: 1}
	where.readSourceMap(sourceMap)
	where.nameEntry(p)
	return compiled{source: src, module: module, where: where}, nil
}

func escapes(dir, spec string) bool {
	if strings.HasPrefix(spec, "/") {
		return strings.HasPrefix(path.Clean(spec), "/..")
	}
	depth := strings.Count(strings.Trim(dir, "/"), "/")
	if strings.Trim(dir, "/") != "" {
		depth++
	}
	for _, part := range strings.Split(spec, "/") {
		switch part {
		case "..":
			depth--
			if depth < 0 {
				return true
			}
		case ".", "":
		default:
			depth++
		}
	}
	return false
}

func moduleList(m map[string]string) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, "."+n)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func syntaxFault(m api.Message, origin *program.Origin) *fault.Fault {
	where := ""
	if m.Location != nil {
		file, line := moduleName(m.Location.File), m.Location.Line
		if file == entryName && origin != nil && line >= origin.Line {
			file, line = origin.File, line-origin.Line+1
		}
		where = fmt.Sprintf(" (%s:%d:%d)", file, line, m.Location.Column+1)
	}
	if m.PluginName != "" || strings.Contains(m.Text, "cannot import") {
		return fault.New(fault.Syntax, "%s%s", m.Text, where)
	}
	return fault.New(fault.Syntax, "SyntaxError: %s%s", m.Text, where)
}
