package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"golang.org/x/net/http2"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/sandbox"
)

// Main runs the worker mode: it serves the gateway on the inherited
// socketpair until the connection closes, then exits. It never returns.
func Main() {
	calls, err := fileConn(fdCalls, "calls")
	if err != nil {
		fmt.Fprintln(os.Stderr, "retainer worker: not started by a gateway:", err)
		os.Exit(2)
	}
	back, err := fileConn(fdBack, "back")
	if err != nil {
		fmt.Fprintln(os.Stderr, "retainer worker: not started by a gateway:", err)
		os.Exit(2)
	}
	w := &workerServer{back: newBackChannel(back)}
	srv := &http2.Server{MaxConcurrentStreams: 4096, MaxReadFrameSize: 1 << 20}
	srv.ServeConn(calls, &http2.ServeConnOpts{Handler: w.routes()})
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
	mu     sync.Mutex // guards engine and cfg until hello has run
	engine *sandbox.Engine
	cfg    WorkerConfig
	back   *backChannel
}

func (w *workerServer) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+pathHello, w.hello)
	mux.HandleFunc("POST "+pathRun, w.run)
	mux.HandleFunc("POST "+pathInvoke, w.invoke)
	mux.HandleFunc("POST "+pathClose, w.close)
	mux.HandleFunc("POST "+pathProbe, w.probe)
	return mux
}

func reply(rw http.ResponseWriter, v any) {
	rw.Header().Set("Content-Type", "application/json")
	json.NewEncoder(rw).Encode(v)
}

func (w *workerServer) hello(rw http.ResponseWriter, r *http.Request) {
	var req helloRequest
	if err := decodeCapped(r.Body, maxWorkerPost, &req); err != nil {
		reply(rw, helloReply{Error: "bad hello: " + err.Error()})
		return
	}
	if req.Version != ProtocolVersion {
		reply(rw, helloReply{Version: ProtocolVersion, Error: "version mismatch"})
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.engine != nil {
		reply(rw, helloReply{Error: "hello twice"})
		return
	}
	c := req.Config.Engine
	w.cfg = req.Config
	engine := sandbox.New(sandbox.Config{
		Prewarm: c.Prewarm, Timeout: c.Timeout, MemoryMiB: c.MemoryMiB,
		MaxResponseBody: c.MaxResponseBody, HandleQueue: c.HandleQueue,
		JIT: c.JIT, Wasm: c.Wasm,
		OnLog:    w.back.log,
		OnLost:   w.back.lost,
		HostCall: w.back.hostCall,
	})
	// Start V8 (its platform threads) before the filters close the doors.
	if _, err := engine.Run(context.Background(), sandbox.Job{Program: sandbox.Program{Code: "() => 0"}}); err != nil {
		reply(rw, helloReply{Error: "starting V8: " + err.Error()})
		return
	}
	if err := harden(req.Config); err != nil {
		reply(rw, helloReply{Error: err.Error()})
		return
	}
	w.engine = engine
	reply(rw, helloReply{Version: ProtocolVersion, PID: os.Getpid()})
}

func (w *workerServer) ready(rw http.ResponseWriter) *sandbox.Engine {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.engine == nil {
		http.Error(rw, "no hello yet", http.StatusConflict)
	}
	return w.engine
}

func (w *workerServer) run(rw http.ResponseWriter, r *http.Request) {
	e := w.ready(rw)
	if e == nil {
		return
	}
	var job sandbox.Job
	if err := decodeCapped(r.Body, maxReplyBytes, &job); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	out, err := e.Run(r.Context(), job)
	reply(rw, runReply{Outcome: out, Fault: toWire(err)})
}

func (w *workerServer) invoke(rw http.ResponseWriter, r *http.Request) {
	e := w.ready(rw)
	if e == nil {
		return
	}
	var req invokeRequest
	if err := decodeCapped(r.Body, maxReplyBytes, &req); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	res, logs, err := e.InvokeWithLogs(r.Context(), req.ID, req.Name, req.Request)
	reply(rw, invokeReply{Response: res, Logs: logs, Fault: toWire(err)})
}

func (w *workerServer) close(rw http.ResponseWriter, r *http.Request) {
	e := w.ready(rw)
	if e == nil {
		return
	}
	var req closeRequest
	if err := decodeCapped(r.Body, maxWorkerPost, &req); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	reply(rw, closeReply{Fault: toWire(e.Close(req.ID))})
}

func (w *workerServer) probe(rw http.ResponseWriter, r *http.Request) {
	w.mu.Lock()
	enabled := w.cfg.Probe
	w.mu.Unlock()
	if !enabled {
		http.NotFound(rw, r)
		return
	}
	reply(rw, runProbe())
}

// backChannel carries the worker's own requests to the gateway. Log lines
// are sent in order by one goroutine; a full buffer drops lines rather than
// block an isolate.
type backChannel struct {
	client *http2.ClientConn
	logs   chan logPost
}

func newBackChannel(conn net.Conn) *backChannel {
	t := &http2.Transport{AllowHTTP: true}
	cc, err := t.NewClientConn(conn)
	if err != nil {
		fmt.Fprintln(os.Stderr, "retainer worker: back channel:", err)
		os.Exit(2)
	}
	b := &backChannel{client: cc, logs: make(chan logPost, 4096)}
	go b.sendLogs()
	return b
}

func (b *backChannel) log(id string, e sandbox.LogEntry) {
	if len(e.Message) > maxLogMessage {
		e.Message = e.Message[:maxLogMessage]
	}
	select {
	case b.logs <- logPost{ID: id, Entry: e}:
	default:
	}
}

func (b *backChannel) sendLogs() {
	for p := range b.logs {
		b.post(pathLog, p)
	}
}

func (b *backChannel) lost(id string, err error) {
	go b.post(pathLost, lostPost{ID: id, Fault: toWire(err)})
}

// hostCall asks the gateway for a host service on behalf of run id.
func (b *backChannel) hostCall(ctx context.Context, id, op string, args json.RawMessage) (json.RawMessage, error) {
	body, _ := json.Marshal(hostPost{ID: id, Op: op, Args: args})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://gateway"+pathHost, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	res, err := b.client.RoundTrip(req)
	if err != nil {
		return nil, fault.New(fault.Internal, "The gateway did not answer.")
	}
	defer res.Body.Close()
	var rep hostReply
	if err := decodeCapped(res.Body, maxReplyBytes, &rep); err != nil {
		return nil, fault.New(fault.Internal, "The gateway's answer was malformed.")
	}
	if rep.Fault != nil {
		return nil, rep.Fault.err()
	}
	return rep.Result, nil
}

func (b *backChannel) post(path string, v any) {
	body, _ := json.Marshal(v)
	req, _ := http.NewRequest(http.MethodPost, "http://gateway"+path, bytes.NewReader(body))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := b.client.RoundTrip(req.WithContext(ctx))
	if err == nil {
		res.Body.Close()
	}
}
