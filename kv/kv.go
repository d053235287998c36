package kv

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/kv/kvop"
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
	// stalled is when a write's read of the store last went unanswered
	// within its bound (zero: the store answers); kv.mu. While set, the
	// writes that need a store read are refused at once and one probe
	// (probe) reads the store until it answers again.
	stalled time.Time
	commits uint64 // commits ended, failed ones included; kv.mu
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

// space is the key prefix of a tenant in a registry; the length prefixes
// make it impossible for one space to be a prefix of another.
func space(registry, tenant string) []byte {
	var b bytes.Buffer
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(registry)))
	b.Write(n[:])
	b.WriteString(registry)
	binary.BigEndian.PutUint32(n[:], uint32(len(tenant)))
	b.Write(n[:])
	b.WriteString(tenant)
	return b.Bytes()
}

type kvArgs struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Prefix string `json:"prefix"`
	Limit  int    `json:"limit"`
	Cursor string `json:"cursor"`
}

func checkKey(k string) error {
	if k == "" {
		return bad("A kv key may not be empty.")
	}
	if len(k) > budgets.KVKeyBytes {
		return bad("A kv key is at most %d bytes.", budgets.KVKeyBytes)
	}
	return nil
}

// Serve runs one kv operation for a tenant on behalf of owner (the run or
// handle whose writes a later Barrier waits for).
func (kv *KV) Serve(registry, tenant, owner, op string, raw json.RawMessage) (json.RawMessage, error) {
	return kv.ServeWithin(context.Background(), registry, tenant, owner, op, raw)
}

// ServeWithin is Serve for a caller whose ctx bounds the reads it waits
// for (a run's bound): past it the call answers OVERLOADED. Only with a
// Bound (a cluster's store); one machine's waits for its file.
func (kv *KV) ServeWithin(ctx context.Context, registry, tenant, owner, op string, raw json.RawMessage) (json.RawMessage, error) {
	var a kvArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, bad("Malformed kv arguments.")
	}
	ns := space(registry, tenant)
	switch kvop.Op(op) {
	case kvop.Get:
		if err := checkKey(a.Key); err != nil {
			return nil, err
		}
		full := string(ns) + a.Key
		for waited := 0; ; waited++ {
			kv.mu.Lock()
			p, ok := kv.pending[full]
			kv.mu.Unlock()
			if ok && p.owner != owner && waited < 3 {
				// Another's pending write is read once it is durable: a
				// value read is never one that is un-said later (a lost
				// commit drops it, and the read sees what was stored).
				// The reader's own writes it reads at once: its answer
				// waits for them anyway (Barrier).
				wctx, cancel := kv.storeCtx(ctx)
				err := kv.waitFor(wctx, p.seq)
				expired := wctx.Err() != nil
				cancel()
				if err != nil && expired {
					return nil, err // not durable in time: not read
				}
				continue
			}
			if ok {
				if p.value == nil {
					return json.RawMessage("null"), nil
				}
				return wirejson.Marshal(*p.value)
			}
			break
		}
		kv.mu.Lock()
		err := kv.stallRefusal()
		kv.mu.Unlock()
		if err != nil {
			return nil, err
		}
		gctx, cancel := kv.storeCtx(ctx)
		v, err := kv.w.Get(gctx, tableKV, []byte(full))
		expired := gctx.Err() == context.DeadlineExceeded
		cancel()
		if err != nil {
			if expired {
				kv.mu.Lock()
				kv.noteStall(ns)
				kv.mu.Unlock()
			}
			return nil, kv.unanswered(err)
		}
		if v == nil {
			return json.RawMessage("null"), nil
		}
		return wirejson.Marshal(string(v))
	case kvop.Put:
		return nil, kv.WriteWithin(ctx, registry, tenant, owner, a.Key, &a.Value)
	case kvop.Delete:
		return nil, kv.WriteWithin(ctx, registry, tenant, owner, a.Key, nil)
	case kvop.List:
		// A listing sees the space's pending writes by waiting for them.
		// Like a read, it is refused at once while the store is stalled,
		// and one left waiting past its bound marks the stall: otherwise
		// the handler's next call waited its whole bound again, and a
		// kv counter's visit at the moment etcd was killed passed its
		// run's bound (TIMEOUT, not OVERLOADED; TestClusterEtcdKilled).
		kv.mu.Lock()
		seq := kv.spaces[string(ns)]
		err := kv.stallRefusal()
		kv.mu.Unlock()
		if err != nil {
			return nil, err
		}
		lctx, cancel := kv.storeCtx(ctx)
		defer cancel()
		err = kv.waitFor(lctx, seq)
		var out json.RawMessage
		if err == nil {
			out, err = kv.list(lctx, ns, a)
		}
		if err != nil && lctx.Err() == context.DeadlineExceeded {
			kv.mu.Lock()
			kv.noteStall(ns)
			kv.mu.Unlock()
		}
		return out, err
	}
	return nil, bad("Unknown kv operation.")
}

// Write is a put (value non-nil) or a delete of one key, checked (key,
// value, quota) and accepted behind the output gate.
func (kv *KV) Write(registry, tenant, owner, key string, value *string) error {
	return kv.WriteWithin(context.Background(), registry, tenant, owner, key, value)
}

// WriteWithin is Write for a caller whose ctx bounds the store reads the
// check waits for (a run's bound).
func (kv *KV) WriteWithin(ctx context.Context, registry, tenant, owner, key string, value *string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if value != nil && len(*value) > budgets.KVValueBytes {
		return bad("A kv value is at most %d bytes.", budgets.KVValueBytes)
	}
	return kv.accept(ctx, space(registry, tenant), store.Space(registry, tenant), owner, key, value)
}

// accept checks a put (value non-nil) or delete against the quota and
// takes it into the pending set.
func (kv *KV) accept(ctx context.Context, ns []byte, fenceSpace, owner, key string, value *string) error {
	full := string(ns) + key
	kv.mu.Lock()
	defer kv.mu.Unlock()
	// What the write replaces and the space's bytes in use are read from
	// the store without holding kv.mu (a store that does not answer holds
	// no other tenant's kv call); they stand if no commit ended meanwhile
	// (a stored value changes only by this KV's commits), else they are
	// read again, at most three times (the quota's count may then be off
	// by the size of a value written meanwhile).
	var old string
	var had bool
	var used int64
	for try := 0; ; try++ {
		if kv.closed {
			return fault.New(fault.Overloaded, "The gateway is stopping.")
		}
		if err := kv.overdue(); err != nil {
			return err
		}
		p, pending := kv.pending[full]
		u, known := kv.usage[string(ns)]
		if pending && known {
			old, had, used = "", p.value != nil, u
			if had {
				old = *p.value
			}
			break
		}
		if err := kv.stallRefusal(); err != nil {
			return err
		}
		commits := kv.commits
		kv.mu.Unlock()
		rctx, cancel := kv.storeCtx(ctx)
		stored, storedUse, err := kv.readStored(rctx, full, ns, !known)
		expired := rctx.Err() == context.DeadlineExceeded
		cancel()
		kv.mu.Lock()
		if err != nil {
			if expired {
				kv.noteStall(ns)
			}
			return err
		}
		if kv.commits != commits && try < 2 {
			continue
		}
		if p, ok := kv.pending[full]; ok {
			old, had = "", p.value != nil
			if had {
				old = *p.value
			}
		} else {
			old, had = string(stored), stored != nil
		}
		if u, ok := kv.usage[string(ns)]; ok {
			used = u
		} else {
			used = storedUse
		}
		break
	}
	if had {
		used -= int64(len(key) + len(old))
	}
	if value != nil {
		grows := !had || len(*value) > len(old)
		used += int64(len(key) + len(*value))
		if used > kv.quota {
			return fault.New(fault.QuotaExceeded, "The tenant's kv quota of %d bytes is used up.", kv.quota)
		}
		if grows && kv.Full != nil && kv.Full() {
			return fault.New(fault.QuotaExceeded, "The gateway's kv store is full (its kv_budget); deleting keys frees room.")
		}
	}
	if used < 0 {
		used = 0
	}
	kv.usage[string(ns)] = used
	kv.touched[string(ns)] = fenceSpace
	kv.seq++
	kv.pending[full] = pendingWrite{seq: kv.seq, value: value, owner: owner, space: fenceSpace}
	kv.owners[owner] = kv.seq
	kv.spaces[string(ns)] = kv.seq
	select {
	case kv.wake <- struct{}{}:
	default:
	}
	return nil
}

// readStored reads a key's stored value and, when usage, its space's
// stored bytes in use, within the bound. kv.mu is not held.
func (kv *KV) readStored(ctx context.Context, full string, ns []byte, usage bool) (v []byte, used int64, err error) {
	ctx, cancel := kv.storeCtx(ctx)
	defer cancel()
	if v, err = kv.w.Get(ctx, tableKV, []byte(full)); err != nil {
		return nil, 0, kv.unanswered(err)
	}
	if usage {
		if used, err = kv.storedUsage(ctx, ns); err != nil {
			return nil, 0, kv.unanswered(err)
		}
	}
	return v, used, nil
}

// storeCtx is ctx within the bound of one store call. Without a bound
// (one machine's bbolt) the caller's deadline is not applied either: the
// call waits for the store, as it always did.
func (kv *KV) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if kv.Bound <= 0 {
		return context.WithoutCancel(ctx), func() {}
	}
	return context.WithTimeout(ctx, kv.Bound)
}

// stallRefusal refuses a call that must read the store while another's
// read of it went unanswered: this one would wait as long. A worker's
// batch holds several runs' writes, each applied in turn, and a handle's
// invocations run one at a time; were each to wait out its bound, the
// last would pass its run's bound (TIMEOUT, its isolate disposed) however
// short the stall (docs/cluster.md, "Failures"). kv.mu is held.
func (kv *KV) stallRefusal() error {
	if kv.stalled.IsZero() {
		return nil
	}
	return fault.New(fault.Overloaded, "The kv store has not answered for %v; retry shortly.", time.Since(kv.stalled).Round(100*time.Millisecond))
}

// noteStall records that a read of ns's space went unanswered within its
// bound and starts the probe. kv.mu is held.
func (kv *KV) noteStall(ns []byte) {
	if kv.Bound > 0 && kv.stalled.IsZero() && !kv.closed {
		kv.stalled = time.Now()
		go kv.probe(ns)
	}
}

// probe reads the store (ns's usage), each read within the bound, until
// it answers or the KV closes, then lets writes read it again.
func (kv *KV) probe(ns []byte) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), kv.Bound)
		_, err := kv.storedUsage(ctx, ns)
		cancel()
		kv.mu.Lock()
		if err == nil || kv.closed {
			kv.stalled = time.Time{}
			kv.mu.Unlock()
			return
		}
		kv.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
}

// unanswered is the fault of a store call that failed: the store is
// unreachable or slow (a cluster's etcd), and a retry may find it back.
func (kv *KV) unanswered(err error) error {
	return fault.Wrap(fault.Overloaded, err, "The kv store did not answer in time; retry shortly.")
}

// overdue refuses a write while the commit under way has taken longer
// than the bound (the store stalled or unreachable): the write could not
// be made durable in time anyway. kv.mu is held.
func (kv *KV) overdue() error {
	if kv.Bound > 0 && !kv.commitStarted.IsZero() && time.Since(kv.commitStarted) > kv.Bound {
		return fault.New(fault.Overloaded, "The kv store has not answered for %v; retry shortly.", time.Since(kv.commitStarted).Round(100*time.Millisecond))
	}
	return nil
}

// Used is what tenant stores in registry's kv (keys and values, pending
// writes counted, as the quota counts them): the usage export's kvBytes.
func (kv *KV) Used(registry, tenant string) int64 {
	ns := space(registry, tenant)
	kv.mu.Lock()
	used, ok := kv.usage[string(ns)]
	kv.mu.Unlock()
	if ok {
		return used
	}
	ctx, cancel := kv.storeCtx(context.Background())
	defer cancel()
	used, _ = kv.storedUsage(ctx, ns)
	return used
}

func (kv *KV) storedUsage(ctx context.Context, ns []byte) (int64, error) {
	u, err := kv.w.Get(ctx, tableUsage, ns)
	if len(u) == 8 {
		return int64(binary.BigEndian.Uint64(u)), nil
	}
	return 0, err
}

// Barrier waits until every write owner made so far is durable; it fails
// when a commit that held one of them failed, or when ctx ends or the
// Bound passes first.
func (kv *KV) Barrier(ctx context.Context, owner string) error {
	kv.mu.Lock()
	seq := kv.owners[owner]
	kv.mu.Unlock()
	if seq == 0 {
		return nil
	}
	if kv.Bound > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, kv.Bound)
		defer cancel()
	}
	err := kv.waitFor(ctx, seq)
	kv.mu.Lock()
	if kv.owners[owner] == seq && kv.committed >= seq {
		delete(kv.owners, owner)
	}
	kv.mu.Unlock()
	return err
}

// gateWaiter is one wait for write seq's commit: done is closed once it
// ended (kv.mu).
type gateWaiter struct {
	seq  uint64
	done chan struct{}
}

// waitFor waits until write seq is committed or its commit failed.
func (kv *KV) waitFor(ctx context.Context, seq uint64) error {
	if seq == 0 {
		return nil
	}
	kv.mu.Lock()
	if kv.committed >= seq {
		err := kv.failure(seq)
		kv.mu.Unlock()
		return err
	}
	w := &gateWaiter{seq: seq, done: make(chan struct{})}
	kv.waiters = append(kv.waiters, w)
	kv.mu.Unlock()
	select {
	case <-w.done:
	case <-ctx.Done():
	}
	kv.mu.Lock()
	defer kv.mu.Unlock()
	if kv.committed < seq {
		for i, o := range kv.waiters {
			if o == w {
				kv.waiters = append(kv.waiters[:i], kv.waiters[i+1:]...)
				break
			}
		}
		return fault.New(fault.Overloaded, "The write was not saved in time; nothing that depends on it was sent.")
	}
	return kv.failure(seq)
}

// endWaits ends the waits for writes up to kv.committed. kv.mu is held.
func (kv *KV) endWaits() {
	kept := kv.waiters[:0]
	for _, w := range kv.waiters {
		if w.seq <= kv.committed {
			close(w.done)
		} else {
			kept = append(kept, w)
		}
	}
	for i := len(kept); i < len(kv.waiters); i++ {
		kv.waiters[i] = nil
	}
	kv.waiters = kept
}

// failure is the error of the failed commit that held seq, if any. kv.mu
// is held.
func (kv *KV) failure(seq uint64) error {
	for _, f := range kv.failed {
		if seq >= f.from && seq <= f.to {
			return f.err
		}
	}
	return nil
}

// commitLoop commits the pending writes, one transaction per batch,
// starting the next batch as soon as one ends.
func (kv *KV) commitLoop() {
	defer close(kv.done)
	for range kv.wake {
		for kv.commitOnce() {
		}
	}
	for kv.commitOnce() { // Close: what is still pending
	}
}

// commitOnce commits what is pending now; false when nothing was.
func (kv *KV) commitOnce() bool {
	kv.mu.Lock()
	if len(kv.pending) == 0 {
		kv.mu.Unlock()
		return false
	}
	batch := make(map[string]pendingWrite, len(kv.pending))
	for k, p := range kv.pending {
		batch[k] = p
	}
	// Only the usage of the spaces this batch wrote is written: kv.usage
	// holds every space touched since the gateway started.
	usage := make(map[string]spaceUsage, len(kv.touched))
	for ns, fenceSpace := range kv.touched {
		if u, ok := kv.usage[ns]; ok {
			usage[ns] = spaceUsage{bytes: u, space: fenceSpace}
		}
	}
	kv.touched = map[string]string{}
	upTo, from := kv.seq, kv.committed+1
	kv.commitStarted = time.Now()
	kv.mu.Unlock()

	err := kv.commit(batch, usage)

	kv.mu.Lock()
	defer kv.mu.Unlock()
	for k, p := range batch {
		if cur, ok := kv.pending[k]; ok && cur.seq == p.seq {
			delete(kv.pending, k) // not overwritten meanwhile
		}
	}
	if f := kv.OnCommitFailed; err != nil && f != nil {
		// The workers' caches drop what they hold before anyone waiting
		// for these writes learns they failed, and before they count as
		// ended: a value that was never committed is not served after
		// its write failed (a run that read it meanwhile still waits
		// for it, and fails with it). The gateway's reads no longer see
		// the lost writes (deleted above).
		kv.mu.Unlock()
		f()
		kv.mu.Lock()
	}
	kv.commitStarted = time.Time{}
	kv.commits++
	if err == nil {
		kv.stalled = time.Time{} // the store answers again
	}
	if err != nil {
		// The writes are lost: reads no longer see them, usage is read
		// again from the file, and whoever waits for them fails.
		kv.usage = map[string]int64{}
		kv.failed = append(kv.failed, failedBatch{from: from, to: upTo,
			err: fault.New(fault.Overloaded, "A write could not be saved (%v); nothing that depended on it was sent.", err)})
		if len(kv.failed) > 64 { // waiters read a failure at once; old ones go
			kv.failed = kv.failed[len(kv.failed)-64:]
		}
	}
	kv.committed = upTo
	for ns, s := range kv.spaces {
		if s <= upTo {
			delete(kv.spaces, ns)
		}
	}
	kv.endWaits()
	return true
}

// spaceUsage is a space's bytes in use and the store space it is in.
type spaceUsage struct {
	bytes int64
	space string
}

// commit writes one batch: one transaction under the fences of the spaces
// it writes, or as few as the store's limits allow (store.CommitSpaces);
// a failure in any fails the batch. A panic (a closed file) is an error
// like any other, so that no waiter is left waiting.
func (kv *KV) commit(batch map[string]pendingWrite, usage map[string]spaceUsage) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("commit failed: %v", r)
		}
	}()
	if kv.beforeCommit != nil {
		if err := kv.beforeCommit(); err != nil {
			return err
		}
	}
	bySpace := map[string][]store.Op{}
	for k, p := range batch {
		if p.value != nil {
			bySpace[p.space] = append(bySpace[p.space], store.Put(tableKV, []byte(k), []byte(*p.value)))
		} else {
			bySpace[p.space] = append(bySpace[p.space], store.Delete(tableKV, []byte(k)))
		}
	}
	for ns, u := range usage {
		bySpace[u.space] = append(bySpace[u.space], store.Put(tableUsage, []byte(ns), binary.BigEndian.AppendUint64(nil, uint64(u.bytes))))
	}
	return kv.w.CommitSpaces(context.Background(), bySpace)
}

// list answers keys of the tenant's space with the prefix, after the
// cursor. The cursor is the last key returned, encoded; it is read inside
// the caller's space only, so it cannot lead outside it.
func (kv *KV) list(ctx context.Context, ns []byte, a kvArgs) (json.RawMessage, error) {
	limit := a.Limit
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	start := append(append([]byte{}, ns...), a.Prefix...)
	after := []byte(nil)
	if a.Cursor != "" {
		c, err := base64.RawURLEncoding.DecodeString(a.Cursor)
		if err != nil {
			return nil, bad("The kv cursor is not one this gateway made.")
		}
		after = append(append([]byte{}, ns...), c...)
		if bytes.Compare(after, start) > 0 {
			start = after
		}
	}
	type page struct {
		Keys   []string `json:"keys"`
		Cursor *string  `json:"cursor"`
	}
	out := page{Keys: []string{}}
	full := append(append([]byte{}, ns...), a.Prefix...)
	err := kv.w.Scan(ctx, tableKV, store.Range{Prefix: full, From: start}, func(k, _ []byte) bool {
		if after != nil && bytes.Equal(k, after) {
			return true
		}
		if len(out.Keys) == limit {
			cur := base64.RawURLEncoding.EncodeToString([]byte(out.Keys[len(out.Keys)-1]))
			out.Cursor = &cur
			return false
		}
		out.Keys = append(out.Keys, string(k[len(ns):]))
		return true
	})
	if err != nil {
		return nil, kv.unanswered(err)
	}
	return wirejson.Marshal(out)
}

func bad(format string, args ...any) error {
	return fault.New(fault.BadRequest, format, args...)
}
