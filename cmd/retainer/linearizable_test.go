package main

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/pgtest"
)

// kvInput is one visitor's kv operation on one key.
type kvInput struct {
	put        bool
	key, value string
}

// registerModel is one kv key as a register (the history is partitioned
// by key): a get answers the last value put, "null" before any.
var registerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(kvInput).key
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range byKey {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return "null" },
	Step: func(state, input, output any) (bool, any) {
		in := input.(kvInput)
		if in.put {
			return true, in.value
		}
		return output.(string) == state.(string), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(kvInput)
		if in.put {
			return fmt.Sprintf("put(%s, %s)", in.key, in.value)
		}
		return fmt.Sprintf("get(%s) -> %v", in.key, output)
	},
}

// A tenant's kv stays linearizable across a cluster under its faults
// (docs/cluster.md): visitors put and get four keys through three gateways
// while the owner is killed (kill -9) and then a new owner is paused past
// its lease (SIGSTOP) and resumed. Every answered get and every put is in
// the history; a put whose answer was lost or an error may or may not
// have happened (its return is open), a get without an answer is left
// out. porcupine checks that one order of the operations explains every
// answer.
func TestClusterKVIsLinearizable(t *testing.T) {
	srv := etcdtest.Start(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gws := map[int]*gateway{}
	for i := 1; i <= 3; i++ {
		gws[i] = startMember(t, ctx, i, srv.Endpoint, pg.DSN)
	}
	bindThrough(t, gws[1], "shop", deployThrough(t, gws[1], fmt.Sprintf(`{"retainHandles": true, "capabilities": ["kvRead", "kvWrite"], "code": %q}`, shopHandler)))

	var mu sync.Mutex
	var history []porcupine.Operation
	dead := map[int]bool{}
	start := time.Now()
	const run = 9 * time.Second
	var wg sync.WaitGroup
	for client := 0; client < 6; client++ {
		wg.Add(1)
		go func(client int) {
			defer wg.Done()
			rnd := rand.New(rand.NewSource(int64(client)))
			for seq := 0; time.Since(start) < run; seq++ {
				mu.Lock()
				var alive []int
				for i := 1; i <= 3; i++ {
					if !dead[i] {
						alive = append(alive, i)
					}
				}
				mu.Unlock()
				gw := alive[rnd.Intn(len(alive))]
				in := kvInput{key: []string{"a", "b", "c", "d"}[rnd.Intn(4)], put: rnd.Intn(2) == 0}
				path := "/get?k=" + in.key
				if in.put {
					in.value = fmt.Sprintf("c%d-%d", client, seq)
					path = fmt.Sprintf("/set?k=%s&v=%s", in.key, in.value)
				}
				call := time.Now().UnixNano()
				status, body := visit(t, gw, path)
				ret := time.Now().UnixNano()
				switch {
				case status == 200:
				case in.put:
					ret = math.MaxInt64 // it may yet take effect, or never
				default:
					continue
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: body, Return: ret})
				mu.Unlock()
				// Think time keeps the history small enough to check
				// (the search grows fast with puts left open).
				if status != 200 {
					time.Sleep(100 * time.Millisecond)
				} else {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}(client)
	}

	// The faults: the owner killed at 2 s; at 5 s the new owner paused
	// for 3 s, then resumed.
	ownerOf := func(via int) int {
		_, members := clusterCall(t, "GET", fmt.Sprintf("http://localhost:%d/retainer/cluster", memberAdmin(via)), "", "")
		for i := 1; i <= 3; i++ {
			if strings.Contains(members, fmt.Sprintf(`"name":"gw-%d","address":"127.0.0.1:%d","spaces":[{`, i, memberLink(i))) {
				return i
			}
		}
		t.Fatalf("no owner in %s", members)
		return 0
	}
	time.Sleep(2 * time.Second)
	killed := ownerOf(1)
	mu.Lock()
	dead[killed] = true
	mu.Unlock()
	gws[killed].cmd.Process.Kill()
	gws[killed].cmd.Wait()
	time.Sleep(3 * time.Second)
	other := 1 + killed%3
	paused := ownerOf(other)
	gws[paused].cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(3 * time.Second)
	gws[paused].cmd.Process.Signal(syscall.SIGCONT)
	wg.Wait()

	puts, gets, open := 0, 0, 0
	for _, op := range history {
		switch {
		case op.Return == math.MaxInt64:
			open++
		case op.Input.(kvInput).put:
			puts++
		default:
			gets++
		}
	}
	t.Logf("history: %d acknowledged puts, %d puts without an answer, %d gets (killed gw-%d, paused gw-%d)", puts, open, gets, killed, paused)
	if puts < 50 || gets < 50 {
		t.Fatalf("too little was served to check: %d puts, %d gets", puts, gets)
	}
	// A put left open that no get saw can be taken out: it may always be
	// placed after everything (its return is open), where it changes no
	// answer. What is left of them is what the search must place.
	seen := map[string]bool{}
	for _, op := range history {
		if !op.Input.(kvInput).put {
			seen[op.Output.(string)] = true
		}
	}
	kept := history[:0]
	for _, op := range history {
		if in := op.Input.(kvInput); op.Return != math.MaxInt64 || seen[in.value] {
			kept = append(kept, op)
		}
	}
	t.Logf("%d of the puts without an answer were seen by a get", open-(len(history)-len(kept)))
	res := porcupine.CheckOperationsTimeout(registerModel, kept, 60*time.Second)
	if res != porcupine.Ok {
		t.Fatalf("the kv history is not linearizable (%v)", res)
	}
}

// The model refuses what the cluster must never do: a get that answers an
// older value after a newer put was acknowledged.
func TestRegisterModelRefusesAStaleRead(t *testing.T) {
	put := func(v string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{Input: kvInput{put: true, key: "a", value: v}, Output: "ok", Call: call, Return: ret}
	}
	get := func(v string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: 1, Input: kvInput{key: "a"}, Output: v, Call: call, Return: ret}
	}
	good := []porcupine.Operation{put("1", 0, 10), put("2", 20, 30), get("2", 40, 50), get("2", 35, 60)}
	if porcupine.CheckOperations(registerModel, good) != true {
		t.Fatal("a linearizable history was refused")
	}
	stale := []porcupine.Operation{put("1", 0, 10), put("2", 20, 30), get("1", 40, 50)}
	if porcupine.CheckOperations(registerModel, stale) {
		t.Fatal("a stale read was taken as linearizable")
	}
}
