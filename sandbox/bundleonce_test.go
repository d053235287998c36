package sandbox

import (
	"testing"

	"github.com/retainer-gw/retainer/program"
)

// bundleBothForms is bundle as it was before statementFirst: the
// expression form tried first, then the module form, for every program.
func bundleBothForms(p program.Program, imports, rest string) (compiled, error) {
	out, exprErr := build(p, imports+"export default ("+rest+"\n);", false)
	if exprErr == nil {
		return out, nil
	}
	out, moduleErr := build(p, p.Code, true)
	if moduleErr == nil {
		return out, nil
	}
	if exportWord.MatchString(rest) {
		return compiled{}, moduleErr
	}
	return compiled{}, exprErr
}

// bundleOnceCorpus is code that reaches the bundler: the Workers form,
// declarations before it, statements, and what only looks like them (an
// identifier named let, a class or function expression, non-ASCII and
// escaped identifiers that begin with a reserved word), valid or not.
var bundleOnceCorpus = []string{
	"export default { fetch() { return new Response('ok') } }",
	"let served = 0; export default { fetch() { return Response.json({served: ++served}) } }",
	"// a comment\n/* and another */\nlet served = 0;\nexport default { fetch() { return new Response(String(++served)) } }",
	"const greeting = 'hej';\nexport default { fetch() { return new Response(greeting) } }",
	"var n = 1; export default { fetch() { return new Response(String(n)) } }",
	"if (true) {}\nexport default { fetch() { return new Response('if') } }",
	"for (;;) { break }\nexport default { fetch() { return new Response('for') } }",
	"try { 1 } catch {}\nexport default { fetch() { return new Response('try') } }",
	"throw new Error('at load'); export default {}",
	"return 1; export default {}",
	"export default {",
	"let = 1; export default {}",
	"let x = ; export default {}",
	"let\nx = 1\nexport default { fetch() { return new Response(String(x)) } }",
	"let in o",
	"let instanceof Object",
	"let [a] = [1]; export default { fetch() { return new Response(String(a)) } }",
	"let[0]",
	"let 1",
	"let",
	"constÄ + 1",
	"const\\u0041 + 1",
	"letter = 1; export default {}",
	"exports",
	"function f() { return 1 }",
	"class A {}",
	"async () => 1",
	"(() => 2)",
	"export",
	"if (",
	"const x = 1;",
	"let x = 1;",
	"var y",
}

// A module program is bundled once (docs/decisions.md, "A module program
// is bundled once"): every outcome, the compiled script and the form, or
// the error and its message, is the one of trying the expression form
// first; and wherever statementFirst skips the expression form, that form
// does not parse.
func TestBundleOnceAnswersAsBothForms(t *testing.T) {
	var codes []string
	for _, c := range bundleOnceCorpus {
		codes = append(codes, c, "import {x} from './x.js';\n"+c)
	}
	modules := map[string]string{"x.js": "export const x = 1;"}
	skipped := 0
	for _, code := range codes {
		p := program.Program{Code: code, Modules: modules}
		imports, rest := splitImports(code)
		if statementFirst(rest) {
			skipped++
			if _, err := build(p, imports+"export default ("+rest+"\n);", false); err == nil {
				t.Errorf("statementFirst(%q), but its expression form parses", rest)
			}
		}
		got, gotErr := bundle(p, imports, rest)
		want, wantErr := bundleBothForms(p, imports, rest)
		if errText(gotErr) != errText(wantErr) {
			t.Errorf("%q: error %q, want %q", code, errText(gotErr), errText(wantErr))
			continue
		}
		if got.source != want.source || got.module != want.module {
			t.Errorf("%q: compiled (module %v) %q, want (module %v) %q", code, got.module, got.source, want.module, want.source)
		}
	}
	if skipped < len(codes)/3 {
		t.Errorf("statementFirst skipped the expression form for %d of %d programs", skipped, len(codes))
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
