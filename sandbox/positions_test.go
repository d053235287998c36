package sandbox

import (
	"context"
	"strings"
	"testing"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
)

// Errors name the author's own file and line, and no runtime frame
// (docs/runtime.md, "Errors").
func TestErrorPositions(t *testing.T) {
	body := &program.Origin{File: "body", Line: 2}
	m := map[string]string{"m.js": "export function f() {\n  return undefinedVar;\n}\n"}
	for _, c := range []struct {
		name    string
		program program.Program
		code    fault.Code
		want    string
		not     string
	}{
		{"expression", program.Program{Code: "async () => {\n  const a = 1;\n  null.x;\n}"}, fault.Runtime, "program.js:3:8", ""},
		{"expression line 1", program.Program{Code: "async () => null.x"}, fault.Runtime, "program.js:1:18", ""},
		{"body", program.Program{Code: "async () => {\nconst a = 1;\nnull.x;\n}", Origin: body}, fault.Runtime, "at body:2:6", "program.js"},
		{"body syntax", program.Program{Code: "async () => {\nconst a = 1;\nconst = 2;\n}", Origin: body}, fault.Syntax, "(body:2:", "program.js"},
		{"body with imports' word", program.Program{Code: "async () => {\nconst s = 'export';\nnull.x;\n}", Origin: body}, fault.Runtime, "body:2:6", "program.js"},
		{"body syntax, bundled", program.Program{Code: "async () => {\nconst s = 'export';\nconst = 2;\n}", Origin: body}, fault.Syntax, "(body:2:", "program.js"},
		{"module", program.Program{Code: "import { f } from './m.js';\nasync () => f()", Modules: m}, fault.Runtime, "at f (./m.js:2:3)", ""},
		{"module entry", program.Program{Code: "import { f } from './m.js';\nasync () => {\n  f;\n  null.x;\n}", Modules: m}, fault.Runtime, "program.js:4:", ""},
		{"module syntax", program.Program{Code: "import { x } from './s.js';\nasync () => x", Modules: map[string]string{"s.js": "export const y = 1;\nexport const x = ;\n"}}, fault.Syntax, "(./s.js:2:", ""},
		{"workers module", program.Program{Code: "import { f } from './m.js';\nexport default { fetch: f };\nnull.x;", Modules: m}, fault.Runtime, "program.js:3:", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := engine(t).Run(context.Background(), program.Job{Program: c.program})
			if fault.CodeOf(err) != c.code {
				t.Fatalf("want %s, got %v", c.code, err)
			}
			msg := fault.As(err).Message
			if !strings.Contains(msg, c.want) || strings.Contains(msg, "runtime") || c.not != "" && strings.Contains(msg, c.not) {
				t.Fatalf("the error %q does not point at %q (or shows the runtime)", msg, c.want)
			}
		})
	}
	// A caught error's stack and a logged error name no runtime frame
	// either; the stack still holds the author's frames and async ones.
	out := mustRun(t, `async () => {
		async function inner() { await null; throw new TypeError('deep') }
		try { await inner() } catch (e) { console.log(e); return e.stack }
	}`)
	stack := string(out.Result)
	if !strings.Contains(stack, "TypeError: deep") || !strings.Contains(stack, "at inner (program.js:2:") || strings.Contains(stack, "runtime") ||
		len(out.Logs) != 1 || strings.Contains(out.Logs[0], "runtime") || !strings.Contains(out.Logs[0], "program.js:2:") {
		t.Fatalf("stack %s; logs %q", stack, out.Logs)
	}
	// A program's own prepareStackTrace still works (libraries use it to
	// read call sites).
	out = mustRun(t, `async () => {
		const keep = Error.prepareStackTrace;
		Error.prepareStackTrace = (_, sites) => sites.map(s => s.getLineNumber());
		const lines = new Error('x').stack;
		Error.prepareStackTrace = keep;
		return [typeof keep, lines[0]];
	}`)
	if string(out.Result) != `["function",4]` {
		t.Fatalf("a program's prepareStackTrace: %s", out.Result)
	}
}
