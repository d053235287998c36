package sandbox

import (
	_ "embed"
	"errors"

	v8 "rogchap.com/v8go"
)

// Runtime modules bundled from npm packages (sandbox/js/gen, made by
// `go generate ./sandbox`). They are compiled on first touch of one of
// their globals, not in the startup snapshot (which every isolate
// deserializes whole), and their V8 code cache is shared by every isolate
// of the process.
//
//go:generate sh -c "cd js && npm ci --no-audit --no-fund && go run build/main.go"
var (
	//go:embed js/gen/url.js
	urlModule string
	//go:embed js/gen/streams.js
	streamsModule string
	//go:embed js/gen/tr46.js
	tr46Module string // loaded by the url module for a host that is not plain ASCII

	lazyModules = map[string]string{"url": urlModule, "streams": streamsModule, "tr46": tr46Module}
)

// hostLoad compiles and runs a runtime module; it answers the module's
// factory function, which the bootstrap calls once and caches.
func (m *vm) hostLoad(args []*v8.Value) (*v8.Value, error) {
	if len(args) < 1 {
		return nil, errors.New("load needs a module name")
	}
	script, err := m.compileModule(args[0].String())
	if err != nil {
		return nil, err
	}
	return script.Run(m.ctx)
}

// compileModule compiles runtime module name from the process's code
// cache; without one, the script waits in m.uncached.modules for the training to
// make it (codecache.go): it then holds the functions handlers call first,
// not only the module's top level.
func (m *vm) compileModule(name string) (*v8.UnboundScript, error) {
	src, ok := lazyModules[name]
	if !ok {
		return nil, errors.New("no runtime module " + name)
	}
	cache := moduleCache(name)
	script, err := m.iso.CompileUnboundScript(src, "runtime-"+name+".js", consuming(cache))
	if err != nil {
		return nil, err
	}
	if cache == nil {
		m.uncached.modules[name] = script
	}
	return script, nil
}
