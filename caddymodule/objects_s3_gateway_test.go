package caddymodule

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/retainer-gw/retainer/internal/s3test"
)

// TestObjectsOnS3ThroughGateways is docs/objects.md's S3 backend through
// real gateways: what a handler and the control plane put through one
// gateway is read by another started with an empty data directory on the
// same SeaweedFS (a cluster's gateways share a bucket this way); another
// tenant still sees nothing, and a Range and a delete behave as on files.
func TestObjectsOnS3ThroughGateways(t *testing.T) {
	s := s3test.Start(t)
	objectsS3 := fmt.Sprintf("objects s3 {\n\t\t\tendpoint %s\n\t\t\tbucket gateways\n\t\t\tregion %s\n\t\t\taccess_key %s\n\t\t\tsecret_key %s\n\t\t\tprefix apps/\n\t\t}",
		s.Endpoint, s.Region, s.AccessKey, s.SecretKey)
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(filepath.Join(t.TempDir(), "one.db"), objectsS3), "caddyfile")
	alice := token(t, "alice", allScopes)
	bob := token(t, "bob", allScopes)

	// The control plane's put first: SeaweedFS's first write to a new
	// bucket allocates its volumes (seconds on a loaded machine), which a
	// handler's 2 s bound should not have to cover.
	if a := do(t, "PUT", api("/objects/upload.bin"), alice, []byte(strings.Repeat("0123456789", 1000))); a.status != 200 {
		t.Fatalf("control-plane put: %d %s", a.status, a.body)
	}
	host := deployObjects(t, alice)
	if a := do(t, "PUT", site(host, "/reports/q1.txt"), "", []byte("quarter one"), "Content-Type", "text/plain"); a.status != 200 {
		t.Fatalf("handler put: %d %s", a.status, a.body)
	}

	// Another gateway, nothing local: the same bucket.
	tester.InitServer(gatewayConfig(filepath.Join(t.TempDir(), "two.db"), objectsS3), "caddyfile")
	a := do(t, "GET", api("/objects?prefix="), alice, nil)
	if a.status != 200 || !strings.Contains(string(a.body), `"reports/q1.txt"`) || !strings.Contains(string(a.body), `"upload.bin"`) {
		t.Fatalf("the other gateway lists: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", api("/objects/reports/q1.txt"), alice, nil); a.status != 200 || string(a.body) != "quarter one" {
		t.Fatalf("the other gateway reads: %d %q", a.status, a.body)
	}
	if a := do(t, "GET", api("/objects/upload.bin"), alice, nil, "Range", "bytes=10-14"); a.status != 206 || string(a.body) != "01234" {
		t.Fatalf("Range on S3: %d %q", a.status, a.body)
	}
	host = deployObjects(t, alice)
	if a := do(t, "GET", site(host, "/reports/q1.txt"), "", nil); a.status != 200 || string(a.body) != "quarter one" {
		t.Fatalf("a handler on the other gateway reads: %d %q", a.status, a.body)
	}
	if a := do(t, "GET", api("/objects?prefix="), bob, nil); a.status != 200 || strings.Contains(string(a.body), "q1.txt") {
		t.Fatalf("bob's bucket: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", api("/objects/reports/q1.txt"), bob, nil); a.status != 404 {
		t.Fatalf("bob reads alice's object: %d %s", a.status, a.body)
	}
	if a := do(t, "DELETE", api("/objects/reports/q1.txt"), alice, nil); a.status != 204 {
		t.Fatalf("delete: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", site(host, "/reports/q1.txt"), "", nil); a.status != 404 {
		t.Fatalf("after the delete: %d %q", a.status, a.body)
	}
}
