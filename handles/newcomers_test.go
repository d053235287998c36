package handles

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/workers"
)

// New tenants' first deploys at once, each claiming its fence while its
// program runs (Execute) and committing its record under it, beside a
// bystander's handle and deploys that fail: every deploy answered with an
// id is there after a restart, no failed one is, and the bystander's
// handle serves on.
func TestNewTenantsDeployingAtOnceSurviveARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ends := &eventLog{}
	g := start(t, path, clock, ends, workers.Config{Workers: 2})
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	bystander := deploy(t, reg, "bystander")
	mustCall(t, reg, "bystander", bystander, `{"served":1}`)

	const n = 16
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code := counterProgram
			if i%4 == 3 {
				code = `async () => { throw new Error("no handler") }`
			}
			res, err := reg.Execute(context.Background(), fmt.Sprintf("newcomer-%d", i), ExecRequest{Program: program.Program{Code: code}, RetainHandles: true, Timeout: 2 * time.Second})
			ids[i], errs[i] = res.ExecutionID, err
		}()
	}
	wg.Wait()
	mustCall(t, reg, "bystander", bystander, `{"served":2}`)
	for i := range n {
		if i%4 == 3 {
			if errs[i] == nil || ids[i] != "" {
				t.Fatalf("newcomer-%d's failing deploy: %q %v", i, ids[i], errs[i])
			}
			continue
		}
		if errs[i] != nil || ids[i] == "" {
			t.Fatalf("newcomer-%d's deploy: %q %v", i, ids[i], errs[i])
		}
	}
	g.stop()

	g = start(t, path, clock, ends, workers.Config{Workers: 2})
	reg = g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	for i := range n {
		tenant := fmt.Sprintf("newcomer-%d", i)
		if i%4 == 3 {
			if got := reg.List(tenant); len(got) != 0 {
				t.Fatalf("%s's failed deploy left %+v", tenant, got)
			}
			continue
		}
		mustCall(t, reg, tenant, ids[i], `{"served":1}`)
		if _, err := call(reg, "bystander", ids[i], "/"); fault.CodeOf(err) != fault.HandlesClosed {
			t.Fatalf("another tenant reached %s's handle: %v", tenant, err)
		}
	}
	// Rebuilt after the restart: its closure starts afresh.
	mustCall(t, reg, "bystander", bystander, `{"served":1}`)
}
