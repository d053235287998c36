package store_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/retainer-gw/retainer/store"
	"github.com/retainer-gw/retainer/store/storetest"
)

// shared is a handle on one *store.Bolt: a bbolt file admits one process,
// so the handles the contract suite opens at once share it, and the file
// closes with the last of them.
type shared struct {
	*store.Bolt
	once  sync.Once
	close func()
}

func (s *shared) Close() error {
	s.once.Do(s.close)
	return nil
}

// sharedOpens opens one bbolt file for the contract suite: its opens share
// one *store.Bolt (shared), each dressed by wrap.
func sharedOpens(wrap func(store.Store) store.Store) storetest.Backend {
	return func(t *testing.T) func() store.Store {
		path := filepath.Join(t.TempDir(), "registry.db")
		var mu sync.Mutex
		var db *store.Bolt
		handles := 0
		return func() store.Store {
			mu.Lock()
			defer mu.Unlock()
			if db == nil {
				var err error
				if db, err = store.OpenBolt(path, time.Second); err != nil {
					t.Fatal(err)
				}
			}
			handles++
			return wrap(&shared{Bolt: db, close: func() {
				mu.Lock()
				defer mu.Unlock()
				if handles--; handles == 0 {
					db.Close()
					db = nil
				}
			}})
		}
	}
}

func TestBoltContract(t *testing.T) {
	storetest.Run(t, sharedOpens(func(s store.Store) store.Store { return s }))
}

// journalledBolt commits every transaction as journalled
// (store.Journalled): the contract holds for those as for plain commits.
type journalledBolt struct{ store.Store }

func (j journalledBolt) Commit(ctx context.Context, txn store.Txn) error {
	return j.Store.Commit(store.Journalled(ctx), txn)
}

func TestBoltJournalledContract(t *testing.T) {
	storetest.Run(t, sharedOpens(func(s store.Store) store.Store { return journalledBolt{s} }))
}

// A file that is not a Retainer store, one of another application and one
// another process holds are each refused with an error that says so.
func TestBoltRefusesOtherFiles(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	if err := writeFile(garbage, "not a database at all, certainly not bbolt"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.OpenBolt(garbage, time.Second); err == nil || !strings.Contains(err.Error(), "not a Retainer store") {
		t.Fatalf("garbage: %v", err)
	}
	foreign := filepath.Join(dir, "foreign.db")
	db, _ := bolt.Open(foreign, 0o600, nil)
	db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("theirs")); return err })
	db.Close()
	if _, err := store.OpenBolt(foreign, time.Second); err == nil || !strings.Contains(err.Error(), "another application") {
		t.Fatalf("foreign: %v", err)
	}
	held := filepath.Join(dir, "held.db")
	s, err := store.OpenBolt(held, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := store.OpenBolt(held, 100*time.Millisecond); err == nil || !strings.Contains(err.Error(), "lock") {
		t.Fatalf("held: %v", err)
	}
}

func writeFile(path, text string) error { return os.WriteFile(path, []byte(text), 0o600) }
