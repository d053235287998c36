package sandbox

import (
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	v8 "rogchap.com/v8go"

	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/sandbox/webapi"
	"github.com/retainer-gw/retainer/sandbox/webapi/crypto"
	"github.com/retainer-gw/retainer/sandbox/webapi/text"
	weburl "github.com/retainer-gw/retainer/sandbox/webapi/url"
)

// The runtime is one JavaScript function, written as one file a web API
// (or a part of the engine's side), joined in the order of their names
// wherever they are: in js/runtime/, or beside their Go half in a web API's
// folder under webapi/ (package webapi), where a runtime file's name is
// numbered (NN-name.js) and other files are the sources of a bundled
// module (url, streams). 00-prelude.js opens the function and captures the
// built-ins the rest relies on, 99-exports.js answers the engine's entry
// points and closes it (docs/runtime.md, "Layout"). A new API is a new
// file between.
//
//go:embed js/runtime/*.js webapi/*/[0-9][0-9]-*.js
var runtimeFiles embed.FS

// bootstrapSource is the runtime's whole source, as V8 compiles it.
var bootstrapSource = joinRuntime(runtimeFiles)

func joinRuntime(files embed.FS) string {
	paths, err := fs.Glob(files, "js/runtime/*.js")
	if err != nil {
		panic(err)
	}
	apis, err := fs.Glob(files, "webapi/*/[0-9][0-9]-*.js")
	if err != nil {
		panic(err)
	}
	paths = append(paths, apis...)
	sort.Slice(paths, func(i, j int) bool { return path.Base(paths[i]) < path.Base(paths[j]) })
	var b strings.Builder
	for _, p := range paths {
		data, err := files.ReadFile(p)
		if err != nil {
			panic(err)
		}
		b.Write(data)
	}
	return b.String()
}

// installRuntime gives a fresh context the host functions and the runtime
// bootstrap (BenchmarkRuntimeInstall measures it alone).
func (m *vm) installRuntime() error { return m.installRuntimeFrom(processBootstrapCache()) }

// hotHost are the host functions with a native function each: those called
// per request or per log line. The rarely called ones share one, host.op,
// which the bootstrap wraps by name where it needs one (coldHost). Each
// native function is a template every isolate makes: 26 of them took
// 157 µs an isolate, the 8 now 64 µs (side by side in one process).
var hotHost = []hostFunction{
	{"log", (*vm).hostLog},
	{"setTimer", func(m *vm, a []*v8.Value) (*v8.Value, error) { return nil, m.timers.set(a) }},
	{"clearTimer", func(m *vm, a []*v8.Value) (*v8.Value, error) { m.timers.clear(a); return nil, nil }},
	{"random", (*vm).hostRandom},
	{"call", func(m *vm, a []*v8.Value) (*v8.Value, error) { return nil, m.host.start(a) }},
	{"now", func(m *vm, a []*v8.Value) (*v8.Value, error) {
		if res, ok := m.host.now(a); ok {
			return v8.NewValue(m.iso, string(res))
		}
		return nil, nil
	}},
	{"streamWrite", func(m *vm, a []*v8.Value) (*v8.Value, error) {
		more, err := m.streams.hostWrite(a)
		if err != nil {
			return nil, err
		}
		return v8.NewValue(m.iso, more)
	}},
	{"op", (*vm).hostOp},
}

// hotHostNames are hotHost's names, comma-separated, for the startup
// snapshot's maker (snapshot.cc), which gives the host object a
// placeholder under each.
var hotHostNames = hostNames(hotHost)

// hostFunction is a Go host function under the name the runtime calls it.
type hostFunction struct {
	name string
	f    func(*vm, []*v8.Value) (*v8.Value, error)
}

// hostNames are fs' names, comma-separated.
func hostNames(fs []hostFunction) string {
	names := make([]string, len(fs))
	for i, h := range fs {
		names[i] = h.name
	}
	return strings.Join(names, ",")
}

// installRuntimeFrom installs the runtime with the bootstrap compiled from
// cache (nil: compiled afresh, and this isolate then makes the cache).
func (m *vm) installRuntimeFrom(cache *v8.CompilerCachedData) error {
	host := v8.NewObjectTemplate(m.iso)
	for _, h := range hotHost {
		if err := host.Set(h.name, m.hostFunc(h.name, h.f), v8.ReadOnly); err != nil {
			return err
		}
	}
	hostObj, err := host.NewInstance(m.ctx)
	if err != nil {
		return err
	}
	boot, err := m.compileBootstrap(cache)
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
	names, err := v8.NewValue(m.iso, coldHostNames)
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
	if err := m.js.take(obj); err != nil {
		return err
	}
	bootVal.Release()
	hostObj.Release()
	return nil
}

// restoreRuntime finishes a context restored from the startup snapshot
// (snapshot.go): the runtime is installed there already, and waits on the
// global object as __retainerRuntime, [its entry points, its host object].
// The entry is taken away before anything else runs, the host object gets
// this isolate's host functions, and the clock starts.
func (m *vm) restoreRuntime() error {
	global := m.ctx.Global()
	defer global.Release()
	v, err := global.Get("__retainerRuntime")
	if err != nil {
		return err
	}
	defer v.Release()
	if !v.IsArray() {
		return errors.New("the context holds no runtime (it was not restored from the snapshot)")
	}
	if !global.Delete("__retainerRuntime") {
		return errors.New("the runtime's entry could not be taken from the global object")
	}
	pair, err := v.AsObject()
	if err != nil {
		return err
	}
	internalsVal, err := pair.GetIdx(0)
	if err != nil {
		return err
	}
	defer internalsVal.Release()
	hostVal, err := pair.GetIdx(1)
	if err != nil {
		return err
	}
	defer hostVal.Release()
	internals, err := internalsVal.AsObject()
	if err != nil {
		return err
	}
	host, err := hostVal.AsObject()
	if err != nil {
		return err
	}
	for _, h := range hotHost {
		fn := m.hostFunc(h.name, h.f).GetFunction(m.ctx)
		err := host.Set(h.name, fn)
		fn.Release()
		if err != nil {
			return err
		}
	}
	if err := m.js.take(internals); err != nil {
		return err
	}
	start, err := internals.Get("startIsolate")
	if err != nil {
		return err
	}
	defer start.Release()
	startFn, err := start.AsFunction()
	if err != nil {
		return err
	}
	r, err := startFn.Call(v8.Undefined(m.iso))
	if err != nil {
		return err
	}
	r.Release()
	return nil
}

// entryPoints are the runtime's functions the engine calls
// (js/runtime/99-exports.js answers them).
type entryPoints struct {
	runProgram, invoke, setEnv, fireTimer, pendingWork, settleHost, setGrants, setSource *v8.Function
	streamDrained, cancelStream                                                          *v8.Function
}

// take keeps the runtime's entry points from the object that holds them.
func (js *entryPoints) take(obj *v8.Object) error {
	for name, dst := range map[string]**v8.Function{
		"runProgram": &js.runProgram, "invoke": &js.invoke, "setEnv": &js.setEnv,
		"fireTimer": &js.fireTimer, "pendingWork": &js.pendingWork,
		"settleHost": &js.settleHost, "setGrants": &js.setGrants, "setSource": &js.setSource,
		"streamDrained": &js.streamDrained, "cancelStream": &js.cancelStream,
	} {
		v, err := obj.Get(name)
		if err != nil {
			return err
		}
		if *dst, err = v.AsFunction(); err != nil {
			return fmt.Errorf("runtime entry %s: %w", name, err)
		}
	}
	return nil
}

// coldHost are the host functions that share host.op, in the order of
// their index there; coldHostNames hands the bootstrap their names.
var (
	coldHost = append([]hostFunction{
		{"load", (*vm).hostLoad},
		{"streamOpen", func(m *vm, a []*v8.Value) (*v8.Value, error) { return nil, m.streams.hostOpen(a) }},
		{"streamEnd", func(m *vm, a []*v8.Value) (*v8.Value, error) {
			if msg := m.streams.hostEnd(a); msg != "" {
				m.handleLog("error", "Response stream: "+msg)
			}
			return nil, nil
		}},
		{"natives", (*vm).hostNatives},
		{"socketQueueBound", func(m *vm, _ []*v8.Value) (*v8.Value, error) {
			return v8.NewValue(m.iso, socketQueueBound(m.memoryMiB))
		}},
	}, webAPIOps()...)
	coldHostNames = hostNames(coldHost)
)

// webAPIs are the web APIs whose Go halves live in their own folders
// (package webapi): their operations join coldHost, and an API with
// state has a session in each isolate that calls it (vm.sessions, by the
// API's index here).
var webAPIs = []webapi.API{crypto.API, text.API, weburl.API}

// webAPIOps are the web APIs' operations as host functions.
func webAPIOps() []hostFunction {
	var out []hostFunction
	for i, api := range webAPIs {
		for _, op := range api.Ops {
			out = append(out, hostFunction{op.Name, func(m *vm, args []*v8.Value) (*v8.Value, error) {
				in := make([]webapi.Arg, len(args))
				for j, a := range args {
					in[j] = a
				}
				var s webapi.Session
				if op.With != nil {
					s = m.sessions.get(i)
				}
				res, err := op.Call(s, in)
				if err != nil {
					return nil, err
				}
				return v8.NewValue(m.iso, res)
			}})
		}
	}
	return out
}

// sessions are the web APIs' state in one isolate, by webAPIs' index;
// loop-owned.
type sessions []webapi.Session

// get is the isolate's session of web API i, made at its first call.
func (ss *sessions) get(i int) webapi.Session {
	if *ss == nil {
		*ss = make([]webapi.Session, len(webAPIs))
	}
	if (*ss)[i] == nil {
		(*ss)[i] = webAPIs[i].NewSession()
	}
	return (*ss)[i]
}

// close ends the web APIs' sessions (the isolate is ending).
func (ss sessions) close() {
	for i, s := range ss {
		if s != nil {
			s.Close()
			ss[i] = nil
		}
	}
}

// hostOp is host.op(i, ...args): the i-th of coldHost.
func (m *vm) hostOp(args []*v8.Value) (*v8.Value, error) {
	if len(args) < 1 || !args[0].IsInt32() {
		return nil, errors.New("host.op needs an operation")
	}
	i := int(args[0].Int32())
	if i < 0 || i >= len(coldHost) {
		return nil, errors.New("no such host operation")
	}
	return coldHost[i].f(m, args[1:])
}

// hostFunc makes the native function of a Go host function, for the host
// object the bootstrap is handed (or, restored from the snapshot, holds).
// Every callback releases its arguments, and recovers a Go panic
// into a JavaScript exception (a panic would leave V8's lock held).
func (m *vm) hostFunc(name string, f func(*vm, []*v8.Value) (*v8.Value, error)) *v8.FunctionTemplate {
	return v8.NewFunctionTemplate(m.iso, func(info *v8.FunctionCallbackInfo) (ret *v8.Value) {
		defer info.Release()
		defer func() {
			if r := recover(); r != nil {
				ret = m.throw(fmt.Sprintf("host function %s failed", name))
			}
		}()
		v, err := f(m, info.Args())
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
	if n == -1 {
		// crypto.randomUUID: a version 4 UUID made here, one host call
		// instead of one and a formatting loop in the interpreter (~10 us).
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		b[6] = b[6]&0x0f | 0x40
		b[8] = b[8]&0x3f | 0x80
		var out [36]byte
		hex.Encode(out[0:8], b[0:4])
		hex.Encode(out[9:13], b[4:6])
		hex.Encode(out[14:18], b[6:8])
		hex.Encode(out[19:23], b[8:10])
		hex.Encode(out[24:], b[10:])
		out[8], out[13], out[18], out[23] = '-', '-', '-', '-'
		return v8.NewValue(m.iso, string(out[:]))
	}
	if n < 0 || n > 65536 {
		return nil, errors.New("random length out of range")
	}
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	return v8.NewValue(m.iso, wirejson.Latin1(b))
}
