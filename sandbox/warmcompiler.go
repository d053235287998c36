package sandbox

import (
	"sync/atomic"

	"github.com/retainer-gw/retainer/program"
)

// bundled says a program went through the bundler (build) in this
// process.
var bundled atomic.Bool

// WarmCompiler makes this process's first bundle of a module program, if
// none was made yet, and throws it away. A process's first bundle costs
// 3-5 ms of CPU, then 1 ms (esbuild's code and tables touched, its heap
// grown); a new tenant's first deploy in the Workers form (`export
// default`) paid it in its spare worker, which under 200 tenants' load is
// tens of milliseconds of wall time (docs/decisions.md, "A spare warms
// the bundler"). The worker calls it while it idles as a spare.
func WarmCompiler() {
	if bundled.Load() {
		return
	}
	compile(program.Program{Code: "let n = 0;\nexport default { fetch() { return new Response(String(++n)); } };"})
}
