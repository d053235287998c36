package sandbox

import (
	_ "embed"
	"errors"

	v8 "rogchap.com/v8go"
)

// Runtime modules bundled from npm packages (sandbox/js/gen, made by
// `go generate ./sandbox`). They are compiled on first touch of one of
// their globals, not at isolate start (v8go 0.9 has no startup snapshots),
// and their V8 code cache is shared by every isolate of the process.
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
	name := args[0].String()
	src, ok := lazyModules[name]
	if !ok {
		return nil, errors.New("no runtime module " + name)
	}
	lazyCacheMu.Lock()
	cache := lazyCache[name]
	lazyCacheMu.Unlock()
	opts := v8.CompileOptions{}
	if cache != nil {
		opts.CachedData = cache
	}
	script, err := m.iso.CompileUnboundScript(src, "runtime-"+name+".js", opts)
	if err != nil {
		return nil, err
	}
	if cache == nil {
		// The cache is made after the training has used the module
		// (codecache.go): it then holds the functions handlers call
		// first, not only its top level.
		m.uncached[name] = script
	}
	return script.Run(m.ctx)
}
