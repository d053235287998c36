package kv

import (
	"context"
	"sync"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/store"
)

// The kv tables in the store: values by space and key, and each space's
// bytes in use.
const (
	tableKV    = "kv"
	tableUsage = "kvusage"
)

// KV is the tenants' key spaces in the store (package store): one per
// tenant and registry.
//
// Writes go through an output gate (as Cloudflare's Durable Objects do): a
// put or delete is checked (key, value, quota) and accepted into a pending
// set at once, and resolves; its owner's later reads see it at once, and
// another's read of it waits until it is durable; the writes pending when a
// commit starts share one transaction, and the next commit starts as
// soon as one ends (no fixed delay), under the fences of the spaces it
// writes. Whoever must not act before a write is
// durable — a response to a visitor, an outbound fetch or tool call made
// after the write — waits at Barrier for the writes its owner (a run or a
// handle) made. A commit that fails fails those waiters: no acknowledged
// response ever stands for a lost write.
type KV struct {
	w     *store.Writer
	quota int64

	mu        sync.Mutex              // guards everything below
	pending   map[string]pendingWrite // by full key (space + key)
	usage     map[string]int64        // bytes per space, pending writes included
	touched   map[string]string       // spaces whose usage changed since the last commit began → their fence's space
	owners    map[string]uint64       // owner → its last accepted write's seq
	spaces    map[string]uint64       // space → its last accepted write's seq
	seq       uint64                  // the last accepted write
	committed uint64                  // every write up to here is durable
	failed    []failedBatch           // the last failed commits (waiters read them at once)
	// waiters are the Barriers and reads waiting for a write, each woken
	// only once its write's commit ended (not at every commit: under load
	// most waiters wait for a later one).
	waiters []*gateWaiter
	closed  bool

	wake chan struct{}
	done chan struct{}
	// beforeCommit, when set (tests), runs before each commit; an error
	// fails the commit.
	beforeCommit func() error
	// OnCommitFailed, when set, runs after a commit failed, before its
	// waiters are told: values read from the lost writes (the workers'
	// read caches) must be dropped. It must not call the KV.
	OnCommitFailed func()
	// Full, when set, answers whether the store as a whole is past its
	// budget (a cluster's kv_budget, docs/cluster.md): a write that would
	// grow a tenant's kv is refused then; deletes and shrinking writes,
	// which free room, are still accepted. Set before the first write.
	Full func() bool
	// Bound, when set (a cluster's etcd, docs/cluster.md), is the longest
	// a kv call waits for the store: a read the store did not answer in
	// time, and a Barrier whose writes were not committed in time, answer
	// OVERLOADED (retryable), and while a commit has been under way for
	// longer, new writes are refused the same way instead of piling up.
	// The commit itself is never cut short: a transaction abandoned by
	// its sender may still be applied by a stalled etcd once it resumes,
	// after the next one, so the next commit starts only once the store
	// answered this one. Zero (one machine) waits for the store. Set
	// before the first call.
	Bound time.Duration

	commitStarted time.Time // when the commit under way began (zero: none); kv.mu
	// stalled is when the gateway's own read of the store began that
	// the store left unanswered for stallEvidence (zero: the store
	// answers); kv.mu. While set, the calls that need a store read are
	// refused at once and one probe (probe) reads the store until it
	// answers again. marked is cancelled when it is set, cutting short
	// the reads then waiting (a new one once it is cleared); checking
	// says the gateway's read (check) is under way. All kv.mu.
	stalled  time.Time
	marked   context.Context
	mark     context.CancelFunc
	checking bool
	commits  uint64 // commits ended, failed ones included; kv.mu
}

// failedBatch is a commit that failed: writes from..to are lost.
type failedBatch struct {
	from, to uint64
	err      error
}

// pendingWrite is an accepted write not yet committed; value nil deletes.
type pendingWrite struct {
	seq   uint64
	value *string
	owner string // the run or handle that wrote it
	space string // the store space whose fence guards it
}

// NewKV starts the committer of kv writes through w. quota is each
// tenant's byte budget (keys plus values) per registry; zero takes
// budgets.KVBytesPerTenant.
func NewKV(w *store.Writer, quota int64) (*KV, error) {
	if quota <= 0 {
		quota = budgets.KVBytesPerTenant
	}
	kv := &KV{w: w, quota: quota,
		pending: map[string]pendingWrite{}, usage: map[string]int64{}, touched: map[string]string{}, owners: map[string]uint64{},
		spaces: map[string]uint64{},
		wake:   make(chan struct{}, 1), done: make(chan struct{})}
	kv.marked, kv.mark = context.WithCancel(context.Background())
	go kv.commitLoop()
	return kv, nil
}

// Close commits what is pending and stops the committer; the store stays
// open.
func (kv *KV) Close() {
	kv.mu.Lock()
	if kv.closed {
		kv.mu.Unlock()
		return
	}
	kv.closed = true
	kv.mu.Unlock()
	close(kv.wake)
	<-kv.done
}
