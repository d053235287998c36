package sandbox

import (
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"

	v8 "rogchap.com/v8go"

	"github.com/retainer-gw/retainer/internal/wirejson"
)

//go:embed js/bootstrap.js
var bootstrapSource string

// bootstrapCache is the V8 code cache of the runtime bootstrap, made by the
// first isolate and reused by every later one so the runtime is not parsed
// again per isolate.
var (
	bootstrapCacheMu sync.Mutex
	bootstrapCache   *v8.CompilerCachedData
)

// installRuntime gives a fresh context the host functions and the runtime
// bootstrap (BenchmarkRuntimeInstall measures it alone).
func (m *vm) installRuntime() error {
	host := v8.NewObjectTemplate(m.iso)
	// The functions called per request or per log line each have a native
	// function of their own; the rarely called ones share one, host.op,
	// which the bootstrap wraps by name where it needs one (coldHost). Each
	// native function is a template every isolate makes: 26 of them took
	// 157 µs an isolate, the 8 now 64 µs (side by side in one process).
	m.hostFunc(host, "log", m.hostLog)
	m.hostFunc(host, "setTimer", m.hostSetTimer)
	m.hostFunc(host, "clearTimer", m.hostClearTimer)
	m.hostFunc(host, "random", m.hostRandom)
	m.hostFunc(host, "call", m.hostCallFn)
	m.hostFunc(host, "now", m.hostNowFn)
	m.hostFunc(host, "streamWrite", m.hostStreamWrite)
	cold := []struct {
		name string
		f    func([]*v8.Value) (*v8.Value, error)
	}{
		{"load", m.hostLoad}, {"digest", m.hostDigest}, {"hmac", m.hostHMAC}, {"aes", m.hostAES},
		{"ecGenerate", m.hostECGenerate}, {"ecImportPrivate", m.hostECImportPrivate}, {"ecSign", m.hostECSign},
		{"rsaGenerate", m.hostRSAGenerate}, {"rsaImport", m.hostRSAImport}, {"rsaSign", m.hostRSASign}, {"rsaJWK", m.hostRSAJWK},
		{"importPublic", m.hostImportPublic}, {"verifySig", m.hostVerify},
		{"encodingName", m.hostEncodingName}, {"decodeLegacy", m.hostDecodeLegacy},
		{"codecInit", m.hostCodecInit}, {"codecChunk", m.hostCodecChunk},
		{"streamOpen", m.hostStreamOpen}, {"streamEnd", m.hostStreamEnd},
	}
	coldNames := make([]string, len(cold))
	for i, c := range cold {
		coldNames[i] = c.name
	}
	m.hostFunc(host, "op", func(args []*v8.Value) (*v8.Value, error) {
		if len(args) < 1 || !args[0].IsInt32() {
			return nil, errors.New("host.op needs an operation")
		}
		i := int(args[0].Int32())
		if i < 0 || i >= len(cold) {
			return nil, errors.New("no such host operation")
		}
		return cold[i].f(args[1:])
	})
	hostObj, err := host.NewInstance(m.ctx)
	if err != nil {
		return err
	}
	boot, err := m.compileBootstrap()
	if err != nil {
		return err
	}
	bootVal, err := boot.Run(m.ctx)
	if err != nil {
		return fmt.Errorf("running the runtime bootstrap: %w", err)
	}
	bootFn, err := bootVal.AsFunction()
	if err != nil {
		return err
	}
	names, err := v8.NewValue(m.iso, strings.Join(coldNames, ","))
	if err != nil {
		return err
	}
	internals, err := bootFn.Call(v8.Undefined(m.iso), hostObj, names)
	names.Release()
	if err != nil {
		return fmt.Errorf("installing the runtime: %w", err)
	}
	obj, err := internals.AsObject()
	if err != nil {
		return err
	}
	for name, dst := range map[string]**v8.Function{
		"runProgram": &m.runProgram, "invoke": &m.invoke, "setEnv": &m.setEnv,
		"fireTimer": &m.fireTimer, "pendingWork": &m.pendingWork,
		"settleHost": &m.settleHost, "setGrants": &m.setGrants,
		"streamDrained": &m.streamDrained, "cancelStream": &m.cancelStream,
	} {
		v, err := obj.Get(name)
		if err != nil {
			return err
		}
		if *dst, err = v.AsFunction(); err != nil {
			return fmt.Errorf("runtime entry %s: %w", name, err)
		}
	}
	bootVal.Release()
	hostObj.Release()
	return nil
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
func (m *vm) cacheBootstrap() {
	bootstrapCacheMu.Lock()
	if bootstrapCache == nil {
		bootstrapCache = m.uncachedBootstrap.CreateCodeCache()
	}
	bootstrapCacheMu.Unlock()
	m.uncachedBootstrap = nil
}

func (m *vm) compileBootstrap() (*v8.UnboundScript, error) {
	bootstrapCacheMu.Lock()
	cache := bootstrapCache
	bootstrapCacheMu.Unlock()
	opts := v8.CompileOptions{}
	if cache != nil {
		opts.CachedData = cache
	}
	s, err := m.iso.CompileUnboundScript(bootstrapSource, "runtime.js", opts)
	if err != nil {
		return nil, fmt.Errorf("compiling the runtime bootstrap: %w", err)
	}
	if cache == nil {
		// Made once the isolate has warmed up (cacheBootstrap).
		m.uncachedBootstrap = s
	}
	return s, nil
}

// hostFunc installs a Go function in the host object handed to the
// bootstrap. Every callback releases its arguments, and recovers a Go panic
// into a JavaScript exception (a panic would leave V8's lock held).
func (m *vm) hostFunc(tmpl *v8.ObjectTemplate, name string, f func(args []*v8.Value) (*v8.Value, error)) {
	fn := v8.NewFunctionTemplate(m.iso, func(info *v8.FunctionCallbackInfo) (ret *v8.Value) {
		defer info.Release()
		defer func() {
			if r := recover(); r != nil {
				ret = m.throw(fmt.Sprintf("host function %s failed", name))
			}
		}()
		v, err := f(info.Args())
		if err != nil {
			return m.throw(err.Error())
		}
		if v != nil {
			// V8 copies the returned handle; ours is released after the
			// outermost call returns (releasing it now would free it first).
			m.released = append(m.released, v)
		}
		return v
	})
	if err := tmpl.Set(name, fn, v8.ReadOnly); err != nil {
		panic(err)
	}
}

func (m *vm) throw(msg string) *v8.Value {
	v, err := v8.NewValue(m.iso, msg)
	if err != nil {
		return nil
	}
	m.released = append(m.released, v)
	// ThrowException makes a Value of its own: released with the others
	// after the outermost call (it leaked once per throw before).
	t := m.iso.ThrowException(v)
	if t != nil {
		m.released = append(m.released, t)
	}
	return t
}

func (m *vm) hostLog(args []*v8.Value) (*v8.Value, error) {
	if len(args) < 2 || m.sink == nil {
		return nil, nil
	}
	m.sink(args[0].String(), args[1].String())
	return nil, nil
}

func (m *vm) hostRandom(args []*v8.Value) (*v8.Value, error) {
	if len(args) < 1 {
		return nil, errors.New("random needs a length")
	}
	n := int(args[0].Int32())
	if n < 0 || n > 65536 {
		return nil, errors.New("random length out of range")
	}
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	return v8.NewValue(m.iso, wirejson.Latin1(b))
}
