package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/freeport"
	"github.com/retainer-gw/retainer/internal/pgtest"
	"github.com/retainer-gw/retainer/internal/waitfor"
)

// frontPort is the public port of the test's front, a free one.
var frontPort = freeport.For("front")

// lockedBuffer is a process's output read while it is written.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// documentedFront answers the fenced blocks of docs/cluster.md's "Three
// gateways behind Caddy": the front's Caddyfile and each gateway's part.
func documentedFront(t *testing.T) (front, member string) {
	t.Helper()
	data, err := os.ReadFile("../../docs/cluster.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	start := strings.Index(s, "### Three gateways behind Caddy")
	if start < 0 {
		t.Fatal("docs/cluster.md has no \"Three gateways behind Caddy\"")
	}
	s = s[start+1:]
	if end := strings.Index(s, "\n###"); end >= 0 {
		s = s[:end]
	}
	blocks := regexp.MustCompile("(?s)\n```\n(.*?)\n```").FindAllStringSubmatch(s, -1)
	if len(blocks) < 2 {
		t.Fatalf("docs/cluster.md's front section has %d fenced blocks, want the front's and the gateway's", len(blocks))
	}
	return blocks[0][1], blocks[1][1]
}

// The front docs/cluster.md configures, started as written (its names and
// addresses swapped for loopback ones) before three gateways configured
// as the same section says: its health checks find every gateway up,
// deploys of three tenants through it are owned by more than one gateway,
// a deploy and visits through it are served (one counter sequence), and
// a gateway stopped is seen down by the health check while the front
// goes on serving.
func TestClusterDocumentedFront(t *testing.T) {
	frontDoc, memberDoc := documentedFront(t)
	servers := regexp.MustCompile(`(?s)\tservers \{.*?\n\t\}`).FindString(memberDoc)
	health := regexp.MustCompile(`(?s)\thandle /health \{.*?\n\t\}`).FindString(memberDoc)
	if servers == "" || health == "" || !strings.Contains(memberDoc, "\thandle {\n\t\tretainer_jwt") {
		t.Fatalf("the gateway's part in docs/cluster.md lost its trusted_proxies or its /health route:\n%s", memberDoc)
	}
	servers = regexp.MustCompile(`static \S+`).ReplaceAllString(servers, "static 127.0.0.1/32")

	srv := etcdtest.Start(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gws := map[int]*gateway{}
	for i := 1; i <= 3; i++ {
		config := clusterConfig(t, i, srv.Endpoint, pg.DSN)
		data, err := os.ReadFile(config)
		if err != nil {
			t.Fatal(err)
		}
		c := string(data)
		admin := fmt.Sprintf("admin localhost:%d", memberAdmin(i))
		c = strings.Replace(c, admin, admin+"\n"+servers, 1)
		// The API's site: /health around the token, the rest behind it.
		site := fmt.Sprintf("http://api.localhost:%d {\n", memberPort(i))
		at := strings.Index(c, site)
		end := strings.Index(c[at:], "\n}\n")
		if at < 0 || end < 0 {
			t.Fatalf("no API site in the gateway's Caddyfile:\n%s", c)
		}
		body := c[at+len(site) : at+end]
		c = c[:at+len(site)] + health + "\n\thandle {\n" + body + "\n\t}" + c[at+end:]
		if err := os.WriteFile(config, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
		gws[i] = startMemberAt(t, ctx, i, config)
	}

	f := frontDoc
	f = strings.Replace(f, "*.apps.example.com, api.example.com {", fmt.Sprintf("http://*.apps.localhost:%d, http://api.localhost:%d {", frontPort, frontPort), 1)
	for i := 1; i <= 3; i++ {
		f = strings.Replace(f, fmt.Sprintf("10.0.2.1%d:8080", i), fmt.Sprintf("127.0.0.1:%d", memberPort(i)), 1)
	}
	f = strings.ReplaceAll(f, "example.com", "localhost")
	f = "{\n\tadmin off\n}\n\n" + f
	path := filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(path, []byte(f), 0o600); err != nil {
		t.Fatal(err)
	}
	frontLog := &lockedBuffer{}
	front := binary(ctx, "run", "--config", path)
	front.Stdout, front.Stderr = frontLog, frontLog
	if err := front.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		front.Process.Signal(os.Interrupt)
		front.Wait()
		if t.Failed() {
			t.Logf("the front's Caddyfile:\n%s\nits log:\n%s", f, frontLog.String())
		}
	}()
	api := fmt.Sprintf("http://api.localhost:%d", frontPort)
	if !waitfor.Within(30*time.Second, func() bool { status, _ := clusterCall(t, "GET", api+"/health", "", ""); return status == 200 }) {
		t.Fatalf("the front did not come up:\n%s", frontLog.String())
	}
	// Three health checks' time: every one found every gateway up.
	time.Sleep(5 * time.Second)
	if log := frontLog.String(); strings.Contains(log, "unexpected status code") || strings.Contains(log, "HTTP request failed") {
		t.Fatalf("the front's health checks failed a gateway that is up:\n%s", log)
	}

	// Three tenants deploy through the front, one after another: round
	// robin gives their spaces to more than one gateway.
	tokens := map[string]string{}
	ids := map[string]string{}
	for _, sub := range []string{"alice", "bob", "carol"} {
		out, err := binary(ctx, "retainer-token", "--sub", sub).Output()
		if err != nil {
			t.Fatal(err)
		}
		tokens[sub] = strings.TrimSpace(string(out))
		status, answer := clusterCall(t, "POST", api+"/executions", tokens[sub], fmt.Sprintf(`{"retainHandles": true, "capabilities": ["kvRead", "kvWrite"], "code": %q}`, shopHandler))
		var dep struct{ ExecutionID string }
		json.Unmarshal([]byte(answer), &dep)
		if status != 200 || dep.ExecutionID == "" {
			t.Fatalf("%s's deploy through the front: %d %s", sub, status, answer)
		}
		ids[sub] = dep.ExecutionID
	}
	owners := map[string]string{} // tenant: the member owning its space
	_, members := clusterCall(t, "GET", fmt.Sprintf("http://localhost:%d/retainer/cluster", memberAdmin(1)), "", "")
	var view struct {
		Members []struct {
			Name   string
			Spaces []struct{ Tenant string }
		}
	}
	if err := json.Unmarshal([]byte(members), &view); err != nil {
		t.Fatalf("GET /retainer/cluster: %s", members)
	}
	distinct := map[string]bool{}
	for _, m := range view.Members {
		for _, sp := range m.Spaces {
			owners[sp.Tenant] = m.Name
			distinct[m.Name] = true
		}
	}
	if len(owners) != 3 || len(distinct) < 2 {
		t.Fatalf("three tenants' spaces after deploys through the front: %v, want them on more than one gateway", owners)
	}

	// A route bound and visited through the front: one counter sequence
	// whichever gateway each visit reached.
	for sub, id := range ids {
		route := "shop-" + sub
		if status, body := clusterCall(t, "PUT", api+"/routes/"+route, tokens[sub], fmt.Sprintf(`{"executionId": %q}`, id)); status != 200 {
			t.Fatalf("binding %s through the front: %d %s", route, status, body)
		}
		for n := 1; n <= 6; n++ {
			status, body := clusterCall(t, "GET", fmt.Sprintf("http://%s.apps.localhost:%d/", route, frontPort), "", "")
			if want := fmt.Sprintf("%d %d", n, n); status != 200 || body != want {
				t.Fatalf("visit %d of %s through the front: %d %q, want %q", n, route, status, body, want)
			}
		}
	}

	// gw-3 stops: the health check sees it down, and the front goes on
	// serving the tenants the others own.
	gws[3].stop()
	waitfor.Until(t, 10*time.Second, "the front's health check to notice gw-3 stopped", func() bool {
		return strings.Contains(frontLog.String(), fmt.Sprintf("127.0.0.1:%d", memberPort(3)))
	})
	for sub := range ids {
		if owners[sub] == "gw-3" {
			continue
		}
		for n := 7; n <= 12; n++ {
			status, body := clusterCall(t, "GET", fmt.Sprintf("http://shop-%s.apps.localhost:%d/", sub, frontPort), "", "")
			if status != 200 {
				t.Fatalf("visit %d of %s's route (owned by %s) through the front with gw-3 stopped: %d %q", n, sub, owners[sub], status, body)
			}
		}
	}
}
