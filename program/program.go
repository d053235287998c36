package program

// Program is what a tenant sends: an expression that evaluates to a function
// (optionally preceded by import declarations), or a Workers-style ES module
// whose default export is the result, plus the modules it may import.
type Program struct {
	Code    string            `json:"code"`
	Modules map[string]string `json:"modules,omitempty"`
	// Origin, when Code wraps text of the author's (a /run body, a chain
	// step), says where that text starts, so that errors count its lines
	// from its own first line (docs/runtime.md, "Errors").
	Origin *Origin `json:"origin,omitempty"`
	// Language is "typescript" for a TypeScript program (sandbox/typescript.go);
	// empty (or "javascript") for JavaScript.
	Language string `json:"language,omitempty"`
}

// Origin names the author's text inside a program's code.
type Origin struct {
	// File is the name traces give the text: "body", `step "sum"`, "spawn".
	File string `json:"file"`
	// Line is the line of Code that is the text's first.
	Line int `json:"line"`
}

// LanguageTypeScript is Program.Language for a TypeScript program.
const LanguageTypeScript = "typescript"

// TypeScript reports whether the program's own code is TypeScript.
func (p Program) TypeScript() bool { return p.Language == LanguageTypeScript }
