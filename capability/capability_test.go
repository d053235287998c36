package capability

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/retainer-gw/retainer/budgets"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
)

func TestBlockedAddresses(t *testing.T) {
	for addr, blocked := range map[string]bool{
		"127.0.0.1": true, "127.1.2.3": true, "10.1.2.3": true, "172.16.0.1": true, "192.168.1.1": true,
		"169.254.169.254": true, "100.64.0.1": true, "0.0.0.0": true, "::1": true, "::": true,
		"fe80::1": true, "fd00:ec2::254": true, "::ffff:127.0.0.1": true, "::ffff:10.0.0.1": true,
		"64:ff9b::7f00:1": true, "64:ff9b::a00:1": true, "2002:7f00:1::": true, "224.0.0.1": true,
		"8.8.8.8": false, "1.1.1.1": false, "2606:4700:4700::1111": false, "64:ff9b::808:808": false, "::ffff:8.8.8.8": false,
	} {
		if got := Blocked(netip.MustParseAddr(addr)); got != blocked {
			t.Errorf("Blocked(%s) = %v", addr, got)
		}
	}
}

func TestAllowList(t *testing.T) {
	list := []string{"api.example.com", "*.example.org", "localhost:9000"}
	for _, c := range []struct {
		scheme, host, port string
		ok                 bool
	}{
		{"https", "api.example.com", "", true}, {"https", "API.example.com", "443", true}, {"https", "api.example.com", "8443", false},
		{"https", "a.example.org", "", true}, {"https", "a.b.example.org", "", true}, {"https", "example.org", "", false},
		{"http", "localhost", "9000", true}, {"http", "localhost", "9001", false}, {"https", "evil.com", "", false},
		{"https", "api.example.com.evil.com", "", false}, {"https", "notexample.org", "", false},
	} {
		if got := Allowed(list, c.scheme, c.host, c.port); got != c.ok {
			t.Errorf("Allowed(%s://%s:%s) = %v", c.scheme, c.host, c.port, got)
		}
	}
}

func fetchArgsJSON(u string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"method": "GET", "url": u, "headers": [][]string{}})
	return b
}

func TestFetchGuards(t *testing.T) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("inside")) }))
	defer target.Close()
	tu, _ := url.Parse(target.URL)
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://localhost:"+tu.Port()+"/", http.StatusFound)
	}))
	defer redirector.Close()
	ru, _ := url.Parse(redirector.URL)
	f := &Fetcher{}
	ctx := context.Background()
	// Without outbound_allow_private, a loopback address is refused even
	// when it is on the allow list.
	_, err := f.Fetch(ctx, []string{tu.Host}, fetchArgsJSON(target.URL))
	if err == nil || !strings.Contains(fault.As(err).Message, "internal address") {
		t.Fatalf("loopback without allow-private: %v", err)
	}
	// With it, the allow list still applies.
	res, err := f.FetchAllowingPrivate(ctx, []string{tu.Host}, fetchArgsJSON(target.URL))
	if err != nil || !strings.Contains(string(res), `"body":"inside"`) {
		t.Fatalf("allowed fetch: %s %v", res, err)
	}
	if _, err := f.FetchAllowingPrivate(ctx, []string{"example.com"}, fetchArgsJSON(target.URL)); err == nil {
		t.Fatal("a host off the allow list was fetched")
	}
	// A redirect is checked again: to a host off the list, refused.
	_, err = f.FetchAllowingPrivate(ctx, []string{ru.Host}, fetchArgsJSON(redirector.URL))
	if err == nil || !strings.Contains(err.Error(), "not in the outbound allow list") {
		t.Fatalf("redirect off the allow list: %v", err)
	}
	// ... and to an internal address, refused at the dial when private
	// addresses are not allowed (the first hop here is internal too, so the
	// refusal comes at once; the dial check applies to every hop alike).
	_, err = f.Fetch(ctx, []string{ru.Host, "localhost:" + tu.Port()}, fetchArgsJSON(redirector.URL))
	if err == nil || !strings.Contains(fault.As(err).Message, "internal address") {
		t.Fatalf("redirect to an internal address: %v", err)
	}
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	t.Setenv("HTTPS_PROXY", "http://127.0.0.1:1")
	if _, err := f.FetchAllowingPrivate(ctx, []string{tu.Host}, fetchArgsJSON(target.URL)); err != nil {
		t.Fatalf("proxy variables were not ignored: %v", err)
	}
}

// A body comes once: as Latin-1 bytes or as text, never both; text is
// held to the request bound on its UTF-8.
func TestFetchBodyAsTextOrBytes(t *testing.T) {
	var got []byte
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got, _ = io.ReadAll(r.Body) }))
	defer target.Close()
	tu, _ := url.Parse(target.URL)
	f := &Fetcher{Limits: budgets.Limits{RequestBody: 8}}
	args := func(extra map[string]any) json.RawMessage {
		m := map[string]any{"method": "POST", "url": target.URL, "headers": [][]string{}}
		for k, v := range extra {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		return b
	}
	if _, err := f.FetchAllowingPrivate(context.Background(), []string{tu.Host}, args(map[string]any{"text": "caf\u00e9"})); err != nil || string(got) != "caf\u00e9" {
		t.Fatalf("text body: %q, %v", got, err)
	}
	if _, err := f.FetchAllowingPrivate(context.Background(), []string{tu.Host}, args(map[string]any{"text": "a", "body": "b"})); fault.CodeOf(err) != fault.BadRequest {
		t.Fatalf("text and body both: %v", err)
	}
	if _, err := f.FetchAllowingPrivate(context.Background(), []string{tu.Host}, args(map[string]any{"text": "\u00e9\u00e9\u00e9\u00e9\u00e9"})); fault.CodeOf(err) != fault.TooLarge {
		t.Fatalf("10 bytes of text over a bound of 8: %v", err)
	}
}

// Port blocking (Fetch Standard): refused before any dial, and on redirects.
func TestBadPortsRefused(t *testing.T) {
	f := &Fetcher{}
	for _, u := range []string{"http://example.com:25/", "https://example.com:6667/x"} {
		if _, err := f.FetchAllowingPrivate(context.Background(), []string{"example.com:25", "example.com:6667"}, fetchArgsJSON(u)); err == nil || !strings.Contains(err.Error(), "blocked") {
			t.Fatalf("%s: %v", u, err)
		}
	}
	if BadPort("") || BadPort("8080") || !BadPort("10080") {
		t.Fatal("BadPort")
	}
}

// Unread streamed answers are a budget (docs/architecture.md, Budgets): one
// run holds at most 16,
// one tenant at most 256 across its runs; past either the fetch answers
// QUOTA_EXCEEDED to that program, while another tenant fetches as before,
// and a stream read to its end (or dropped) gives its place back.
func TestUnreadFetchStreamsAreChargedToTheirTenant(t *testing.T) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("chunked")) // no length: streamed
		w.(http.Flusher).Flush()
	}))
	defer target.Close()
	tu, _ := url.Parse(target.URL)
	h := &Host{Fetcher: &Fetcher{Streams: &FetchStreams{}}}
	call := func(tenant, run string) (json.RawMessage, error) {
		return h.Serve(context.Background(), Call{Tenant: tenant, ExecutionID: run, Op: "fetch", Args: fetchArgsJSON(target.URL),
			Grants: Grants{Capabilities: []string{"fetch"}, Outbound: []string{tu.Host}, AllowPrivate: true}})
	}
	for i := 0; i < budgets.FetchStreamsPerOwner; i++ {
		if res, err := call("mallory", "run-0"); err != nil || !strings.Contains(string(res), `"stream"`) {
			t.Fatalf("fetch %d: %s %v", i, res, err)
		}
	}
	if _, err := call("mallory", "run-0"); fault.CodeOf(err) != fault.QuotaExceeded {
		t.Fatalf("the 17th unread answer of one run: %v", err)
	}
	for run := 1; fault.CodeOf(func() error { _, err := call("mallory", fmt.Sprintf("run-%d", run)); return err }()) == ""; run++ {
		if run > budgets.FetchStreamsPerTenant {
			t.Fatal("the tenant's cap never came")
		}
	}
	if _, n := h.Fetcher.Streams.Counts("", "mallory"); n != budgets.FetchStreamsPerTenant {
		t.Fatalf("mallory holds %d streams, want the cap %d", n, budgets.FetchStreamsPerTenant)
	}
	if res, err := call("bob", "bobs-run"); err != nil || !strings.Contains(string(res), `"stream"`) {
		t.Fatalf("bob's fetch while mallory is at her cap: %s %v", res, err)
	}
	// Reading one of mallory's to its end frees its place.
	var head struct{ Stream string }
	res, _ := call("bob", "bobs-run")
	json.Unmarshal(res, &head)
	for done := false; !done; {
		out, err := h.Serve(context.Background(), Call{Tenant: "bob", ExecutionID: "bobs-run", Op: "fetch.read", Args: json.RawMessage(`{"stream":"` + head.Stream + `"}`),
			Grants: Grants{Capabilities: []string{"fetch"}}})
		if err != nil {
			t.Fatal(err)
		}
		done = strings.Contains(string(out), `"done":true`)
	}
	if owner, tenant := h.Fetcher.Streams.Counts("bobs-run", "bob"); owner != 1 || tenant != 1 {
		t.Fatalf("after one of bob's two was read: %d for the run, %d for the tenant", owner, tenant)
	}
	// A run that ends drops what it left unread: mallory's first run gives
	// its 16 places back.
	h.Fetcher.Streams.DropOwner("run-0")
	if owner, tenant := h.Fetcher.Streams.Counts("run-0", "mallory"); owner != 0 || tenant != budgets.FetchStreamsPerTenant-budgets.FetchStreamsPerOwner {
		t.Fatalf("after run-0 ended: %d for the run, %d for the tenant", owner, tenant)
	}
	if _, err := call("mallory", "run-new"); err != nil {
		t.Fatalf("mallory's fetch after a run ended: %v", err)
	}
}

// The stream budget is checked before the dial (docs/architecture.md,
// Budgets): 20 runs of one tenant each open 20 fetches at once to an
// upstream that answers a head and then holds its body open. An upstream
// once saw 276 open requests against the tenant's cap of 256; here it
// never sees more than 16 of one run or 256 of the tenant, the fetches
// past the caps throw QUOTA_EXCEEDED, and another tenant fetches as before.
func TestFetchStreamBudgetIsCheckedBeforeDialing(t *testing.T) {
	var mu sync.Mutex
	open, most := map[string]int{}, map[string]int{}
	total, mostTotal := 0, 0
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		run := r.URL.Query().Get("run")
		mu.Lock()
		open[run]++
		total++
		most[run] = max(most[run], open[run])
		mostTotal = max(mostTotal, total)
		mu.Unlock()
		defer func() {
			mu.Lock()
			open[run]--
			total--
			mu.Unlock()
		}()
		w.Write([]byte("head")) // no length: streamed
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer target.Close()
	defer target.CloseClientConnections()
	tu, _ := url.Parse(target.URL)
	h := &Host{Fetcher: &Fetcher{Streams: &FetchStreams{}}}
	call := func(tenant, run string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := h.Serve(ctx, Call{Tenant: tenant, ExecutionID: run, Op: "fetch", Args: fetchArgsJSON(target.URL + "/?run=" + run),
			Grants: Grants{Capabilities: []string{"fetch"}, Outbound: []string{tu.Host}, AllowPrivate: true}})
		return err
	}
	start := time.Now()
	const runs, each = 20, 20
	var wg sync.WaitGroup
	var opened, refused, other atomic.Int64
	for r := 0; r < runs; r++ {
		for i := 0; i < each; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch err := call("mallory", fmt.Sprintf("run-%d", r)); {
				case err == nil:
					opened.Add(1)
				case fault.CodeOf(err) == fault.QuotaExceeded:
					refused.Add(1)
				default:
					other.Add(1)
					t.Errorf("fetch: %v", err)
				}
			}()
		}
	}
	wg.Wait()
	mu.Lock()
	mostRun := 0
	for _, n := range most {
		mostRun = max(mostRun, n)
	}
	seen := mostTotal
	mu.Unlock()
	t.Logf("after %v: %d opened, %d refused; the upstream saw at most %d open requests, %d of one run", time.Since(start), opened.Load(), refused.Load(), seen, mostRun)
	if seen > budgets.FetchStreamsPerTenant || mostRun > budgets.FetchStreamsPerOwner {
		t.Fatalf("the upstream saw %d open requests of the tenant (cap %d), %d of one run (cap %d)", seen, budgets.FetchStreamsPerTenant, mostRun, budgets.FetchStreamsPerOwner)
	}
	if opened.Load() != budgets.FetchStreamsPerTenant || refused.Load() != runs*each-budgets.FetchStreamsPerTenant {
		t.Fatalf("%d opened and %d refused, want %d and %d", opened.Load(), refused.Load(), budgets.FetchStreamsPerTenant, runs*each-budgets.FetchStreamsPerTenant)
	}
	if err := call("bob", "bobs-run"); err != nil {
		t.Fatalf("bob's fetch while mallory is at her cap: %v", err)
	}
	// A whole answer gives its place back: a run at its cap of fetches on
	// their way waits for one instead of throwing.
	small := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("small")) }))
	defer small.Close()
	su, _ := url.Parse(small.URL)
	for i := 0; i < 4*budgets.FetchStreamsPerOwner; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := h.Serve(context.Background(), Call{Tenant: "carol", ExecutionID: "carols-run", Op: "fetch", Args: fetchArgsJSON(small.URL),
				Grants: Grants{Capabilities: []string{"fetch"}, Outbound: []string{su.Host}, AllowPrivate: true}}); err != nil {
				t.Errorf("carol's small fetch %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	t.Logf("carol done after %v", time.Since(start))
}

// A denial names the capability the call needed.
func TestDenialsNameTheCapability(t *testing.T) {
	h := &Host{Fetcher: &Fetcher{}}
	_, err := h.Serve(context.Background(), Call{Tenant: "alice", Registry: "apps", Op: "kv.get", Args: json.RawMessage(`{"key":"a"}`)})
	if err == nil || !strings.Contains(err.Error(), "kvRead") {
		t.Fatalf("ungranted get: %v", err)
	}
	_, err = h.Serve(context.Background(), Call{Op: "kv.put", Args: json.RawMessage(`{"key":"a","value":"b"}`), Grants: Grants{Capabilities: []string{"kvRead"}}})
	if err == nil || !strings.Contains(err.Error(), "kvWrite") {
		t.Fatalf("ungranted put: %v", err)
	}
	_, err = h.Serve(context.Background(), Call{Op: "fetch", Args: fetchArgsJSON("https://example.com/")})
	if err == nil || !strings.Contains(err.Error(), "fetch") {
		t.Fatalf("ungranted fetch: %v", err)
	}
}

// A fetch to a host that does not resolve says so, without naming the
// machine's resolver (Go's own text is "lookup x on 127.0.0.53:53: no such
// host").
func TestUnresolvableHostDoesNotNameTheResolver(t *testing.T) {
	f := &Fetcher{}
	for _, host := range []string{"no-such-host.invalid", "retainer-test-nxdomain.example"} {
		_, err := f.FetchAllowingPrivate(context.Background(), []string{host}, fetchArgsJSON("http://"+host+"/"))
		msg := fault.As(err).Message
		if fault.CodeOf(err) != fault.BadRequest || !strings.Contains(msg, "the host "+host+" could not be resolved") ||
			strings.Contains(msg, "lookup") || strings.Contains(msg, ":53") || strings.Contains(msg, " on ") {
			t.Fatalf("fetch to %s: %v", host, err)
		}
	}
}

// An answer a handler's invocation returned unread is taken by the gateway
// a moment after the answer (Take): a fetch at its handle's 16 meanwhile
// waits for that, and goes on once one is taken; with none taken it
// throws QUOTA_EXCEEDED as before.
func TestFetchAtTheOwnersCapWaitsForAnAnsweredStream(t *testing.T) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("chunked")) // no length: streamed
		w.(http.Flusher).Flush()
	}))
	defer target.Close()
	tu, _ := url.Parse(target.URL)
	h := &Host{Fetcher: &Fetcher{Streams: &FetchStreams{}}}
	call := func() (string, error) {
		res, err := h.Serve(context.Background(), Call{Tenant: "alice", ExecutionID: "handle", Op: "fetch", Args: fetchArgsJSON(target.URL),
			Grants: Grants{Capabilities: []string{"fetch"}, Outbound: []string{tu.Host}, AllowPrivate: true}})
		var head struct{ Stream string }
		json.Unmarshal(res, &head)
		return head.Stream, err
	}
	var tokens []string
	for i := 0; i < budgets.FetchStreamsPerOwner; i++ {
		token, err := call()
		if err != nil || token == "" {
			t.Fatalf("fetch %d: %q %v", i, token, err)
		}
		tokens = append(tokens, token)
	}
	got := make(chan error, 1)
	go func() { _, err := call(); got <- err }()
	// The 17th waits (a fetch that had thrown would be in got already
	// when the body is taken).
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-got:
		t.Fatalf("the 17th fetch did not wait for an answered stream: %v", err)
	default:
	}
	body, err := h.Fetcher.Streams.Take(tokens[0], "handle")
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	if err := <-got; err != nil {
		t.Fatalf("the 17th fetch once one was taken: %v", err)
	}
	// 16 unread again, none taken: the 18th throws.
	if _, err := call(); fault.CodeOf(err) != fault.QuotaExceeded {
		t.Fatalf("the 18th with 16 unread: %v", err)
	}
}
