package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/gctarget"
	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/sandbox"
)

// Main runs the worker mode: it serves the gateway on the inherited
// socketpair until the connection closes, then exits. It never returns.
func Main() {
	conn, err := fileConn(fdConn, "gateway")
	if err != nil {
		fmt.Fprintln(os.Stderr, "retainer worker: not started by a gateway:", err)
		os.Exit(2)
	}
	w := &workerServer{kv: newKVCache()}
	w.kv.send = w.sendWrites
	w.kv.answering = w.answerTogether
	w.conn = newRPC(conn, maxGatewayFrame, helloFrame, w.handle, func(reason string) {
		fmt.Fprintln(os.Stderr, "retainer worker: the gateway sent", reason)
	})
	w.conn.tooLarge = tooLargeReply
	w.conn.take = w.takeInvoke
	w.logs = make(chan logPost, 4096)
	go w.sendLogs()
	w.conn.start()
	<-w.conn.Done()
	// The gateway closed the connection (or died): nothing is left to serve.
	os.Exit(0)
}

func fileConn(fd uintptr, name string) (net.Conn, error) {
	f := os.NewFile(fd, name)
	if f == nil {
		return nil, fmt.Errorf("fd %d is not open", fd)
	}
	defer f.Close()
	return net.FileConn(f)
}

// workerServer answers the gateway's calls inside the worker.
type workerServer struct {
	conn *rpcConn
	logs chan logPost
	kv   *kvCache // kv reads answered without a round trip (kvcache.go)

	mu     sync.Mutex // guards engine and cfg until hello has run
	engine *sandbox.Engine
	cfg    WorkerConfig
}

func (w *workerServer) handle(ctx context.Context, path string, body []byte) ([]byte, error) {
	var reply any
	switch path {
	case pathHello:
		reply = w.hello(body)
	case pathRun, pathInvoke, pathClose, pathStreamRead, pathStreamCancel:
		e := w.ready()
		if e == nil {
			return nil, fmt.Errorf("%s before hello", path)
		}
		switch path {
		case pathRun:
			var job sandbox.Job
			if err := json.Unmarshal(body, &job); err != nil {
				return nil, err
			}
			out, err := e.Run(ctx, job)
			if werr := w.kv.settle(job.ID); werr != nil && err == nil {
				if out.Retained {
					e.Close(job.ID)
				}
				out, err = sandbox.Outcome{Logs: out.Logs}, werr
			}
			reply = runReply{Outcome: out, Fault: toWire(err)}
		case pathInvoke:
			// takeInvoke takes every well-formed invocation on the read loop.
			return nil, errors.New("a malformed invoke frame")
		case pathClose:
			var req closeRequest
			if err := json.Unmarshal(body, &req); err != nil {
				return nil, err
			}
			reply = closeReply{Fault: toWire(e.Close(req.ID))}
		case pathStreamRead, pathStreamCancel:
			var req streamRequest
			if err := json.Unmarshal(body, &req); err != nil {
				return nil, err
			}
			if path == pathStreamCancel {
				e.CancelStream(req.ID, req.Stream)
				reply = streamReply{Done: true}
				break
			}
			wait := min(time.Duration(req.WaitMs)*time.Millisecond, streamWait)
			data, done, err := e.ReadStream(ctx, req.ID, req.Stream, wait)
			if werr := w.kv.settle(req.ID); werr != nil && err == nil {
				e.CancelStream(req.ID, req.Stream)
				data, done, err = nil, true, werr
			}
			reply = streamReply{Data: data, Done: done, Fault: toWire(err)}
		}
	case pathKVInvalidate:
		var m kvInvalidate
		if err := json.Unmarshal(body, &m); err != nil {
			return nil, err
		}
		w.kv.invalidate(m)
		reply = struct{}{}
	case pathProbe:
		w.mu.Lock()
		enabled := w.cfg.Probe
		w.mu.Unlock()
		if !enabled {
			return nil, fmt.Errorf("probe is not enabled")
		}
		reply = runProbe()
	case pathProbeForeign:
		w.mu.Lock()
		enabled := w.cfg.Probe
		w.mu.Unlock()
		if !enabled {
			return nil, fmt.Errorf("probe is not enabled")
		}
		foreignSyscall(string(body))
		reply = map[string]string{"result": "ALLOWED"}
	default:
		return nil, fmt.Errorf("unknown call %q", path)
	}
	if enc, ok := reply.(frameEncoder); ok {
		return enc.encodeFrame(), nil
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
	case pathInvoke:
		return invokeReply{Fault: toWire(fault.New(fault.BadResponse, "%s", msg))}.encodeFrame()
	case pathRun:
		reply = runReply{Outcome: sandbox.Outcome{Logs: []string{}}, Fault: toWire(fault.New(fault.Runtime, "%s", msg))}
	default:
		reply = closeReply{Fault: toWire(fault.New(fault.Internal, "%s", msg))}
	}
	b, _ := wirejson.Marshal(reply)
	return b
}

func (w *workerServer) hello(body []byte) helloReply {
	var req helloRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return helloReply{Error: "bad hello: " + err.Error()}
	}
	if req.Version != ProtocolVersion {
		return helloReply{Version: ProtocolVersion, Error: "version mismatch"}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.engine != nil {
		return helloReply{Error: "hello twice"}
	}
	// The worker collects as the gateway does: a gateway at Go's default
	// leaves its workers there too.
	gctarget.Apply(req.Config.GCPercent, req.Config.GCHeadroom)
	c := req.Config.Engine
	w.cfg = req.Config
	if req.Config.FrameCap > 0 {
		w.conn.peerMax.Store(int64(req.Config.FrameCap))
	}
	engine := sandbox.New(sandbox.Config{
		Prewarm: c.Prewarm, Timeout: c.Timeout, MemoryMiB: c.MemoryMiB,
		MaxResponseBody: c.MaxResponseBody, MaxRequestBody: c.MaxRequestBody, HandleQueue: c.HandleQueue,
		JIT: c.JIT, Wasm: c.Wasm,
		OnLog:       w.log,
		OnLost:      w.lost,
		HostCall:    w.hostCall,
		HostCallNow: w.kv.now,
	})
	// Start V8 (its platform threads) before the filters close the doors.
	if _, err := engine.Run(context.Background(), sandbox.Job{Program: sandbox.Program{Code: "() => 0"}}); err != nil {
		return helloReply{Error: "starting V8: " + err.Error()}
	}
	if err := harden(req.Config); err != nil {
		return helloReply{Error: err.Error()}
	}
	w.engine = engine
	if on, err := sandbox.SnapshotStatus(); !on {
		// Slower isolates, the same behaviour: worth an operator's eye.
		// The worker's stderr is the gateway's log ("worker N: ...").
		fmt.Fprintf(os.Stderr, "isolates install the compiled runtime: %v\n", err)
	}
	return helloReply{Version: ProtocolVersion, PID: os.Getpid()}
}

func (w *workerServer) ready() *sandbox.Engine {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.engine
}

// log queues a handler's console line for the gateway; a full queue drops
// lines rather than block an isolate.
func (w *workerServer) log(id string, e sandbox.LogEntry) {
	e.Message, _ = wirejson.Cut(e.Message, maxLogMessage)
	select {
	case w.logs <- logPost{ID: id, Entry: e}:
	default:
	}
}

func (w *workerServer) sendLogs() {
	for p := range w.logs {
		w.post(pathLog, p)
	}
}

func (w *workerServer) lost(id string, err error) {
	go w.post(pathLost, lostPost{ID: id, Fault: toWire(err)})
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
	if path != pathInvoke {
		return false
	}
	e := w.ready()
	if e == nil {
		return false
	}
	var req invokeRequest
	if req.decodeFrame(payload) != nil {
		return false
	}
	e.InvokeAsync(req.ID, req.Name, req.Request, func(res sandbox.WireResponse, logs []sandbox.LogEntry, err error) {
		// On the isolate's loop: more invocations of the handle queued
		// behind this one will answer in a moment, and this answer may
		// leave with theirs.
		more := e.Queued(req.ID) > 0
		w.kv.whenSettled(req.ID, func(werr error) {
			w.answerInvoke(frame, e, req.ID, res, logs, err, werr, more)
		})
	})
	return true
}

// answerTogether runs the answers of the invocations a kv batch settled,
// their frames held back and written in one system call.
func (w *workerServer) answerTogether(answers []func()) {
	w.conn.cork()
	defer w.conn.uncork()
	for _, a := range answers {
		a()
	}
}

// answerInvoke writes an invocation's answer; werr is the refusal of one
// of its kv writes, which fails it.
// more: answers of the same handle are right behind (replyLater).
func (w *workerServer) answerInvoke(frame uint64, e *sandbox.Engine, id string, res sandbox.WireResponse, logs []sandbox.LogEntry, err, werr error, more bool) {
	if werr != nil && err == nil {
		if res.Stream != 0 {
			e.CancelStream(id, res.Stream)
		}
		res, err = sandbox.WireResponse{}, werr
	}
	// A streamed answer's head leaves at once: its chunks follow on their
	// own calls.
	w.conn.replyLater(frame, pathInvoke, invokeReply{Response: res, Logs: logs, Fault: toWire(err)}.encodeFrame(), more && res.Stream == 0)
}

// hostCall asks the gateway for a host service on behalf of run id; kv
// calls go through the read cache.
func (w *workerServer) hostCall(ctx context.Context, id, op string, args json.RawMessage) (json.RawMessage, error) {
	switch op {
	case "kv.get", "kv.put", "kv.delete":
		return w.kv.call(ctx, id, op, args, func() (json.RawMessage, *kvHint, error) {
			return w.roundTrip(ctx, id, op, args)
		})
	}
	// Nothing leaves on the run's behalf before its writes are applied.
	if op == "kv.list" {
		w.kv.drain()
	}
	if err := w.kv.settle(id); err != nil {
		return nil, err
	}
	res, _, err := w.roundTrip(ctx, id, op, args)
	return res, err
}

// sendWrites applies a batch of queued kv writes at the gateway, in order;
// it answers how many were applied and why the next was not.
func (w *workerServer) sendWrites(writes []kvWrite) (int, error) {
	res, err := w.conn.Call(context.Background(), pathKVBatch, kvBatch{Writes: writes}.encodeFrame())
	if err != nil {
		return 0, fault.New(fault.Internal, "The gateway did not answer.")
	}
	var rep hostReply
	if err := json.Unmarshal(res, &rep); err != nil {
		return 0, fault.New(fault.Internal, "The gateway's answer was malformed.")
	}
	if rep.Fault != nil {
		return rep.Applied, rep.Fault.err()
	}
	return len(writes), nil
}

func (w *workerServer) roundTrip(ctx context.Context, id, op string, args json.RawMessage) (json.RawMessage, *kvHint, error) {
	body, _ := wirejson.Marshal(hostPost{ID: id, Op: op, Args: args})
	res, err := w.conn.Call(ctx, pathHost, body)
	if errors.Is(err, errFrameTooLarge) {
		// The sandbox bounds arguments before they get here (HostArgsCap).
		return nil, nil, fault.New(fault.TooLarge, "The %s call's arguments are larger than the worker boundary allows.", op)
	}
	if err != nil {
		return nil, nil, fault.New(fault.Internal, "The gateway did not answer.")
	}
	var rep hostReply
	if err := json.NewDecoder(bytes.NewReader(res)).Decode(&rep); err != nil {
		return nil, nil, fault.New(fault.Internal, "The gateway's answer was malformed.")
	}
	if rep.Fault != nil {
		return nil, nil, rep.Fault.err()
	}
	return rep.Result, rep.KV, nil
}
