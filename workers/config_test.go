package workers

import (
	"strings"
	"testing"
)

// A pool is told its modes: without them (or with a misspelt one) Start
// refuses at once, naming the option, and starts no worker, rather than
// pick modes the gateway's documented defaults do not.
func TestStartRefusesAConfigWithoutModes(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		word string
	}{
		{Config{}, "isolation"},
		{Config{Isolation: IsolationTenant}, "cpus"},
		{Config{Isolation: "tenants", CPUs: CPUsAuto}, "isolation"},
		{Config{Isolation: IsolationShared, CPUs: "pin"}, "cpus"},
	} {
		pool, err := Start(c.cfg)
		if err == nil {
			pool.Shutdown()
			t.Fatalf("%+v started", c.cfg)
		}
		if !strings.Contains(err.Error(), c.word) {
			t.Errorf("%+v: %v does not name %s", c.cfg, err, c.word)
		}
	}
}

// Zero fields take the app's defaults, the same rows the app applies.
func TestDefaultsAreTheAppsRows(t *testing.T) {
	c := Config{Isolation: IsolationShared, CPUs: CPUsShared}
	c.defaults()
	if c.Workers != 8 || c.MaxWorkers != 1000 || c.IsolatesPerWorker != 64 || c.Queue != 256 || c.RecycleIdle.Seconds() != 60 {
		t.Fatalf("defaults %+v", c)
	}
	c = Config{Isolation: IsolationTenant, CPUs: CPUsAuto}
	c.defaults()
	if c.Workers != 0 {
		t.Fatalf("tenant isolation's 0 workers (auto) became %d", c.Workers)
	}
}
