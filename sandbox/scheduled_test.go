package sandbox

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/program"
)

// A cron tick reaches the handler object's scheduled(controller, env,
// ctx): the controller's fields, noRetry(), a throw, and closure state
// shared with fetch (docs/schedules.md).
func TestScheduledEvent(t *testing.T) {
	id := fmt.Sprintf("test-%d", time.Now().UnixNano())
	out, err := engine(t).Run(context.Background(), program.Job{ID: id, Program: program.Program{Code: `async () => { let seen = []; return {
		async fetch() { return new Response(JSON.stringify(seen)); },
		async scheduled(c, env, ctx) {
			seen.push([c.cron, c.scheduledTime, typeof ctx.waitUntil]);
			if (c.scheduledTime === 2) c.noRetry();
			if (c.scheduledTime >= 2) throw new Error('tick ' + c.scheduledTime);
		},
	} }`}, RetainHandles: true, Timeout: 200 * time.Millisecond})
	if err != nil || !out.Retained || !out.Scheduled {
		t.Fatalf("deploy: %+v %v", out, err)
	}
	fire := func(ms int64) program.WireResponse {
		t.Helper()
		res, err := engine(t).Invoke(context.Background(), id, program.ScheduledEvent, program.ScheduledRequest("*/5 * * * *", ms))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := fire(1); res.Status != 204 || res.NoRetry() {
		t.Fatalf("a settled tick answered %d %v", res.Status, res.Headers)
	}
	if res := fire(2); res.Status != 500 || !res.NoRetry() || string(res.BodyBytes()) != "tick 2" {
		t.Fatalf("a throw after noRetry answered %d %v %q", res.Status, res.Headers, res.BodyBytes())
	}
	if res := fire(3); res.Status != 500 || res.NoRetry() {
		t.Fatalf("a throw answered %d %v", res.Status, res.Headers)
	}
	res, err := get(t, id, "https://example.com/")
	if err != nil || !strings.Contains(string(res.BodyBytes()), `["*/5 * * * *",1,"function"]`) {
		t.Fatalf("fetch after the ticks: %v %s", err, res.BodyBytes())
	}
	// A visitor's request cannot pass for a tick, nor a tick's name carry
	// a visitor's url.
	if _, err := engine(t).Invoke(context.Background(), id, program.ScheduledEvent, program.NewWireRequest("GET", "https://example.com/", nil, nil)); err == nil {
		t.Fatal("a scheduled invocation with a visitor's url was served")
	}
	engine(t).Close(id)

	// A plain function handler has no scheduled method.
	plain := deploy(t, `async () => (req) => new Response('x')`)
	defer engine(t).Close(plain)
	res, err = engine(t).Invoke(context.Background(), plain, program.ScheduledEvent, program.ScheduledRequest("* * * * *", 1))
	if err != nil || res.Status != 404 {
		t.Fatalf("a tick without scheduled(): %d %v", res.Status, err)
	}
}
