package sandbox

import (
	"fmt"
	"sync"

	v8 "rogchap.com/v8go"
)

// What the runtime's code caches hold, and when they are made. V8 compiles
// a function on its first call, and a code cache holds what was compiled
// when it was made; every later isolate of the process deserializes it.
// The caches are therefore made by the process's first isolate after a
// fixed training (trainBootstrap), never after a program's run: what a
// program touched must not decide what every later isolate deserializes.

// bootstrapCache is the V8 code cache of the runtime bootstrap, made by the
// first isolate and reused by every later one so the runtime is not parsed
// again per isolate.
var (
	bootstrapCacheMu sync.Mutex
	bootstrapCache   *v8.CompilerCachedData
)

// The runtime modules' caches (lazy.go), by module name.
var (
	lazyCacheMu sync.Mutex
	lazyCache   = map[string]*v8.CompilerCachedData{}
)

// uncached are an isolate's scripts compiled without a code cache, whose
// cache the training makes from them (trainBootstrap, trainModules);
// loop-owned.
type uncached struct {
	bootstrap *v8.UnboundScript            // the process's first isolate's bootstrap
	modules   map[string]*v8.UnboundScript // runtime modules, by name (lazy.go)
}

func newUncached() uncached { return uncached{modules: map[string]*v8.UnboundScript{}} }

// processBootstrapCache is the process's bootstrap cache (nil until the
// first isolate has made it).
func processBootstrapCache() *v8.CompilerCachedData {
	bootstrapCacheMu.Lock()
	defer bootstrapCacheMu.Unlock()
	return bootstrapCache
}

// consuming answers compile options that consume cache without sharing
// it: v8go writes whether V8 rejected the data into the struct it is
// given, and the process's caches are read by isolates on many threads at
// once (go test -race caught two bootstrap compilations writing it
// together). The bytes themselves are only read.
func consuming(cache *v8.CompilerCachedData) v8.CompileOptions {
	if cache == nil {
		return v8.CompileOptions{}
	}
	c := *cache
	return v8.CompileOptions{CachedData: &c}
}

func (m *vm) compileBootstrap(cache *v8.CompilerCachedData) (*v8.UnboundScript, error) {
	s, err := m.iso.CompileUnboundScript(bootstrapSource, "runtime.js", consuming(cache))
	if err != nil {
		return nil, fmt.Errorf("compiling the runtime bootstrap: %w", err)
	}
	if cache == nil {
		// Made after the training (trainBootstrap).
		m.uncached.bootstrap = s
	}
	return s, nil
}

// cacheBootstrap makes the bootstrap's code cache from the isolate that
// compiled it (the process's first), once that isolate has made the calls
// runs make first (trainBootstrap): V8 compiles a function on its first
// call, and the cache holds what was compiled when it is made. Made right
// after installation, it left setGrants, runProgram and console's
// formatting to be compiled again in every isolate: their first calls took
// 160, 85 and ~530 µs, against 11, 8 and ~210 µs from the trained cache
// (`go test ./sandbox -run TestBootstrapCacheHoldsTheFirstCalls -v` logs
// them). The cache is never made after a program's run: what a program
// touched must not decide what every later isolate deserializes.
func (u *uncached) cacheBootstrap() {
	bootstrapCacheMu.Lock()
	if bootstrapCache == nil {
		bootstrapCache = u.bootstrap.CreateCodeCache()
	}
	bootstrapCacheMu.Unlock()
	u.bootstrap = nil
}

// trainBootstrap makes, in the process's first isolate, the calls whose
// functions the bootstrap's code cache is to hold: the warm-up's, and a
// console.log (its formatting compiled afresh cost a logging computation
// ~0.5 ms: TestBootstrapCacheHoldsTheFirstCalls). The log goes nowhere (no
// run has set a sink). The bootstrap's cache is made then (cacheBootstrap);
// then it uses the url and streams modules as handlers mostly do, and their
// caches are made from that (flushCodeCaches). The isolate keeps those
// modules loaded, and holds nothing of any program.
func (m *vm) trainBootstrap() error {
	if err := m.warmUp(); err != nil {
		return err
	}
	v, err := m.ctx.RunScript("console.log('', {a: [1, 'x']})", "runtime-training.js")
	if err != nil {
		return err
	}
	v.Release()
	// The bootstrap's cache is made before the modules are used, so that
	// their use adds nothing to it (measured: 7 KB more otherwise).
	m.uncached.cacheBootstrap()
	if err := m.trainModules(); err != nil {
		// This isolate is disposed; the next one trains again.
		bootstrapCacheMu.Lock()
		bootstrapCache = nil
		bootstrapCacheMu.Unlock()
		return err
	}
	return nil
}

// The first isolate made from the snapshot trains the modules' caches;
// isolates made at the same time take turns, and one that finds them
// trained goes on (a module loaded before then is compiled afresh).
var modulesTraining sync.Mutex

// modulesUntrained answers whether no isolate has trained the modules'
// caches yet.
func modulesUntrained() bool {
	lazyCacheMu.Lock()
	defer lazyCacheMu.Unlock()
	return len(lazyCache) == 0
}

// trainFromSnapshot is trainBootstrap for an isolate restored from the
// snapshot: the warm-up, then the modules' training, made by one isolate
// at a time.
func (m *vm) trainFromSnapshot() error {
	if err := m.warmUp(); err != nil {
		return err
	}
	modulesTraining.Lock()
	defer modulesTraining.Unlock()
	if !modulesUntrained() {
		return nil
	}
	return m.trainModules()
}

// trainModules uses the url and streams modules as handlers mostly do and
// makes their caches from that.
func (m *vm) trainModules() error {
	v, err := m.ctx.RunScript(moduleTraining, "runtime-training.js")
	if err != nil {
		return err
	}
	v.Release()
	m.releaseReturned()
	// A module the training did not load (tr46: hosts are plain ASCII
	// there) is cached compiled but not run: running tr46 builds its
	// Unicode tables, ~25 ms.
	for name := range lazyModules {
		if _, loaded := m.uncached.modules[name]; !loaded && moduleCache(name) == nil {
			if _, err := m.compileModule(name); err != nil {
				return err
			}
		}
	}
	m.uncached.flush()
	return nil
}

// moduleTraining uses the url and streams modules as handlers mostly do.
const moduleTraining = `{
	const u = new URL('https://shop.example.com/items/42?id=42&sort=asc#top');
	[u.href, u.pathname, u.search, u.hash, u.host, u.origin, u.searchParams.get('id'), [...u.searchParams].length, String(new URLSearchParams('a=1&b=2'))];
	const r = new ReadableStream({ start(c) { c.enqueue(new Uint8Array([1])); c.close(); } }).getReader();
	r.read().then(() => r.read());
}`

// moduleCache is the process's code cache of runtime module name (nil
// until the training has made it).
func moduleCache(name string) *v8.CompilerCachedData {
	lazyCacheMu.Lock()
	defer lazyCacheMu.Unlock()
	return lazyCache[name]
}

// flush stores the code cache of the modules this isolate compiled
// without one. Called by the training only: a module a program loads
// first (only if it wins the race with the training) is then compiled
// afresh by each isolate until the training has made its cache.
func (u *uncached) flush() {
	if len(u.modules) == 0 {
		return
	}
	for name, script := range u.modules {
		lazyCacheMu.Lock()
		if lazyCache[name] == nil {
			lazyCache[name] = script.CreateCodeCache()
		}
		lazyCacheMu.Unlock()
		delete(u.modules, name)
	}
}
