package child

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/gctarget"
	"github.com/retainer-gw/retainer/internal/hostcache"
	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/kv/cache"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/sandbox"
	"github.com/retainer-gw/retainer/workers/wire"
)

// Main runs the worker mode: it serves the gateway on the inherited
// link (wire.Link) until the connection closes, then exits. It never returns.
func Main() {
	conn, err := wire.WorkerLink()
	if err != nil {
		fmt.Fprintln(os.Stderr, "retainer worker: not started by a gateway:", err)
		os.Exit(2)
	}
	w := &workerServer{}
	// The one host cache there is: kv's reads and queued writes.
	w.cache = cache.NewWorker(w.sendCacheBatch, w.answerTogether)
	w.conn = wire.NewConn(conn, wire.MaxGatewayFrame, wire.HelloFrame, w.handle, func(reason string) {
		fmt.Fprintln(os.Stderr, "retainer worker: the gateway sent", reason)
	})
	w.conn.TooLarge = tooLargeReply
	w.conn.Take = w.takeInvoke
	// Host calls, logs and cache batches past wire.MaxCalls wait here for
	// an answer to come back: never past what the gateway serves at once.
	// Host calls take at most all but systemCalls of them, so the worker's
	// own frames (a kv batch a waiting read depends on, a lost run, a log
	// line) always find a place.
	w.conn.LimitCalls(wire.MaxCalls)
	w.hostSlots = make(chan struct{}, wire.MaxCalls-systemCalls)
	w.logs = make(chan wire.LogPost, 4096)
	go w.sendLogs()
	w.conn.Start()
	<-w.conn.Done()
	// The gateway closed the connection (or died): nothing is left to serve.
	os.Exit(0)
}

// workerServer answers the gateway's calls inside the worker.
type workerServer struct {
	conn *wire.Conn
	logs chan wire.LogPost
	// cache answers what it can of host calls without a round trip, and
	// holds a run's answers and other calls until what it queued for the
	// run is applied (internal/hostcache; kv/cache).
	cache hostcache.Worker

	// hostSlots holds a place for each host call on its way to the
	// gateway (roundTrip).
	hostSlots chan struct{}

	// lastID is the handle id of the last invocation frame, and req the
	// frame decoded, both owned by the read loop (takeInvoke).
	lastID string
	req    wire.InvokeRequest

	mu     sync.Mutex // guards engine and cfg until hello has run
	engine *sandbox.Engine
	cfg    wire.WorkerConfig

	// ran says a run came (warmSpare).
	ran atomic.Bool
}

func (w *workerServer) handle(ctx context.Context, path string, body []byte) ([]byte, error) {
	var reply any
	switch path {
	case wire.PathHello:
		reply = w.hello(body)
	case wire.PathRun, wire.PathInvoke, wire.PathClose, wire.PathStreamRead, wire.PathStreamCancel:
		e := w.ready()
		if e == nil {
			return nil, fmt.Errorf("%s before hello", path)
		}
		switch path {
		case wire.PathRun:
			w.ran.Store(true)
			var job program.Job
			if err := json.Unmarshal(body, &job); err != nil {
				return nil, err
			}
			out, err := e.Run(ctx, job)
			if werr := w.cache.Settle(job.ID); werr != nil && err == nil {
				if out.Retained {
					e.Close(job.ID)
				}
				out, err = program.Outcome{Logs: out.Logs}, werr
			}
			reply = wire.RunReply{Outcome: out, Fault: wire.ToWire(err)}
		case wire.PathInvoke:
			// takeInvoke takes every well-formed invocation on the read loop.
			return nil, errors.New("a malformed invoke frame")
		case wire.PathClose:
			var req wire.CloseRequest
			if err := json.Unmarshal(body, &req); err != nil {
				return nil, err
			}
			reply = wire.CloseReply{Fault: wire.ToWire(e.Close(req.ID))}
		case wire.PathStreamRead, wire.PathStreamCancel:
			var req wire.StreamRequest
			if err := json.Unmarshal(body, &req); err != nil {
				return nil, err
			}
			if path == wire.PathStreamCancel {
				e.CancelStream(req.ID, req.Stream)
				reply = wire.StreamReply{Done: true}
				break
			}
			wait := min(time.Duration(req.WaitMs)*time.Millisecond, wire.StreamWait)
			data, done, err := e.ReadStream(ctx, req.ID, req.Stream, wait)
			if werr := w.cache.Settle(req.ID); werr != nil && err == nil {
				e.CancelStream(req.ID, req.Stream)
				data, done, err = nil, true, werr
			}
			reply = wire.StreamReply{Data: data, Done: done, Fault: wire.ToWire(err)}
		}
	case wire.PathCacheTell:
		if err := w.cache.Tell(body); err != nil {
			return nil, err
		}
		reply = struct{}{}
	case wire.PathProbe:
		if !w.probing() {
			return nil, fmt.Errorf("probe is not enabled")
		}
		reply = runProbe()
	case wire.PathProbeForeign:
		if !w.probing() {
			return nil, fmt.Errorf("probe is not enabled")
		}
		foreignSyscall(string(body))
		reply = map[string]string{"result": "ALLOWED"}
	default:
		return nil, fmt.Errorf("unknown call %q", path)
	}
	if enc, ok := reply.(wire.FrameEncoder); ok {
		return enc.EncodeFrame(), nil
	}
	return wirejson.Marshal(reply)
}

// tooLargeReply replaces an answer the gateway would refuse. The sandbox
// bounds every part of an answer before it is built, so this is the last
// word for a bound it missed, never the way a bound is enforced: the run
// fails with a fault of its own and the worker lives on.
func tooLargeReply(path string, size int) []byte {
	msg := fmt.Sprintf("The answer (%d bytes encoded) is larger than the worker boundary allows.", size)
	var reply any
	switch path {
	case wire.PathInvoke:
		return wire.InvokeReply{Fault: wire.ToWire(fault.New(fault.BadResponse, "%s", msg))}.EncodeFrame()
	case wire.PathRun:
		reply = wire.RunReply{Outcome: program.Outcome{Logs: []string{}}, Fault: wire.ToWire(fault.New(fault.Runtime, "%s", msg))}
	default:
		reply = wire.CloseReply{Fault: wire.ToWire(fault.New(fault.Internal, "%s", msg))}
	}
	b, _ := wirejson.Marshal(reply)
	return b
}

func (w *workerServer) hello(body []byte) wire.HelloReply {
	req, err := wire.DecodeHello(body)
	if err != nil {
		return wire.HelloReply{Error: "bad hello: " + err.Error()}
	}
	if req.Version != wire.ProtocolVersion {
		return wire.HelloReply{Version: wire.ProtocolVersion, Error: "version mismatch"}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.engine != nil {
		return wire.HelloReply{Error: "hello twice"}
	}
	// The worker collects as the gateway does: a gateway at Go's default
	// leaves its workers there too.
	gctarget.Apply(req.Config.GCPercent, req.Config.GCHeadroom)
	c := req.Config.Engine
	w.cfg = req.Config
	if req.Config.FrameCap > 0 {
		w.conn.PeerMax.Store(int64(req.Config.FrameCap))
	}
	if st := req.Startup; st != nil {
		sandbox.UseStartup(sandbox.Startup{Snapshot: st.Snapshot, Modules: st.Modules, Sum: st.Sum})
	}
	engine := sandbox.New(sandbox.Config{
		Prewarm: c.Prewarm, Limits: c.Limits, JIT: c.JIT, Wasm: c.Wasm,
		OnLog:       w.log,
		OnLost:      w.lost,
		HostCall:    w.hostCall,
		HostCallNow: w.cache.Now,
	})
	// Start V8 (its platform threads) before the filters close the doors.
	if _, err := engine.Run(context.Background(), program.Job{Program: program.Program{Code: "() => 0"}}); err != nil {
		return wire.HelloReply{Error: "starting V8: " + err.Error()}
	}
	if err := harden(req.Config); err != nil {
		return wire.HelloReply{Error: err.Error()}
	}
	w.engine = engine
	go w.warmSpare()
	if on, err := sandbox.SnapshotStatus(); !on {
		// Slower isolates, the same behaviour: worth an operator's eye.
		// The worker's stderr is the gateway's log ("worker N: ...").
		fmt.Fprintf(os.Stderr, "isolates install the compiled runtime: %v\n", err)
	}
	reply := wire.HelloReply{Version: wire.ProtocolVersion, PID: os.Getpid(), FromStartup: sandbox.StartedFromGiven()}
	if req.WantStartup {
		// Made before this worker has served anything (hello is its
		// first call): the pool's other workers start from it.
		if st, ok := sandbox.MadeStartup(); ok {
			reply.Startup = &wire.Startup{Snapshot: st.Snapshot, Modules: st.Modules, Sum: st.Sum}
		}
	}
	return reply
}

// spareIdle is how long after its hello a worker that has had no run
// is taken for a spare (workers/spares.go): a worker started for a
// tenant has its first run within milliseconds.
const spareIdle = 100 * time.Millisecond

// warmSpare makes the bundler's first build in a worker that idles as a
// spare, so that the new tenant that takes it does not pay it in its
// first deploy (sandbox.WarmCompiler); a worker started for a tenant
// whose programs never need the bundler never pays it. Then it returns
// what its start left free in its Go heap (the hello's snapshot and
// caches as the frame held them, the bundler's first build) to the
// system: at Go's pace the worker kept it, 1.7 MiB of an idle spare's 6.5
// of its own and 3.9 of a served worker's 16 (docs/performance.md, "Many
// warm workers").
func (w *workerServer) warmSpare() {
	time.Sleep(spareIdle)
	if !w.ran.Load() {
		sandbox.WarmCompiler()
	}
	debug.FreeOSMemory()
}

// probing says whether the gateway's hello enabled the probe paths (tests
// of the hardening).
func (w *workerServer) probing() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cfg.Probe
}

func (w *workerServer) ready() *sandbox.Engine {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.engine
}

// log queues a handler's console line for the gateway; a full queue drops
// lines rather than block an isolate.
func (w *workerServer) log(id string, e program.LogEntry) {
	e.Message, _ = wirejson.Cut(e.Message, budgets.LogBytes)
	select {
	case w.logs <- wire.LogPost{ID: id, Entry: e}:
	default:
	}
}

func (w *workerServer) sendLogs() {
	for p := range w.logs {
		w.post(wire.PathLog, p)
	}
}

func (w *workerServer) lost(id string, err error) {
	go w.post(wire.PathLost, wire.LostPost{ID: id, Fault: wire.ToWire(err)})
}

func (w *workerServer) post(path string, v any) {
	body, _ := wirejson.Marshal(v)
	w.conn.Call(context.Background(), path, body)
}

// takeInvoke takes an invocation frame on the read loop, as it arrives:
// queuing it on its isolate there keeps a handle's invocations in arrival
// order (docs/architecture.md), and no goroutine is started or woken for it. The answer
// is written by the isolate's loop as soon as it is ready, unless the
// invocation's kv writes are still on their way: it leaves only once they
// are applied (the output gate), written by the flusher that applied them.
// A frame it cannot take (before hello, malformed) goes the usual way,
// which reports it.
func (w *workerServer) takeInvoke(frame uint64, path string, payload []byte) bool {
	if path != wire.PathInvoke {
		return false
	}
	e := w.ready()
	if e == nil {
		return false
	}
	// The frame is decoded into the read loop's own InvokeRequest (its
	// headers' array reused) and nothing of it outlives InvokeAsync, which
	// copies what the isolate needs into the request's lines: the frame
	// itself is the read loop's buffer (Conn.Take).
	req := &w.req
	if req.DecodeFrame(payload) != nil {
		return false
	}
	// The request's strings share the frame's bytes (DecodeFrame); the
	// id outlives the invocation (the kv cache's waiters keep it), so it
	// is the read loop's own copy, made once for a handle's run of frames.
	if req.ID != w.lastID {
		w.lastID = strings.Clone(req.ID)
	}
	id := w.lastID
	name := "fetch"
	if req.Name != "fetch" {
		name = strings.Clone(req.Name)
	}
	e.InvokeAsync(id, name, req.Request, func(res program.WireResponse, logs []program.LogEntry, err error) {
		// On the isolate's loop: more invocations of the handle queued
		// behind this one will answer in a moment, and this answer may
		// leave with theirs.
		more := e.Queued(id) > 0
		if ok, werr := w.cache.SettledNow(id); ok {
			w.answerInvoke(frame, e, id, res, logs, err, werr, more)
			return
		}
		w.answerWhenSettled(frame, e, id, res, logs, err, more)
	})
	return true
}

// answerWhenSettled answers an invocation whose kv writes are still on
// their way, once they are applied (or carries its answer with them).
func (w *workerServer) answerWhenSettled(frame uint64, e *sandbox.Engine, id string, res program.WireResponse, logs []program.LogEntry, err error, more bool) {
	var carry func() *hostcache.Answer
	if res.Stream == 0 && res.Relay == "" {
		// A whole answer may ride with the kv writes it waits for
		// (sendCacheBatch); a streamed one's head leaves on its own,
		// as the worker must cancel its stream if a write fails.
		carry = func() *hostcache.Answer {
			return &hostcache.Answer{Tag: frame, Reply: wire.InvokeReply{Response: res, Logs: logs, Fault: wire.ToWire(err)}.EncodeFrame(), Sent: w.conn.Answered}
		}
	}
	w.cache.WhenSettled(id, carry, func(werr error) {
		w.answerInvoke(frame, e, id, res, logs, err, werr, more)
	})
}

// answerTogether runs the answers of the invocations a kv batch settled,
// their frames held back and written in one system call.
func (w *workerServer) answerTogether(answers []func()) {
	w.conn.Cork()
	defer w.conn.Uncork()
	for _, a := range answers {
		a()
	}
}

// answerInvoke writes an invocation's answer; werr is the refusal of one
// of its kv writes, which fails it.
// more: answers of the same handle are right behind (replyLater).
func (w *workerServer) answerInvoke(frame uint64, e *sandbox.Engine, id string, res program.WireResponse, logs []program.LogEntry, err, werr error, more bool) {
	if werr != nil && err == nil {
		if res.Stream != 0 {
			e.CancelStream(id, res.Stream)
		}
		res, err = program.WireResponse{}, werr
	}
	// A streamed answer's head leaves at once: its chunks follow on their
	// own calls. The frame is encoded into a buffer kept for the next
	// answer: ReplyLater copies it where it is written.
	buf := replyBuffers.Get().(*[]byte)
	b := wire.InvokeReply{Response: res, Logs: logs, Fault: wire.ToWire(err)}.AppendFrame((*buf)[:0])
	w.conn.ReplyLater(frame, wire.PathInvoke, b, more && res.Stream == 0)
	if cap(b) <= maxReplyBuffer {
		*buf = b[:0]
		replyBuffers.Put(buf)
	}
}

// replyBuffers are the buffers invocations' answers are encoded into;
// one larger than maxReplyBuffer (a large body's) is not kept.
var replyBuffers = sync.Pool{New: func() any { return new([]byte) }}

const maxReplyBuffer = 16 << 10

// hostCall asks the gateway for a host service on behalf of run id,
// through the host cache.
func (w *workerServer) hostCall(ctx context.Context, id, op string, args json.RawMessage) (json.RawMessage, error) {
	return w.cache.Call(ctx, id, op, args, func() (json.RawMessage, json.RawMessage, error) {
		return w.roundTrip(ctx, id, op, args)
	})
}

// sendCacheBatch carries what the host cache sends on its own to the
// gateway's side, with the invocations' answers it carries along, if any
// (one frame: wire.PathCacheAnswers), and answers its reply.
func (w *workerServer) sendCacheBatch(body []byte, carried []hostcache.Answer) ([]byte, error) {
	if len(carried) == 0 {
		return w.conn.Call(context.Background(), wire.PathCacheBatch, body)
	}
	answers := make([]wire.Carried, len(carried))
	for i, a := range carried {
		answers[i] = wire.Carried{Call: a.Tag, ID: a.ID, Reply: a.Reply}
	}
	return w.conn.Call(context.Background(), wire.PathCacheAnswers, wire.EncodeCarried(answers, body))
}

// systemCalls are the places of wire.MaxCalls host calls leave to the
// worker's own frames.
const systemCalls = 64

func (w *workerServer) roundTrip(ctx context.Context, id, op string, args json.RawMessage) (json.RawMessage, json.RawMessage, error) {
	select {
	case w.hostSlots <- struct{}{}:
		defer func() { <-w.hostSlots }()
	case <-ctx.Done():
		return nil, nil, fault.New(fault.Internal, "The run ended while its host call waited to be sent.")
	}
	post := wire.HostPost{ID: id, Op: op, Args: args}
	if due, ok := program.DueOf(ctx); ok {
		post.Left = max(time.Until(due).Microseconds(), 1)
	}
	body, _ := wirejson.Marshal(post)
	res, err := w.conn.Call(ctx, wire.PathHost, body)
	if errors.Is(err, wire.ErrFrameTooLarge) {
		// The sandbox bounds arguments before they get here (budgets.HostArgsBytes).
		return nil, nil, fault.New(fault.TooLarge, "The %s call's arguments are larger than the worker boundary allows.", op)
	}
	if err != nil {
		return nil, nil, fault.New(fault.Internal, "The gateway did not answer.")
	}
	var rep wire.HostReply
	if err := json.NewDecoder(bytes.NewReader(res)).Decode(&rep); err != nil {
		return nil, nil, fault.New(fault.Internal, "The gateway's answer was malformed.")
	}
	if rep.Fault != nil {
		return nil, nil, rep.Fault.Err()
	}
	return rep.Result, rep.Cache, nil
}
