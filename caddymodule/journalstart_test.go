package caddymodule

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/retainer-gw/retainer/store"
)

// A start whose store's journal lost entries answered is refused before
// any listener serves (the second red team's L3: Caddy starts its apps in
// no set order, and its HTTP server answered 503 "starting" while the
// retainer app opened the store and failed), and so is one on a file that
// is no Retainer store. A client polling the HTTP port through twelve
// refused starts never gets an answer. Moved aside, as the error says,
// the journal lets the gateway start, and a bystander's handle and route
// deployed before serve; a reload after keeps its workers and the
// handle's state.
func TestADamagedJournalRefusesTheStartBeforeAnyAnswer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	config := gatewayConfig(path, "isolation shared")
	tester := caddytest.NewTester(t)
	tester.InitServer(config, "caddyfile")
	tok := token(t, "bystander", allScopes)
	id := deployCounter(t, tok)
	if a := do(t, "PUT", api("/routes/bystander"), tok, mustJSON(map[string]any{"executionId": id})); a.status != 200 {
		t.Fatalf("the bystander's route: %d %s", a.status, a.body)
	}
	bystander, route := site(id+".apps.localhost", "/"), site("bystander.named.localhost", "/")
	if n := served(t, do(t, "GET", bystander, "", nil)); n != 1 {
		t.Fatalf("the bystander served %d", n)
	}
	if n := served(t, do(t, "GET", route, "", nil)); n != 2 {
		t.Fatalf("the bystander's route served %d", n)
	}
	// Stopped: a config without Retainer or any site (the store closes,
	// its journal empty, and nothing listens on the HTTP port).
	tester.InitServer(fmt.Sprintf("{\n\tadmin localhost:%d\n}\n", adminPort), "caddyfile")
	damageJournal(t, path)

	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(config), nil)
	if err != nil {
		t.Fatal(err)
	}
	// And a store that is no Retainer store, refused as early.
	foreign := filepath.Join(t.TempDir(), "foreign.db")
	if err := os.WriteFile(foreign, bytes.Repeat([]byte("not a database "), 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	foreignCfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(gatewayConfig(foreign, "isolation shared")), nil)
	if err != nil {
		t.Fatal(err)
	}
	var answers atomic.Int32
	var first atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		req := []byte(fmt.Sprintf("GET / HTTP/1.1\r\nHost: %s.apps.localhost\r\nConnection: close\r\n\r\n", id))
		for {
			select {
			case <-stop:
				return
			default:
			}
			c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", httpPort), time.Second)
			if err != nil {
				time.Sleep(time.Millisecond)
				continue
			}
			c.SetDeadline(time.Now().Add(2 * time.Second))
			c.Write(req)
			line := make([]byte, 64)
			if n, _ := c.Read(line); n > 0 {
				answers.Add(1)
				first.CompareAndSwap(nil, string(line[:n]))
			}
			c.Close()
		}
	}()
	for i := range 8 {
		err := caddy.Load(cfg, true)
		if err == nil {
			close(stop)
			wg.Wait()
			t.Fatalf("attempt %d: a store whose journal lost answered entries started", i)
		}
		if !strings.Contains(err.Error(), store.ErrJournalDamaged.Error()) || !strings.Contains(err.Error(), path+"-journal") ||
			!strings.Contains(err.Error(), "move it aside") {
			t.Fatalf("attempt %d: the start failed with %v", i, err)
		}
		if i%2 == 0 {
			if err := caddy.Load(foreignCfg, true); err == nil || !strings.Contains(err.Error(), "not a Retainer store") {
				close(stop)
				wg.Wait()
				t.Fatalf("attempt %d on a file that is no store: %v", i, err)
			}
		}
	}
	close(stop)
	wg.Wait()
	if n := answers.Load(); n > 0 {
		t.Fatalf("refused starts answered %d requests on the HTTP port, the first %q", n, first.Load())
	}

	if err := os.Rename(path+"-journal", path+"-journal.damaged"); err != nil {
		t.Fatal(err)
	}
	tester.InitServer(config, "caddyfile")
	n := served(t, do(t, "GET", route, "", nil))
	if m := served(t, do(t, "GET", bystander, "", nil)); n < 1 || m != n+1 {
		t.Fatalf("the bystander after the journal was moved aside: served %d then %d", n, m)
	}
	pids := workerPIDs(t)
	tester.InitServer(config, "caddyfile") // a reload: the store is held, not checked
	if after := workerPIDs(t); !slices.Equal(after, pids) {
		t.Fatalf("a reload replaced the workers: %v → %v", pids, after)
	}
	if m := served(t, do(t, "GET", route, "", nil)); m != n+2 {
		t.Fatalf("the bystander's route after a reload served %d, want %d (its state kept)", m, n+2)
	}
}

// damageJournal writes into the journal beside the (closed) store at path
// three entries past the last it holds, of the run it names, the second
// damaged and the third naming it synced: entries answered after a
// damaged one, which OpenBolt refuses to lose silently (store/journal.go).
// Each is a copy of an entry the store itself journalled, renumbered: the
// header is magic, length, CRC-32C of the rest, number, run, synced.
func damageJournal(t *testing.T, path string) {
	t.Helper()
	s, err := store.OpenBolt(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(store.Journalled(context.Background()), store.Txn{Then: []store.Op{store.Put("journal-test", []byte("k"), []byte("v"))}}); err != nil {
		t.Fatal(err)
	}
	j, err := os.ReadFile(path + "-journal")
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	const head = 44
	e := j[:head+binary.BigEndian.Uint32(j[4:])]
	last := binary.BigEndian.Uint64(e[12:])
	entry := func(seq, synced uint64) []byte {
		b := slices.Clone(e)
		binary.BigEndian.PutUint64(b[12:], seq)
		binary.BigEndian.PutUint64(b[36:], synced)
		binary.BigEndian.PutUint32(b[8:], crc32.Checksum(b[12:], crc32.MakeTable(crc32.Castagnoli)))
		return b
	}
	damaged := entry(last+2, last+1)
	damaged[len(damaged)-1] ^= 0x10
	out := slices.Concat(entry(last+1, last), damaged, entry(last+3, last+2))
	if err := os.WriteFile(path+"-journal", append(out, bytes.Repeat([]byte{0}, len(j)-len(out))...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := store.CheckBolt(path); err == nil {
		t.Fatal("the journal written is not damaged (has its format changed?)")
	}
}
