package sandbox

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/retainer-gw/retainer/program"
)

// Errors point at the author's own text (docs/runtime.md, "Errors"). A
// program runs as one script named program.js, which is not always what
// the author wrote: a /run body or a chain step is wrapped in a function
// (Program.Origin says where the author's text starts), and a program with
// modules is bundled by esbuild (its source map says which module and line
// each part came from). positions carries both to the runtime, whose
// Error.prepareStackTrace tells each program.js frame in the author's terms
// and leaves the runtime's own frames out; syntax errors V8 finds before
// anything runs are told the same way here.

// positions maps a position in the compiled script to the author's.
type positions struct {
	origin *program.Origin
	// lineShift is the lines the compiled script adds before the bundle's
	// first (1: the "(() => {" line around it).
	lineShift int
	// firstColumn is what the compiled script adds to the columns of its
	// first line (1: the fast path's "(").
	firstColumn int
	// sources and mappings are the bundle's source map (version 3); nil on
	// the fast path.
	sources  []string
	mappings string
}

// readSourceMap takes esbuild's source map of the bundle.
func (p *positions) readSourceMap(data []byte) {
	var sm struct {
		Sources  []string `json:"sources"`
		Mappings string   `json:"mappings"`
	}
	if json.Unmarshal(data, &sm) != nil || len(sm.Sources) == 0 {
		return
	}
	p.sources = make([]string, len(sm.Sources))
	for i, s := range sm.Sources {
		p.sources[i] = moduleName(s)
	}
	p.mappings = sm.Mappings
}

// moduleName is how errors name a bundled file: program.js for the entry,
// "./m.js" for the module the request named "m.js".
func moduleName(file string) string {
	f := strings.TrimPrefix(file, resolverSpace+":")
	if f == entryPath || f == "" {
		return entryName
	}
	if strings.HasPrefix(f, "/") {
		return "." + f
	}
	return f
}

// runtimeJSON is what the runtime's setSource takes, or "" when the
// runtime's default (the fast path, no origin) holds.
func (p positions) runtimeJSON() string {
	if p.origin == nil && p.sources == nil {
		return ""
	}
	v := struct {
		File     string   `json:"file,omitempty"`
		Line     int      `json:"line,omitempty"`
		Shift    int      `json:"shift"`
		Col1     int      `json:"col1"`
		Sources  []string `json:"sources,omitempty"`
		Mappings string   `json:"mappings,omitempty"`
	}{Shift: p.lineShift, Col1: p.firstColumn, Sources: p.sources, Mappings: p.mappings}
	if p.origin != nil {
		v.File, v.Line = p.origin.File, p.origin.Line
	}
	data, _ := json.Marshal(v)
	return string(data)
}

// location tells "program.js:L:C" of the fast path in the author's terms
// (bundles' syntax errors come from esbuild, already in them).
func (p positions) location(loc string) string {
	rest, ok := strings.CutPrefix(loc, entryName+":")
	if !ok || p.sources != nil {
		return loc
	}
	lineText, colText, _ := strings.Cut(rest, ":")
	line, err := strconv.Atoi(lineText)
	if err != nil {
		return loc
	}
	col, _ := strconv.Atoi(colText)
	if line == 1 && col > p.firstColumn {
		col -= p.firstColumn
	}
	file := entryName
	if o := p.origin; o != nil && line >= o.Line {
		file, line = o.File, line-o.Line+1
	}
	if colText == "" {
		return file + ":" + strconv.Itoa(line)
	}
	return file + ":" + strconv.Itoa(line) + ":" + strconv.Itoa(col)
}
