package caddymodule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/waitfor"
)

// procStatus reads a field of /proc/<pid>/status in KiB ("self" for the
// test process, which is the gateway: caddytest runs it in-process).
func procStatus(t *testing.T, pid, field string) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in /proc/%s/status", field, pid)
	return 0
}

// resetPeak makes VmHWM start again from the current RSS (clear_refs 5),
// after the collector has given back what it can.
func resetPeak(t *testing.T) int64 {
	t.Helper()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS: %v", err)
	}
	return procStatus(t, "self", "VmRSS")
}

// Three concurrent chains of 32 steps, each step answering ~8 MiB (a
// request of a few hundred bytes): each answer holds at most
// max_response_body in all, the steps past it carry the cut note, the
// gateway's peak RSS stays far from what 3 × 33 × 8 MiB answers cost, and
// bob's counter counts on.
func TestChainAnswersStayWithinTheResponseBound(t *testing.T) {
	b, mallory := attacked(t, "timeout 10s\n")
	const bound = 8 << 20
	// The answer's fields, step names and notes take room too: a result
	// 32 KiB short of the bound is answered whole.
	const whole = bound - 32<<10
	steps := []map[string]any{{"name": "s1", "body": fmt.Sprintf("return 'x'.repeat(%d)", whole)}}
	for i := 2; i <= 32; i++ {
		steps = append(steps, map[string]any{"name": fmt.Sprintf("s%d", i), "body": "return input"})
	}
	body := mustJSON(map[string]any{"steps": steps})
	long := &http.Client{Timeout: 2 * time.Minute, Transport: client.Transport}

	base := resetPeak(t)
	type got struct {
		status int
		size   int64
		head   []byte // at most bound + 1 MiB of the answer
		err    error
	}
	answers := make([]got, 3)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", api("/run/chain"), bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+mallory)
			res, err := long.Do(req)
			if err != nil {
				answers[i].err = err
				return
			}
			defer res.Body.Close()
			// The test reads no more than a bounded answer whole, so that
			// its own memory is not what is measured.
			head, _ := io.ReadAll(io.LimitReader(res.Body, bound+1<<20))
			rest, err := io.Copy(io.Discard, res.Body)
			answers[i] = got{res.StatusCode, int64(len(head)) + rest, head, err}
		}()
	}
	wg.Wait()
	peak := procStatus(t, "self", "VmHWM")
	t.Logf("the gateway's RSS: %d MiB before, peak %d MiB during three chains (+%d MiB)", base>>10, peak>>10, (peak-base)>>10)
	for i, a := range answers {
		if a.err != nil {
			t.Fatalf("chain %d: %v", i, a.err)
		}
		t.Logf("chain %d: %d, %d bytes", i, a.status, a.size)
		if a.status != 200 || a.size > bound {
			t.Fatalf("chain %d answered %d with %d bytes, over the %d byte bound: %.300s", i, a.status, a.size, bound, a.head)
		}
		var ans chainAnswer
		if err := json.Unmarshal(a.head, &ans); err != nil {
			t.Fatalf("chain %d: not JSON: %v", i, err)
		}
		// The chain's result is whole; the steps' results past the bound
		// carry the note.
		if len(ans.Steps) != 32 || len(ans.Result) != whole+2 {
			t.Fatalf("chain %d: %d steps, a result of %d bytes", i, len(ans.Steps), len(ans.Result))
		}
		cut := 0
		for _, s := range ans.Steps {
			if strings.Contains(string(s.Result), "cut from the answer") && strings.Contains(string(s.Result), "max_response_body") {
				cut++
			}
		}
		if cut < 30 {
			t.Fatalf("chain %d: %d steps' results carry the cut note, want at least 30", i, cut)
		}
	}
	// Far from the 4 GiB three such chains once took; a gateway that held
	// every step's result would hold 3 × 32 × 8 MiB.
	if grew := (peak - base) << 10; grew > 768<<20 {
		t.Fatalf("the gateway's peak RSS grew by %d MiB during three chains", grew>>20)
	}
	b.check("three chains answering 8 MiB a step")
}

// Step names are answered too, and counted: 32 steps named with 30 KB each
// and a last result of 8 MiB less 200 bytes once answered 9,350,237 bytes
// against a bound of 8,388,608. Answered, and failing with a long message
// after a long result, the chain stays within the bound; the names are
// whole (they are charged first), the result that does not fit is cut.
func TestChainAnswersCountStepNames(t *testing.T) {
	b, mallory := attacked(t, "timeout 10s\n")
	const bound = 8 << 20
	name := strings.Repeat("N", 30000)
	chain := func(first, last string) []map[string]any {
		steps := []map[string]any{{"name": name + "0", "body": first}}
		for i := 1; i < 31; i++ {
			steps = append(steps, map[string]any{"name": name + fmt.Sprint(i), "body": "return 1"})
		}
		return append(steps, map[string]any{"name": name + "last", "body": last})
	}
	for _, c := range []struct {
		what        string
		first, last string
		status      int
	}{
		{"a last result of 8 MiB less 200 bytes", "return 1", fmt.Sprintf("return 'x'.repeat(%d)", bound-200), 200},
		{"a first result of 7 MiB and a failing last step", "return 'x'.repeat(7 << 20)", "throw new Error('e'.repeat(1 << 20))", 500},
	} {
		a := do(t, "POST", api("/run/chain"), mallory, mustJSON(map[string]any{"steps": chain(c.first, c.last)}))
		t.Logf("%s: %d, %d bytes", c.what, a.status, len(a.body))
		if len(a.body) > bound {
			t.Fatalf("%s: answered %d bytes, over the %d byte bound", c.what, len(a.body), bound)
		}
		var ans struct {
			Steps []stepAnswer `json:"steps"`
		}
		if err := json.Unmarshal(a.body, &ans); err != nil || len(ans.Steps) != 32 {
			t.Fatalf("%s: %d %d steps %v: %.300s", c.what, a.status, len(ans.Steps), err, a.body)
		}
		for i, s := range ans.Steps {
			if !strings.HasPrefix(s.Name, name) {
				t.Fatalf("%s: step %d's name: %.100s", c.what, i, s.Name)
			}
		}
		if c.status == 200 && a.status != 200 {
			t.Fatalf("%s: %d %.300s", c.what, a.status, a.body)
		}
	}
	b.check("chains with long step names")
}

// A computation that holds ArrayBuffers and typed arrays past its 64 MiB
// bound answers MEMORY (they count against it: sandbox/bufferpool.cc),
// its worker lives on and holds about the bound, not the 384 MiB asked
// for, and bob's counter counts on.
func TestArrayBuffersPastTheBoundAnswerMemory(t *testing.T) {
	b, mallory := attacked(t, "timeout 10s\n")
	// Mallory's worker is up before the peaks are reset.
	if a := execute(t, mallory, map[string]any{"code": "async () => 1"}); a.status != 200 {
		t.Fatalf("mallory's first run: %d %s", a.status, a.body)
	}
	pids := workerPIDs(t)
	base := map[int]int64{}
	for _, pid := range pids {
		if pid == 0 {
			continue
		}
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
			t.Skipf("cannot reset a worker's peak RSS: %v", err)
		}
		base[pid] = procStatus(t, strconv.Itoa(pid), "VmRSS")
	}
	for _, code := range []string{
		`async () => { const keep = []; for (let i = 0; i < 384; i++) keep.push(new Uint8Array(1 << 20).fill(7)); return keep.length }`,
		`async () => { const keep = []; for (let i = 0; i < 384; i++) { try { keep.push(new Uint8Array(new ArrayBuffer(1 << 20)).fill(7)) } catch {} } return keep.length }`,
	} {
		a := execute(t, mallory, map[string]any{"code": code})
		if a.status != 507 || a.code() != "MEMORY" || !strings.Contains(string(a.body), "Execution exceeded its 64 MiB memory bound. Hold less in memory per run.") {
			t.Fatalf("ArrayBuffers past the bound answered %d %s", a.status, a.body)
		}
		b.check("ArrayBuffers past the bound")
	}
	var grew int64
	for pid, rss := range base {
		peak := procStatus(t, strconv.Itoa(pid), "VmHWM")
		t.Logf("worker %d: RSS %d MiB before, peak %d MiB (+%d MiB)", pid, rss>>10, peak>>10, (peak-rss)>>10)
		grew = max(grew, peak-rss)
	}
	if grew>>10 > 160 {
		t.Fatalf("a worker grew by %d MiB under a 64 MiB bound", grew>>10)
	}
	// The worker that ran them still runs computations.
	if a := execute(t, mallory, map[string]any{"code": "async () => new Uint8Array(1 << 20).length"}); a.status != 200 || fmt.Sprint(a.json(t)["result"]) != "1.048576e+06" {
		t.Fatalf("after: %d %s", a.status, a.body)
	}
}

// One tenant whose computations hold most of worker_memory cannot make
// newcomers of other tenants wait out their bound (docs/architecture.md,
// "Budgets"): past tenant_worker_memory, while they wait, its own calls
// wait instead, its worker drains and is taken for them. Bob's counter
// counts on.
func TestHeavyTenantLeavesRoomForNewcomers(t *testing.T) {
	b, mallory := attacked(t, "workers auto\nworker_memory 640MiB\ntimeout 10s\n")
	heavy := `async () => { const a = new Uint8Array(56 << 20).fill(1); await new Promise(r => setTimeout(r, 1500)); return a[1] }`
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[string]int{}
	for i := 0; i < 10; i++ {
		untilStopped(&wg, stop, func() {
			a := execute(t, mallory, map[string]any{"code": heavy, "timeoutMs": 5000})
			mu.Lock()
			outcomes[fmt.Sprint(a.status, " ", a.code())]++
			mu.Unlock()
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
		t.Logf("mallory's calls: %v", outcomes)
		for k := range outcomes {
			if k != "200 " && k != "503 OVERLOADED" {
				t.Errorf("mallory's call answered %s", k)
			}
		}
	}()
	// Mallory's workers fill up and are measured (every second): wait
	// until what they hold is past her share (a quarter of 640 MiB).
	held := int64(0)
	waitfor.Within(10*time.Second, func() bool { held = tenantPSS(t, "mallory"); return held >= 160<<20 })
	t.Logf("mallory's workers hold %d MiB before the newcomers", held>>20)
	var used string
	if a := do(t, "GET", site("anon.localhost", "/health"), "", nil); a.status == 200 {
		used = string(a.body)
	}
	t.Logf("before the newcomers: %.400s", used)

	var nw sync.WaitGroup
	answers := make([]answer, 6)
	took := make([]time.Duration, len(answers))
	for i := range answers {
		nw.Add(1)
		go func() {
			defer nw.Done()
			tok := token(t, fmt.Sprintf("newcomer-%d", i), allScopes)
			start := time.Now()
			answers[i] = execute(t, tok, map[string]any{"code": "async () => 6 * 7", "timeoutMs": 8000})
			took[i] = time.Since(start)
		}()
	}
	nw.Wait()
	overloaded := 0
	for i, a := range answers {
		if a.status != 200 {
			// How long it took and the pool after say which wait it was
			// (for a worker within the bound, a start, or the run).
			t.Logf("newcomer %d: %d after %v: %s", i, a.status, took[i].Round(time.Millisecond), a.body)
			overloaded++
		}
	}
	if overloaded > 0 {
		if a := do(t, "GET", site("anon.localhost", "/health"), "", nil); a.status == 200 {
			t.Logf("after the newcomers: %.600s", a.body)
		}
		t.Fatalf("%d of %d newcomers were refused beside a tenant holding most of worker_memory", overloaded, len(answers))
	}
	b.check("a tenant holding most of worker_memory")
}

// The answer budget: results and logs are charged as they come; the
// chain's result comes first, making room by cutting the last step's copy
// of it, then the steps' results from the first on.
func TestAnswerBudget(t *testing.T) {
	res := func(n int) json.RawMessage { return json.RawMessage(`"` + strings.Repeat("x", n-2) + `"`) }
	b := &answerBudget{left: 100, bound: 100}
	steps := []stepAnswer{}
	for _, n := range []int{30, 30, 50} {
		r, kept := b.result(res(n))
		steps = append(steps, stepAnswer{Result: r, cut: !kept})
	}
	if steps[2].cut != true || steps[0].cut || steps[1].cut || b.left != 40 {
		t.Fatalf("charged: %+v, %d left", steps, b.left)
	}
	if !strings.Contains(string(steps[2].Result), "result of 50 bytes cut from the answer") {
		t.Fatalf("the cut note: %s", steps[2].Result)
	}
	// The chain's result (the last step's, 50 bytes) takes the first
	// step's room.
	if got := chainResult(b, steps, res(50)); len(got) != 50 || !steps[0].cut || steps[1].cut {
		t.Fatalf("the chain's result: %d bytes; steps %+v", len(got), steps)
	}
	// A last step kept whole gives its copy up for the chain's result.
	b = &answerBudget{left: 100, bound: 100}
	r, _ := b.result(res(60))
	steps = []stepAnswer{{Result: r}}
	if got := chainResult(b, steps, res(60)); len(got) != 60 || string(steps[0].Result) != `"[the chain's result: see result]"` {
		t.Fatalf("the chain's result: %d bytes; steps %+v", len(got), steps)
	}
	// Small results are answered twice, as before.
	b = &answerBudget{left: 100, bound: 100}
	r, _ = b.result(res(10))
	steps = []stepAnswer{{Result: r}}
	if got := chainResult(b, steps, res(10)); len(got) != 10 || len(steps[0].Result) != 10 {
		t.Fatalf("a small result: %s; steps %+v", got, steps)
	}
	// Logs past what is left end with a note.
	b = &answerBudget{left: 20, bound: 20}
	if got := b.logs([]string{"0123456789", "0123456789", "x"}); len(got) != 2 || !strings.Contains(got[1], "2 log lines cut") {
		t.Fatalf("logs: %q", got)
	}
	// A text (a step's name, an error's message) is charged, or cut to a
	// note past what is left.
	b = &answerBudget{left: 20, bound: 20}
	if got := b.text("step name", "0123456789"); got != "0123456789" || b.left != 8 {
		t.Fatalf("a name that fits: %q, %d left", got, b.left)
	}
	if got := b.text("step name", "0123456789"); !strings.Contains(got, "step name of 10 bytes cut") || b.left != 8 {
		t.Fatalf("a name past what is left: %q, %d left", got, b.left)
	}
}

// tenantPSS is what tenant's workers hold as the pool last measured it
// (GET /retainer/workers on the admin listener).
func tenantPSS(t *testing.T, tenant string) int64 {
	t.Helper()
	res, err := http.Get(adminURL("/retainer/workers"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct{ Workers []adminWorker }
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, w := range out.Workers {
		if w.Tenant == tenant {
			sum += w.PSSBytes
		}
	}
	return sum
}
