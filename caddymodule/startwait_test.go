package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// A reload's new HTTP server may take connections before the new config's
// retainer app has started (Caddy starts its apps in no set order): on
// the running config's store such a request is served at once from the
// runtime and registry that config's handlers use (App.liveRegistry);
// elsewhere it waits for the start (App.awaitStart); it was answered 503
// "starting"; so did a failed reload's (now refused while it provisions
// where it can be: a store under a file, every other reload; and a
// reload that fails in another app's Start, failStart, twice a reload,
// is served from the running config's runtime whichever app Caddy
// started first). Four visitors of a bystander's counter, each visit on a
// new connection, through 20 reloads (every other one naming the store
// through a linked folder) and 40 failed ones: every answer is 200 with a
// count no other visit got, and the count after is one past the visits
// served, so the handle kept its isolate. A connection Linux drops as a
// reload closes its old listener (docs/decisions.md, "One gateway a store
// and a port") never reached the handle, or at most those reached it.
func TestAReloadAnswersNoneStarting(t *testing.T) {
	dir := t.TempDir()
	config := gatewayConfig(filepath.Join(dir, "registry.db"), "isolation shared")
	tester := caddytest.NewTester(t)
	tester.InitServer(config, "caddyfile")
	// Every other reload names the store through a linked folder: the
	// same runtime (canonicalFile), no start of its own.
	link := filepath.Join(t.TempDir(), "linked")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	id := deployCounter(t, token(t, "bystander", allScopes))
	url := site(id+".apps.localhost", "/")
	first := served(t, do(t, "GET", url, "", nil))
	// A config whose store OpenBolt cannot make (under a regular file) is
	// refused while it provisions (store.CheckBolt), before its listeners
	// take a connection: it failed in its app's Start, and its listeners'
	// visitors waited for the start given up, then answered 503 (the
	// eighth red team's F3).
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	var cfgs [4][]byte
	for i, c := range []string{config, gatewayConfig(filepath.Join(link, "registry.db"), "isolation shared"), gatewayConfig(filepath.Join(file, "registry.db"), "isolation shared"), config} {
		cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		cfgs[i] = cfg
	}
	// The running config with an app whose Start fails (failStart): the
	// reload fails in Caddy's start of its apps, which is in no set
	// order, so its HTTP app may have taken connections first.
	var withFail map[string]any
	if err := json.Unmarshal(cfgs[3], &withFail); err != nil {
		t.Fatal(err)
	}
	withFail["apps"].(map[string]any)["retainer_test_fail_start"] = map[string]any{}
	cfgs[3], _ = json.Marshal(withFail)
	tr := client.Transport.(*http.Transport).Clone()
	tr.DisableKeepAlives = true
	visitors := &http.Client{Timeout: 20 * time.Second, Transport: tr}
	var (
		mu      sync.Mutex
		seen    = map[int]bool{}
		bad     []string
		dropped int
		drops   []string
		wg      sync.WaitGroup
	)
	stop := make(chan struct{})
	for range 4 {
		untilStopped(&wg, stop, func() {
			res, err := visitors.Get(url)
			if err != nil {
				mu.Lock()
				dropped++
				if len(drops) < 3 {
					drops = append(drops, err.Error())
				}
				mu.Unlock()
				return
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			var m struct{ Served int }
			json.Unmarshal(body, &m)
			mu.Lock()
			switch {
			case res.StatusCode != 200:
				bad = append(bad, fmt.Sprintf("%d %s", res.StatusCode, body))
			case seen[m.Served]:
				bad = append(bad, fmt.Sprintf("count %d twice", m.Served))
			default:
				seen[m.Served] = true
			}
			mu.Unlock()
		})
	}
	for i := range 20 {
		if err := caddy.Load(cfgs[i%2], true); err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("reload %d: %v", i, err)
		}
		time.Sleep(20 * time.Millisecond)
		for range 2 {
			if err := caddy.Load(cfgs[3], true); err == nil || !strings.Contains(err.Error(), errFailStart.Error()) {
				close(stop)
				wg.Wait()
				t.Fatalf("reload %d with an app that fails to start: %v", i, err)
			}
		}
		if i%2 == 1 {
			err := caddy.Load(cfgs[2], true)
			if err == nil || !strings.Contains(err.Error(), "creating the store's directory") || !strings.Contains(err.Error(), "provision retainer") || strings.Contains(err.Error(), "start:") {
				close(stop)
				wg.Wait()
				t.Fatalf("reload %d onto a store under a file: not refused while it provisions: %v", i, err)
			}
		}
	}
	close(stop)
	wg.Wait()
	after := served(t, do(t, "GET", url, "", nil))
	t.Logf("%d visits served through 20 reloads, %d connections dropped %q", len(seen), dropped, drops)
	if len(bad) > 0 {
		t.Fatalf("%d answers not a new count, the first %q", len(bad), bad[0])
	}
	if lost := after - first - 1 - len(seen); len(seen) == 0 || lost < 0 || lost > dropped {
		t.Fatalf("the count went from %d to %d through %d visits served (%d dropped)", first, after, len(seen), dropped)
	}
}

// failStart is a Caddy app whose Start fails after a moment, as another
// app's may (a certificate it cannot load, a port of its own): a reload
// with it fails after Caddy's HTTP app may have started its listeners
// (apps start in no set order) and before the retainer app has.
type failStart struct{}

var errFailStart = errors.New("this app never starts")

func (failStart) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "retainer_test_fail_start", New: func() caddy.Module { return new(failStart) }}
}

// Provision loads the HTTP app first, so that it is among the apps Caddy
// may start before this one.
func (failStart) Provision(ctx caddy.Context) error {
	_, err := ctx.App("http")
	return err
}

func (failStart) Start() error {
	time.Sleep(30 * time.Millisecond) // the new listeners take connections meanwhile
	return errFailStart
}

func (failStart) Stop() error { return nil }

func init() { caddy.RegisterModule(failStart{}) }

// A reload's config, provisioned and not started (Caddy had started its
// HTTP app, not yet its retainer app, or another app's Start failed
// before it), on the running gateway's store: its handler answers a
// visitor at once from the running config's runtime and registry, with
// the bystander's next count; it waited for a start that never came,
// then answered 503 "starting".
func TestAReloadsHandlerServesBeforeItsAppStarts(t *testing.T) {
	config := gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), "")
	tester := caddytest.NewTester(t)
	tester.InitServer(config, "caddyfile")
	id := deployCounter(t, token(t, "bystander", allScopes))
	url := site(id+".apps.localhost", "/")
	first := served(t, do(t, "GET", url, "", nil))
	raw, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(config), nil)
	if err != nil {
		t.Fatal(err)
	}
	var cfg caddy.Config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	// Provisioned, never started (Caddy gives no way to cancel it: its
	// claims stay counted in this test process, which holds them anyway).
	ctx, err := caddy.ProvisionContext(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	httpApp, err := ctx.App("http")
	if err != nil {
		t.Fatal(err)
	}
	answered := false
	for name, srv := range httpApp.(*caddyhttp.App).Servers {
		reqCtx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		req := httptest.NewRequestWithContext(reqCtx, "GET", url, nil)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		cancel()
		if !strings.Contains(rec.Body.String(), "served") && !strings.Contains(rec.Body.String(), "starting") {
			continue // not the server of the handle's site
		}
		answered = true
		var m struct{ Served int }
		json.Unmarshal(rec.Body.Bytes(), &m)
		if rec.Code != 200 || m.Served != first+1 {
			t.Fatalf("server %s of a config not started: %d %s (the count before: %d)", name, rec.Code, rec.Body, first)
		}
	}
	if !answered {
		t.Fatal("no server of the provisioned config answered the handle's site")
	}
	if got := served(t, do(t, "GET", url, "", nil)); got != first+2 {
		t.Fatalf("the running gateway's next count: %d, want %d", got, first+2)
	}
}
