package caddymodule

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/golang-jwt/jwt/v5"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/internal/waitfor"
)

// flooder logs four lines of 16,000 '<' on every visit (/once), or from a
// timer as fast as it runs until /stop.
const flooder = `async () => { let iv = null; const big = '<'.repeat(16000); return { async fetch(request) {
	const url = request.url;
	if (url.endsWith('/stop')) { clearInterval(iv); iv = null; return new Response('stopped'); }
	if (url.endsWith('/once')) { for (let i = 0; i < 4; i++) console.log(big); return new Response('logged'); }
	if (!iv) iv = setInterval(() => { for (let i = 0; i < 4; i++) console.log(big); }, 0);
	return new Response('flooding');
} } }`

// readAllLogs reads a handle's whole log since from, page by page.
func readAllLogs(t *testing.T, tok, id, from string) []storedEntry {
	t.Helper()
	all, page, cursor := []storedEntry(nil), []storedEntry(nil), ""
	for page, cursor = readLogs(t, tok, id, "?limit=1000&since="+from); ; page, cursor = readLogs(t, tok, id, "?limit=1000&cursor="+cursor) {
		all = append(all, page...)
		if len(page) < 1000 {
			return all
		}
	}
}

// A tenant floods two handles' logs (four 16,000-character lines as fast
// as a timer runs) while a bystander's handle is visited: every one of the
// bystander's request and console entries is stored, the flooder's
// excess is left out of their own logs (a system entry says so, and the
// metric counts it), and the stored entries are not HTML-escaped.
func TestLogFloodLeavesBystanderEntries(t *testing.T) {
	logFlood(t, "")
}

// The same flood with the flooder at its log_bytes (1 MiB) within the
// first second: each commit then drops as many of its oldest entries as
// it writes, and the writer keeps up (the note of what was left out
// arrives, a read answers), while the bystander's entries are all stored;
// the flooder's stored log stays within its quota.
func TestLogFloodAtQuotaLeavesBystanderEntries(t *testing.T) {
	mallory := logFlood(t, "log_bytes 1MiB")
	// A commit writes its pages, then drops the tenant's oldest in a
	// transaction of its own (logstore/commit.go): a read between the two,
	// as the flood's last commits land, sees one page more than the quota
	// holds. What is stored once the writer has caught up must fit.
	n := 0
	waitfor.Within(10*time.Second, func() bool {
		n = len(readAllLogs(t, mallory.tok, mallory.id, "1900-01-01T00:00:00Z"))
		return n <= 1<<20/16000
	})
	if n > 1<<20/16000 {
		t.Fatalf("the flooder at a 1 MiB quota stores %d entries of 16,000 bytes in one handle's log", n)
	}
}

type flood struct{ tok, id string }

// logFlood runs the flood with extraGlobal in the retainer block, and
// answers the flooder's first handle.
func logFlood(t *testing.T, extraGlobal string) flood {
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), extraGlobal), "caddyfile")
	bob := token(t, "bob", allScopes)
	bobID := deploy(t, bob, counter, nil)
	from := time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)
	var floods []flood
	// Two handles of one tenant (the test's two workers are one a tenant).
	mallory := token(t, "mallory", allScopes)
	for i := 0; i < 2; i++ {
		floods = append(floods, flood{mallory, deploy(t, mallory, flooder, nil)})
	}
	for _, f := range floods {
		if a := do(t, "GET", site(f.id+".apps.localhost", "/"), "", nil); a.status != 200 {
			t.Fatalf("starting a flood: %d %s", a.status, a.body)
		}
	}
	visits := 0
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); {
		if got := served(t, do(t, "GET", site(bobID+".apps.localhost", fmt.Sprintf("/v%d", visits+1)), "", nil)); got != visits+1 {
			t.Fatalf("bob's visit %d served %d", visits+1, got)
		}
		visits++
		time.Sleep(5 * time.Millisecond) // a busy handle, not a flood of its own
	}
	for _, f := range floods {
		do(t, "GET", site(f.id+".apps.localhost", "/stop"), "", nil)
	}
	requests, console := 0, 0
	for _, e := range readAllLogs(t, bob, bobID, from) {
		switch {
		case e.Level == "request":
			requests++
		case e.Level == "log" && strings.HasPrefix(e.Message, "visit "):
			console++
		}
	}
	t.Logf("bob's %d visits under the flood: %d request entries, %d console entries stored", visits, requests, console)
	if requests != visits || console != visits {
		t.Fatalf("bob's %d visits under the flood stored %d request entries and %d console entries", visits, requests, console)
	}
	// The flooders' last entries and the note of what was left out are
	// written in the background: read mallory's log until the note is in.
	m := floods[0]
	var page struct{ Logs []json.RawMessage }
	noted := false
	waitfor.Within(10*time.Second, func() bool {
		a := do(t, "GET", api("/handles/"+m.id+"/logs?limit=1000&since="+from), m.tok, nil)
		if a.status != 200 || bytes.Contains(a.body, []byte(`\u003c`)) {
			t.Fatalf("mallory's log: %d, HTML-escaped %v", a.status, bytes.Contains(a.body, []byte(`\u003c`)))
		}
		page.Logs = nil
		json.Unmarshal(a.body, &page)
		for _, e := range page.Logs {
			if len(e) > 16100 {
				t.Fatalf("a stored entry of a 16,000-character line answers %d bytes", len(e))
			}
			noted = noted || bytes.Contains(e, []byte(`"level":"system"`)) && bytes.Contains(e, []byte("left out of the stored log"))
		}
		return noted
	})
	if !noted {
		t.Fatalf("mallory's log does not say entries were left out (%d entries)", len(page.Logs))
	}
	lost := regexp.MustCompile(`(?m)^retainer_log_entries_lost_total ([0-9.e+]+)$`).FindStringSubmatch(metricsText(t))
	if lost == nil {
		t.Fatal("no retainer_log_entries_lost_total metric")
	}
	if n, err := strconv.ParseFloat(lost[1], 64); err != nil || n <= 0 {
		t.Fatalf("the lost entries' metric: %q", lost[0])
	}
	return m
}

// One busy handle, alone, answers 6,000 visits from 32 connections as
// fast as they go (each visit a console and a request entry), in rounds of
// 1,000: every request entry is stored, and every console entry is stored
// or counted in the handle's note of what was left out. A round's request
// entries (~90 KiB) fit the handle's own bound for them whether or not the
// writer commits during the round (64 KiB waiting a handle, console
// entries included, held ~500 before pages, and 27-88% of a busy handle's
// request entries were left out at bench load). The rounds are the point:
// within a round nothing depends on how fast the store commits. Visited
// in one stream, the 256 KiB bound holds ~200 ms of the handle's entries
// at 14,000 visits a second, and a store whose commit took longer (a
// loaded disk's sync, the machine at load 20) lost the excess, as
// docs/logs.md says it does (3,777 of 6,000 stored, once, in CI); a
// reading of its log before each round commits what waits of it.
func TestBusyHandleKeepsItsRequestEntries(t *testing.T) {
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), ""), "caddyfile")
	alice := token(t, "alice", allScopes)
	id := deploy(t, alice, counter, nil)
	from := time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)
	const sent, round, conns = 6000, 1000, 32
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: conns,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", httpPort))
		}}}
	defer c.CloseIdleConnections()
	var next, failed atomic.Int64
	var took time.Duration
	for r := int64(1); r <= sent/round; r++ {
		readLogs(t, alice, id, "?limit=1") // commits what waits of the handle
		var wg sync.WaitGroup
		start := time.Now()
		for i := 0; i < conns; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := next.Add(1); n <= r*round; n = next.Add(1) {
					res, err := c.Get(site(id+".apps.localhost", fmt.Sprintf("/v%d", n)))
					if err != nil {
						failed.Add(1)
						continue
					}
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != 200 {
						failed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		took += time.Since(start)
		next.Store(r * round)
	}
	if failed.Load() > 0 {
		t.Fatalf("%d of %d visits failed", failed.Load(), sent)
	}
	requests, console, noted := 0, 0, 0
	leftOut := regexp.MustCompile(`^([0-9]+) log entries of this handle were left out of the stored log`)
	for _, e := range readAllLogs(t, alice, id, from) {
		switch {
		case e.Level == "request":
			requests++
		case e.Level == "log" && strings.HasPrefix(e.Message, "visit "):
			console++
		case e.Level == "system":
			if m := leftOut.FindStringSubmatch(e.Message); m != nil {
				n, _ := strconv.Atoi(m[1])
				noted += n
			}
		}
	}
	t.Logf("%d visits in rounds of %d in %v (%.0f/s): %d request entries, %d console entries stored, %d noted as left out",
		sent, round, took, float64(sent)/took.Seconds(), requests, console, noted)
	if requests != sent {
		t.Fatalf("a busy handle alone stored %d request entries of %d visits", requests, sent)
	}
	if console+noted != sent {
		t.Fatalf("%d visits: %d console entries stored and %d noted as left out", sent, console, noted)
	}
}

// A tenant whose log holds 1,000 entries of 16,000 '<' (and 250 request
// entries) opens 8 page reads of 1,000 entries and never reads them (more
// than the kernel's buffers hold): the gateway holds a part of each page
// (256 KiB), not the page (96 MB HTML-escaped before), while a bystander
// reads its own log, and cuts them off when a part is not written within
// budgets.LogPagePartWrite; the page, read, is the entries unescaped.
func TestLogPagesHeldBoundedForSlowReaders(t *testing.T) {
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), ""), "caddyfile")
	mallory, bob := token(t, "mallory", allScopes), token(t, "bob", allScopes)
	id, bobID := deploy(t, mallory, flooder, nil), deployCounter(t, bob)
	for i := 0; i < 250; i++ {
		if a := do(t, "GET", site(id+".apps.localhost", "/once"), "", nil); a.status != 200 {
			t.Fatalf("visit %d: %d", i, a.status)
		}
		readLogs(t, mallory, id, "?limit=1") // writes what waits
	}
	served(t, do(t, "GET", site(bobID+".apps.localhost", "/b1"), "", nil))

	heap := func() uint64 {
		var m goruntime.MemStats
		goruntime.GC()
		goruntime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < 8; i++ {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", httpPort))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /handles/%s/logs?limit=1000 HTTP/1.1\r\nHost: api.localhost:%d\r\nAuthorization: Bearer %s\r\n\r\n", id, httpPort, mallory)
	}
	var most uint64
	for i := 0; i < 6; i++ {
		time.Sleep(500 * time.Millisecond)
		if h := heap(); h > before && h-before > most {
			most = h - before
		}
	}
	t.Logf("8 unread pages of 1,000 entries: the gateway's heap grew at most %d KiB", most>>10)
	if most > 32<<20 {
		t.Fatalf("8 unread pages of 1,000 entries grew the gateway's heap by %d MiB", most>>20)
	}
	if page, _ := readLogs(t, bob, bobID, ""); len(page) != 2 || !strings.Contains(page[1].URL, "/b1") {
		t.Fatalf("bob's log while mallory's pages wait: %+v", page)
	}
	// Each part must be written within budgets.LogPagePartWrite: past it the readers
	// who never read are cut off, their pages unfinished.
	time.Sleep(budgets.LogPagePartWrite)
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := io.Copy(io.Discard, c)
		if ne, ok := err.(net.Error); ok && ne.Timeout() || n > 8<<20 {
			t.Fatalf("unread page %d: %d bytes, then %v (not cut off)", i, n, err)
		}
	}

	a := do(t, "GET", api("/handles/"+id+"/logs?limit=1000"), mallory, nil)
	var page struct {
		Logs   []storedEntry
		Cursor string
	}
	if a.status != 200 || json.Unmarshal(a.body, &page) != nil || len(page.Logs) != 1000 || page.Cursor == "" {
		t.Fatalf("mallory's page: %d, %d entries, %.200s", a.status, len(page.Logs), a.body)
	}
	if bytes.Contains(a.body, []byte(`\u003c`)) || len(a.body) > 1000*16100 || len(a.body) < 4<<20 {
		t.Fatalf("mallory's page of 1,000 lines of 16,000 '<' answers %d bytes", len(a.body))
	}
}

// Visitors of one of a tenant's handles, sending 2 KB query strings, cannot
// push the console entries of its other handle out of its log_bytes:
// request entries keep 256 bytes of the URL (marked) and go before console
// entries while they hold more than half. A since past 2262 answers none,
// one before 1970 all.
func TestVisitorsCannotEraseConsoleLog(t *testing.T) {
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), "log_bytes 64KiB"), "caddyfile")
	alice := token(t, "alice", allScopes)
	audit := deployCounter(t, alice)
	quiet := deploy(t, alice, `async () => ({ async fetch() { return new Response('ok') } })`, nil)
	for i := 1; i <= 20; i++ {
		served(t, do(t, "GET", site(audit+".apps.localhost", fmt.Sprintf("/audit-%d", i)), "", nil))
	}
	long := "/?q=" + strings.Repeat("v", 2000)
	for i := 0; i < 1500; i++ {
		if a := do(t, "GET", site(quiet+".apps.localhost", long+strconv.Itoa(i)), "", nil); a.status != 200 {
			t.Fatalf("visit %d: %d", i, a.status)
		}
		if i%100 == 99 {
			time.Sleep(150 * time.Millisecond) // the writer keeps up (a handle holds 64 KiB waiting)
		}
	}
	visits := 0
	for _, e := range readAllLogs(t, alice, audit, "1900-01-01T00:00:00Z") {
		if e.Level == "log" && strings.Contains(e.Message, "/audit-") {
			visits++
		}
	}
	if visits != 20 {
		t.Fatalf("after 1,500 visitors' requests the audit handle keeps %d of its 20 console entries", visits)
	}
	page, _ := readLogs(t, alice, quiet, "?limit=1")
	var raw struct {
		Logs []struct {
			URL          string
			URLTruncated bool
		}
	}
	a := do(t, "GET", api("/handles/"+quiet+"/logs?limit=1"), alice, nil)
	json.Unmarshal(a.body, &raw)
	if len(page) != 1 || len(page[0].URL) > 256 || len(raw.Logs) != 1 || !raw.Logs[0].URLTruncated {
		t.Fatalf("a request entry of a 2 KB URL: %s", a.body)
	}
	if page, _ := readLogs(t, alice, audit, "?since=2300-01-01T00:00:00Z"); len(page) != 0 {
		t.Fatalf("since 2300 answered %d entries", len(page))
	}
}

// A tail ends (event end) when the token that opened it expires, and when
// its handle ends; the ended handle's tails free their places, while a
// bystander's tail follows on.
func TestTailEndsWithTokenAndHandle(t *testing.T) {
	tester := caddytest.NewTester(t)
	// A token is accepted until its exp and the leeway: 1 s here.
	config := strings.Replace(gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), ""), "audience retainer\n", "audience retainer\n\t\tleeway 1s\n", 1)
	tester.InitServer(config, "caddyfile")
	alice, bob := token(t, "alice", allScopes), token(t, "bob", allScopes)
	id, other, bobID := deployCounter(t, alice), deployCounter(t, alice), deployCounter(t, bob)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ending := func(what string, events <-chan string) string {
		t.Helper()
		last := ""
		for timeout := time.After(15 * time.Second); ; {
			select {
			case ev, ok := <-events:
				if !ok {
					return last
				}
				last = ev
			case <-timeout:
				t.Fatalf("%s: the tail is still open after 15 s (last event %q)", what, last)
			}
		}
	}

	short := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "alice", "iss": "https://id.example.com/", "aud": "retainer",
		"exp": time.Now().Add(3 * time.Second).Unix(), "iat": time.Now().Unix(), "scope": allScopes,
	})
	shortTok, _ := short.SignedString([]byte(testSecret))
	status, events := sseTail(t, ctx, shortTok, id)
	if status != 200 {
		t.Fatalf("a tail with a 3 s token: %d", status)
	}
	if last := ending("a tail past its token", events); !strings.HasPrefix(last, "end ") || !strings.Contains(last, "token expired") {
		t.Fatalf("a tail past its token ended with %q", last)
	}

	status, bobEvents := sseTail(t, ctx, bob, bobID)
	if status != 200 {
		t.Fatalf("bob's tail: %d", status)
	}
	var tails []<-chan string
	for i := 0; i < 10; i++ {
		status, events := sseTail(t, ctx, alice, id)
		if status != 200 {
			t.Fatalf("alice's tail %d: %d", i, status)
		}
		tails = append(tails, events)
	}
	if a := do(t, "DELETE", api("/handles/"+id), alice, nil); a.status != 204 {
		t.Fatalf("delete: %d %s", a.status, a.body)
	}
	for i, events := range tails {
		if last := ending("a tail of a deleted handle", events); !strings.HasPrefix(last, "end ") || !strings.Contains(last, "handle ended") {
			t.Fatalf("tail %d of a deleted handle ended with %q", i, last)
		}
	}
	if status, _ := sseTail(t, ctx, alice, other); status != 200 {
		t.Fatalf("a tail of alice's other handle after the deleted one's ended: %d", status)
	}
	served(t, do(t, "GET", site(bobID+".apps.localhost", "/after"), "", nil))
	select {
	case ev := <-bobEvents:
		if !strings.HasPrefix(ev, "log ") || !strings.Contains(ev, "/after") {
			t.Fatalf("bob's tail: %s", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("bob's tail saw nothing of his visit")
	}
}
