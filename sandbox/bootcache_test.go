package sandbox

import (
	"runtime"
	"testing"
	"time"

	v8 "rogchap.com/v8go"
)

// TestBootstrapCacheHoldsTheFirstCalls: the process's bootstrap code cache
// is made after the training calls (cacheBootstrap), so it holds the
// functions runs call first; a cache made right after installation
// is smaller, and a fresh isolate then compiles those functions itself.
// The first calls' times are logged, not asserted.
func TestBootstrapCacheHoldsTheFirstCalls(t *testing.T) {
	e := New(Config{CompiledRuntime: true})
	t.Cleanup(e.Shutdown)
	mustRunIn(t, e, "() => 0")
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	process := processBootstrapCache()
	if process == nil {
		t.Fatal("no bootstrap cache after a run")
	}

	// A cache made right after installation, from an isolate that
	// compiled the bootstrap afresh (the process's cache is not touched:
	// the engine's refillers make isolates meanwhile).
	m := bareVM(t, e, nil)
	if m.uncached.bootstrap == nil {
		t.Fatal("the bootstrap was compiled from a cache")
	}
	early := m.uncached.bootstrap.CreateCodeCache()
	m.uncached.bootstrap = nil
	freeBareVM(m)

	if len(process.Bytes) <= len(early.Bytes) {
		t.Fatalf("the process's cache (%d bytes) holds no more than one made right after installation (%d bytes)", len(process.Bytes), len(early.Bytes))
	}
	for _, c := range []struct {
		name  string
		cache *v8.CompilerCachedData
	}{{"right after installation", early}, {"after the training (the process's)", process}} {
		var grants, program, logged time.Duration
		const n = 50
		for i := 0; i < n; i++ {
			m := bareVM(t, e, c.cache)
			t0 := time.Now()
			if v, err := m.call(m.js.setGrants, "{}"); err == nil {
				v.Release()
			}
			t1 := time.Now()
			if p, err := m.call(m.js.runProgram, int32(0), true); err == nil {
				p.Release()
			}
			t2 := time.Now()
			if v, err := m.ctx.RunScript("console.log({b: ['y', 2]})", "first-log.js"); err == nil {
				v.Release()
			}
			grants += t1.Sub(t0)
			program += t2.Sub(t1)
			logged += time.Since(t2)
			freeBareVM(m)
		}
		t.Logf("cache made %s (%d bytes): first setGrants %v, first runProgram %v, first console.log %v", c.name, len(c.cache.Bytes), grants/n, program/n, logged/n)
	}
}

// unmadeVM is a vm of engine e with a 64 MiB bound and no isolate yet.
func unmadeVM(e *Engine) *vm {
	return &vm{eng: e, memoryMiB: 64, timers: newTimers(), uncached: newUncached()}
}

// bareIsolate is an isolate and context held on this (pinned) thread, as
// an isolate's loop holds them, without a loop or the runtime.
func bareIsolate(e *Engine) *vm {
	m := unmadeVM(e)
	m.iso = v8.NewIsolate()
	m.guard = installHeapGuard(m.iso)
	m.hold = newThreadHold(m.iso)
	m.hold.take()
	m.ctx = v8.NewContext(m.iso)
	return m
}

// bareVM is a bareIsolate with the runtime installed from cache (nil: the
// bootstrap compiled afresh).
func bareVM(t *testing.T, e *Engine, cache *v8.CompilerCachedData) *vm {
	m := bareIsolate(e)
	if err := m.installRuntimeFrom(cache); err != nil {
		t.Fatal(err)
	}
	return m
}

func freeBareVM(m *vm) {
	m.releaseReturned()
	m.ctx.Close()
	m.hold.drop()
	m.iso.Dispose()
	m.guard.free()
}

// TestModuleCachesComeFromTheTraining: the runtime modules' code caches
// exist once the process's first isolate is made, whatever the programs
// run so far touched (none here touches any).
func TestModuleCachesComeFromTheTraining(t *testing.T) {
	mustRun(t, "() => 0")
	for _, name := range []string{"url", "streams", "tr46"} {
		if moduleCache(name) == nil {
			t.Errorf("no code cache for the %s module", name)
		}
	}
}
