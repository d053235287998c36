package sandbox

import (
	"context"
	"strings"
	"testing"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
)

// TypeScript runs with its types stripped, and errors name its own lines
// (typescript.go).
func TestTypeScript(t *testing.T) {
	ts := func(code string, modules map[string]string) program.Program {
		return program.Program{Code: code, Modules: modules, Language: program.LanguageTypeScript}
	}
	bad := map[string]string{"bad.ts": "interface Shape {\n  sides: number;\n}\n\nexport function boom(s: Shape): number { throw new Error('bad shape ' + s.sides) }\n"}
	for _, c := range []struct {
		name    string
		program program.Program
		want    string
	}{
		{"expression", ts("async (): Promise<number> => {\n  const xs: number[] = [1, 2, 3];\n  return xs.reduce((a: number, b: number) => a + b, 0);\n}", nil), "6"},
		{"declarations", ts("async () => {\n  type N = number;\n  const double = (n: N): N => n * 2;\n  enum Color { Red, Green }\n  return double(21) + Color.Green;\n}", nil), "43"},
		{"module", program.Program{Code: "import { area } from './geo.ts';\nasync () => area({ w: 2, h: 3 })", Modules: map[string]string{
			"geo.ts": "export interface Rect { w: number; h: number }\nexport function area(r: Rect): number { return r.w * r.h }\n"}}, "6"},
		{"module without extension", ts("import { area } from './geo';\nasync () => area(4 as number)", map[string]string{"geo.mts": "export const area = (n: number): number => n * n;\n"}), "16"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := engine(t).Run(context.Background(), program.Job{Program: c.program})
			if err != nil || string(out.Result) != c.want {
				t.Fatalf("got %s %v, want %s", out.Result, err, c.want)
			}
		})
	}
	for _, c := range []struct {
		name    string
		program program.Program
		code    fault.Code
		want    string
	}{
		{"a thrown error in a .ts module", ts("import { boom } from './bad.ts';\nasync () => boom({ sides: 3 })", bad), fault.Runtime, "bad.ts:5:"},
		{"a thrown error in the program", ts("async (): Promise<void> => {\n  const s: string = 'x';\n\n\n  null!.x;\n}", nil), fault.Runtime, "program.ts:5:"},
		{"a syntax error", ts("async () => {\n  const x: number = ;\n}", nil), fault.Syntax, "(program.ts:2:"},
		{"JavaScript is not TypeScript", program.Program{Code: "async (): number => 1"}, fault.Syntax, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := engine(t).Run(context.Background(), program.Job{Program: c.program})
			if fault.CodeOf(err) != c.code || !strings.Contains(fault.As(err).Message, c.want) {
				t.Fatalf("want %s naming %q, got %v", c.code, c.want, err)
			}
		})
	}
}
