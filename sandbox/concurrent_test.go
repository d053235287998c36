package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
)

// A handler that counts its own invocations in progress: it awaits a timer
// of ?ms milliseconds, and answers the most it saw in progress and the
// order it started in.
const inProgressHandler = `async () => { let now = 0, most = 0, starts = []; return { async fetch(req) {
	const u = new URL(req.url);
	if (u.pathname === '/loop') { while (true) {} }
	starts.push(u.searchParams.get('n'));
	now++; most = Math.max(most, now);
	await new Promise(r => setTimeout(r, Number(u.searchParams.get('ms') || 200)));
	now--;
	return Response.json({most, starts});
} } }`

func deployConcurrent(t *testing.T, e *Engine, id string, conc int, timeout time.Duration) {
	t.Helper()
	if _, err := e.Run(context.Background(), program.Job{ID: id, RetainHandles: true, Concurrency: conc, Timeout: timeout, Program: program.Program{Code: inProgressHandler}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(id) })
}

func invokeURL(e *Engine, id, url string) (string, error) {
	res, err := e.Invoke(context.Background(), id, "fetch", program.NewWireRequest("GET", url, nil, nil))
	return string(res.BodyBytes()), err
}

func TestDefaultHandlesServeOneAtATime(t *testing.T) {
	e := engine(t)
	deployConcurrent(t, e, "serial", 0, 5*time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var answers []string
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, err := invokeURL(e, "serial", "https://x.test/?ms=20")
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			answers = append(answers, body)
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, a := range answers {
		if !strings.HasPrefix(a, `{"most":1,`) {
			t.Fatalf("a default handle had several invocations in progress: %s", a)
		}
	}
}

func TestConcurrentInvocationsInterleave(t *testing.T) {
	e := engine(t)
	deployConcurrent(t, e, "conc", 32, 5*time.Second)
	var wg sync.WaitGroup
	most := make(chan string, 32)
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			body, err := invokeURL(e, "conc", fmt.Sprintf("https://x.test/?ms=800&n=%d", i))
			if err != nil {
				t.Error(err)
			}
			most <- body
		}(i)
	}
	wg.Wait()
	close(most)
	top := ""
	for b := range most {
		if strings.HasPrefix(b, `{"most":32,`) {
			top = b
		}
	}
	if top == "" {
		t.Fatal("32 invocations awaiting 800 ms never were all in progress at once")
	}
	// Starts follow arrival: invocations sent one after another start in
	// that order.
	deployConcurrent(t, e, "order", 8, 5*time.Second)
	results := make(chan string, 8)
	for i := 0; i < 8; i++ {
		go func(i int) {
			body, _ := invokeURL(e, "order", fmt.Sprintf("https://x.test/?ms=300&n=%d", i))
			results <- body
		}(i)
		time.Sleep(15 * time.Millisecond)
	}
	last := ""
	for i := 0; i < 8; i++ {
		if b := <-results; len(b) > len(last) {
			last = b
		}
	}
	if !strings.Contains(last, `"starts":["0","1","2","3","4","5","6","7"]`) {
		t.Fatalf("starts out of arrival order: %s", last)
	}
}

// A bound hit with 10 invocations in progress disposes the isolate: all
// answer the bound's error, and one only is its cause.
func TestBoundHitWithInvocationsInProgress(t *testing.T) {
	e := engine(t)
	deployConcurrent(t, e, "bound", 16, 300*time.Millisecond)
	var wg sync.WaitGroup
	errs := make(chan error, 11)
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := invokeURL(e, "bound", "https://x.test/?ms=250")
			errs <- err
		}()
	}
	time.Sleep(50 * time.Millisecond)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := invokeURL(e, "bound", "https://x.test/loop")
		errs <- err
	}()
	wg.Wait()
	close(errs)
	causes, timeouts := 0, 0
	for err := range errs {
		if errors.Is(err, fault.ErrTimeout) {
			timeouts++
			if !errors.Is(err, fault.ErrCollateral) {
				causes++
			}
		}
	}
	if timeouts != 11 || causes != 1 {
		t.Fatalf("%d of 11 answered TIMEOUT, %d as the cause (want 11 and 1)", timeouts, causes)
	}
}

// The output of an invocation's continuations is its own while it is the
// only one in progress.
func TestConcurrentInvocationLogs(t *testing.T) {
	e := engine(t)
	if _, err := e.Run(context.Background(), program.Job{ID: "conc-logs", RetainHandles: true, Concurrency: 4, Program: program.Program{Code: `async () => ({ async fetch() {
		console.log('before');
		await new Promise(r => setTimeout(r, 10));
		console.log('after');
		return new Response('ok');
	} })`}}); err != nil {
		t.Fatal(err)
	}
	defer e.Close("conc-logs")
	_, logs, err := e.InvokeWithLogs(context.Background(), "conc-logs", "fetch", program.NewWireRequest("GET", "https://x.test/", nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range logs {
		got = append(got, l.Message)
	}
	if strings.Join(got, ",") != "before,after" {
		t.Fatalf("the invocation's logs: %q", got)
	}
}

// A handler that answers at once (a Response, not a promise) is answered
// without a promise's turn (js/runtime/22-entry-points.js, invoke), and
// one that answers later, or with a thenable, or throws at once or later,
// or answers something else, answers as it did when every answer was a
// promise: the same bodies, the same faults, the same log lines, for a
// handle served one at a time and for one serving several at once (whose
// invocations answered at once must not wait for anything to settle).
func TestAnswersAtOnceAndLaterAlike(t *testing.T) {
	e := engine(t)
	code := `async () => ({ fetch(req) {
		const p = new URL(req.url).pathname;
		switch (p) {
		case '/now': return Response.json({p});
		case '/later': return Promise.resolve(Response.json({p}));
		case '/awaits': return (async () => { await new Promise(r => setTimeout(r, 1)); return Response.json({p}); })();
		case '/thenable': return { then(ok) { ok(Response.json({p})); } };
		case '/throws': throw new Error('thrown at once');
		case '/rejects': return Promise.reject(new Error('thrown later'));
		case '/not': return 'not a response';
		case '/logs': console.log('before'); Promise.resolve().then(() => console.log('queued')); return new Response('logged');
		}
	} })`
	for _, conc := range []int{1, 4} {
		id := fmt.Sprintf("alike-%d-%d", conc, time.Now().UnixNano())
		if _, err := e.Run(context.Background(), program.Job{ID: id, RetainHandles: true, Concurrency: conc, Program: program.Program{Code: code}}); err != nil {
			t.Fatal(err)
		}
		for path, want := range map[string]string{"/now": `{"p":"/now"}`, "/later": `{"p":"/later"}`, "/awaits": `{"p":"/awaits"}`, "/thenable": `{"p":"/thenable"}`} {
			done := make(chan struct{})
			var got string
			var err error
			go func() {
				got, err = invokeURL(e, id, "https://x.test"+path)
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("concurrency %d, %s: no answer", conc, path)
			}
			if err != nil || got != want {
				t.Fatalf("concurrency %d, %s: %q %v, want %q", conc, path, got, err, want)
			}
		}
		for path, msg := range map[string]string{"/throws": "thrown at once", "/rejects": "thrown later"} {
			_, err := invokeURL(e, id, "https://x.test"+path)
			wantFault(t, err, fault.HandlerError, "")
			handleLogsMu.Lock()
			logs := fmt.Sprint(handleLogs[id])
			handleLogsMu.Unlock()
			if !strings.Contains(logs, "Uncaught Error: "+msg) {
				t.Fatalf("concurrency %d, %s: the handle's log has %s", conc, path, logs)
			}
		}
		_, err := invokeURL(e, id, "https://x.test/not")
		wantFault(t, err, fault.BadResponse, "")
		res, logs, err := e.InvokeWithLogs(context.Background(), id, "fetch", program.NewWireRequest("GET", "https://x.test/logs", nil, nil))
		if err != nil || string(res.BodyBytes()) != "logged" || len(logs) != 2 || logs[0].Message != "before" || logs[1].Message != "queued" {
			t.Fatalf("concurrency %d: logs %+v, %v %q", conc, logs, err, res.BodyBytes())
		}
		e.Close(id)
	}
}

// A handler's result is awaited before its answer is read, even a
// Response it returned at once (js/runtime/22-entry-points.js, invoke), as
// workerd does: the microtasks it queued run first, so what they change of
// the Response is answered, and a kv write one of them makes is one the
// answer's output gate waits for.
func TestQueuedMicrotasksRunBeforeTheAnswerIsRead(t *testing.T) {
	e := engine(t)
	id := fmt.Sprintf("microtasks-%d", time.Now().UnixNano())
	code := `async () => ({ fetch() {
		const r = new Response('answered');
		Promise.resolve().then(() => r.headers.set('x-late', 'set by a microtask'));
		return r;
	} })`
	if _, err := e.Run(context.Background(), program.Job{ID: id, RetainHandles: true, Program: program.Program{Code: code}}); err != nil {
		t.Fatal(err)
	}
	defer e.Close(id)
	res, err := e.Invoke(context.Background(), id, "fetch", program.NewWireRequest("GET", "https://x.test/", nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, h := range res.Headers {
		if h[0] == "x-late" {
			got = h[1]
		}
	}
	if got != "set by a microtask" {
		t.Fatalf("x-late: %q (headers %v), want the microtask's", got, res.Headers)
	}
}
