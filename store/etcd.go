package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// The etcd layout, every key under the configured prefix (docs/cluster.md):
//
//	<prefix>/meta/app, <prefix>/meta/schema   whose store this is
//	<prefix>/o/<space>                        a space's owner: its mod revision is the fence's epoch
//	<prefix>/t/<table>/<key>                  the tables, in the same byte order as bbolt's buckets
//
// A fence is checked in the transaction it guards (the owner key's mod
// revision still the one its claim wrote), so a writer that lost a space
// can never write in it again, whatever its clock says.

// etcdLimits: etcd refuses a request over 1.5 MiB (--max-request-bytes)
// and a transaction of more than 128 operations (--max-txn-ops) by
// default; the bytes leave room for the prefix on every key and the
// request's framing.
var etcdLimits = Limits{Ops: 128, Bytes: 1<<20 + 256<<10}

// etcdPage is the most keys a Scan reads a round trip. A scan that reads
// values starts at etcdFirstPage keys and sizes each next page from the
// largest entry of the one before, so a page holds about etcdPageBytes
// (etcd has no byte limit on a range read, and a value may be 1 MiB): at
// most 4 times as many keys as the page before, and never fewer than one
// (docs/cluster.md, "Listing keys"). A keys-only scan reads etcdPage keys
// at once.
const (
	etcdPage      = 256
	etcdFirstPage = 16
	etcdPageBytes = 4 << 20
)

// nextPage is how many keys the page after one of prev keys whose largest
// entry was most bytes should read.
func nextPage(prev, most int) int {
	n := etcdPageBytes / max(most, 1)
	return max(1, min(n, 4*prev, etcdPage))
}

// EtcdConfig is how to reach the cluster's etcd.
type EtcdConfig struct {
	Endpoints []string
	// Prefix is what every key begins with (default /retainer).
	Prefix   string
	TLS      *tls.Config
	Username string
	Password string
	// DialTimeout bounds the first connection (default 10 s).
	DialTimeout time.Duration
}

// Etcd is the cluster's backend: the tables in one etcd keyspace.
type Etcd struct {
	cli    *clientv3.Client
	prefix string
	// fenced counts commits refused for a superseded fence (a metric).
	fenced atomic.Uint64
}

// FenceFailures answers how many commits were refused because their
// writer's claim on a space was superseded.
func (e *Etcd) FenceFailures() uint64 { return e.fenced.Load() }

// OpenEtcd connects to etcd and checks (or writes, on an empty prefix)
// that the keys under the prefix are a Retainer store this build reads.
// Errors name the endpoints, never the password.
func OpenEtcd(ctx context.Context, cfg EtcdConfig) (*Etcd, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("store etcd: no endpoints")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		TLS:         cfg.TLS,
		Username:    cfg.Username,
		Password:    cfg.Password,
		// A connection lost (etcd killed, restarted) is dialed again
		// within a second of etcd's return: gRPC's default backoff grows
		// to two minutes, and after a 10 s outage it next dialed ~6 s
		// after etcd was back (docs/cluster.md, "Failures").
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("store etcd %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	e := NewEtcd(cli, cfg.Prefix)
	cctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	if err := e.initSchema(cctx); err != nil {
		cli.Close()
		return nil, fmt.Errorf("store etcd %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	for _, ep := range cli.Endpoints() {
		// An endpoint that does not answer now is not judged: etcd
		// answered the schema's reads, and a member may be down.
		if st, err := cli.Status(cctx, ep); err == nil {
			if err := etcdVersionOK(st.Version); err != nil {
				cli.Close()
				return nil, fmt.Errorf("store etcd %s: %w", ep, err)
			}
		}
	}
	return e, nil
}

// etcdVersionOK refuses an etcd server older than 3.5, the oldest the
// cluster is tested on (docs/cluster.md, "etcd and PostgreSQL").
func etcdVersionOK(version string) error {
	var major, minor int
	if _, err := fmt.Sscanf(strings.TrimPrefix(version, "v"), "%d.%d", &major, &minor); err != nil {
		return fmt.Errorf("etcd answered version %q, which is not one this build knows (3.5 or later is needed)", version)
	}
	if major < 3 || major == 3 && minor < 5 {
		return fmt.Errorf("etcd %s is older than 3.5, the oldest Retainer runs on (docs/cluster.md)", version)
	}
	return nil
}

// NewEtcd answers the backend on a client already made; it closes cli
// when it is closed.
func NewEtcd(cli *clientv3.Client, prefix string) *Etcd {
	if prefix == "" {
		prefix = "/retainer"
	}
	return &Etcd{cli: cli, prefix: strings.TrimSuffix(prefix, "/")}
}

func (e *Etcd) initSchema(ctx context.Context) error {
	app, schema := e.prefix+"/meta/app", e.prefix+"/meta/schema"
	// Written only where nothing is yet; then read whatever is there.
	_, err := e.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(app), "=", 0)).
		Then(clientv3.OpPut(app, string(appName)), clientv3.OpPut(schema, schemaVersion)).
		Commit()
	if err != nil {
		return err
	}
	r, err := e.cli.Get(ctx, e.prefix+"/meta/", clientv3.WithPrefix())
	if err != nil {
		return err
	}
	got := map[string]string{}
	for _, kv := range r.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	if got[app] != string(appName) {
		return fmt.Errorf("the keys under %s belong to another application", e.prefix)
	}
	if got[schema] != schemaVersion {
		return fmt.Errorf("the store has schema version %q; this build reads %q", got[schema], schemaVersion)
	}
	return nil
}

// Client is the backend's etcd client (leases and membership use it too).
func (e *Etcd) Client() *clientv3.Client { return e.cli }

// Prefix is what every key of the store begins with.
func (e *Etcd) Prefix() string { return e.prefix }

// Limits implements Store.
func (e *Etcd) Limits() Limits { return etcdLimits }

// Close implements Store.
func (e *Etcd) Close() error { return e.cli.Close() }

// DBSize answers the largest database size in use that etcd's endpoints
// report (bytes holding live data and the history not yet compacted;
// what a cluster's kv_budget is measured against).
func (e *Etcd) DBSize(ctx context.Context) (int64, error) {
	var most int64
	var lastErr error
	answered := false
	for _, ep := range e.cli.Endpoints() {
		st, err := e.cli.Status(ctx, ep)
		if err != nil {
			lastErr = err
			continue
		}
		answered = true
		most = max(most, st.DbSizeInUse)
	}
	if !answered {
		return 0, fmt.Errorf("store etcd: no endpoint answered its status: %w", lastErr)
	}
	return most, nil
}

func (e *Etcd) tableKey(table string, key []byte) string {
	return e.prefix + "/t/" + table + "/" + string(key)
}

func (e *Etcd) ownerKey(space string) string { return e.prefix + "/o/" + space }

// Get implements Store.
func (e *Etcd) Get(ctx context.Context, table string, key []byte) ([]byte, error) {
	r, err := e.cli.Get(ctx, e.tableKey(table, key))
	if err != nil {
		return nil, err
	}
	if len(r.Kvs) == 0 {
		return nil, nil
	}
	v := r.Kvs[0].Value
	if v == nil {
		v = []byte{}
	}
	return v, nil
}

// Scan implements Store: pages of keys (etcdPage: keys only, or bounded
// in bytes when it reads values), every page read at the first page's
// revision, so the whole range is one snapshot unless etcd compacted that
// revision meanwhile (then the scan fails).
func (e *Etcd) Scan(ctx context.Context, table string, r Range, fn func(k, v []byte) bool) error {
	base := e.tableKey(table, nil)
	lo, hi := bounds(r)
	from, to := base+string(lo), clientv3.GetPrefixRangeEnd(base)
	if hi != nil {
		to = base + string(hi)
	}
	var rev int64
	size := etcdFirstPage
	if r.KeysOnly {
		size = etcdPage
	}
	for n := 0; from < to; {
		page := int64(size)
		if r.Limit > 0 && int64(r.Limit-n) < page {
			page = int64(r.Limit - n)
		}
		opts := []clientv3.OpOption{clientv3.WithRange(to), clientv3.WithLimit(page)}
		if r.KeysOnly {
			opts = append(opts, clientv3.WithKeysOnly())
		}
		if r.Reverse {
			opts = append(opts, clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
		} else {
			opts = append(opts, clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
		}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := e.cli.Get(ctx, from, opts...)
		if err != nil {
			return err
		}
		rev = resp.Header.Revision
		most := 0
		for _, kv := range resp.Kvs {
			most = max(most, len(kv.Key)+len(kv.Value))
			v := kv.Value
			if r.KeysOnly {
				v = nil
			}
			if !fn(kv.Key[len(base):], v) {
				return nil
			}
			n++
		}
		if !r.KeysOnly {
			size = nextPage(len(resp.Kvs), most)
		}
		if !resp.More || len(resp.Kvs) == 0 || (r.Limit > 0 && n >= r.Limit) {
			return nil
		}
		last := string(resp.Kvs[len(resp.Kvs)-1].Key)
		if r.Reverse {
			to = last // the range's end is exclusive
		} else {
			from = last + "\x00"
		}
	}
	return nil
}

// Commit implements Store: one etcd transaction whose comparisons are the
// fences (the owner keys' mod revisions) and the conditions, and whose
// failure branch reads the owner keys back to tell ErrFenced from
// ErrConflict without a second round trip.
func (e *Etcd) Commit(ctx context.Context, txn Txn) error {
	if err := checkSize(txn, etcdLimits); err != nil {
		return err
	}
	cmps := make([]clientv3.Cmp, 0, len(txn.Fences)+len(txn.If))
	orElse := make([]clientv3.Op, 0, len(txn.Fences))
	for _, f := range txn.Fences {
		if f.Epoch == 0 {
			return ErrFenced
		}
		k := e.ownerKey(f.Space)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", int64(f.Epoch)))
		orElse = append(orElse, clientv3.OpGet(k))
	}
	for _, c := range txn.If {
		k := e.tableKey(c.Table, c.Key)
		switch {
		case c.Exists:
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), ">", 0))
		case c.Value == nil:
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
		default:
			// A value comparison fails on a missing key, as Holds must.
			cmps = append(cmps, clientv3.Compare(clientv3.Value(k), "=", string(c.Value)))
		}
	}
	resp, err := e.cli.Txn(ctx).If(cmps...).Then(e.ops(txn.Then)...).Else(orElse...).Commit()
	if err != nil {
		return err
	}
	if resp.Succeeded {
		return nil
	}
	for i, f := range txn.Fences {
		kvs := resp.Responses[i].GetResponseRange().GetKvs()
		if len(kvs) == 0 || kvs[0].ModRevision != int64(f.Epoch) {
			e.fenced.Add(1)
			return ErrFenced
		}
	}
	return ErrConflict
}

// ops turns a transaction's operations into etcd's, the last one for a key
// standing for all of them: etcd refuses a transaction that names a key
// twice, where bbolt applies them in order, to the same end.
func (e *Etcd) ops(then []Op) []clientv3.Op {
	last := make(map[string]int, len(then))
	for i, o := range then {
		last[e.tableKey(o.Table, o.Key)] = i
	}
	out := make([]clientv3.Op, 0, len(last))
	for i, o := range then {
		k := e.tableKey(o.Table, o.Key)
		if last[k] != i {
			continue
		}
		if o.Delete {
			out = append(out, clientv3.OpDelete(k))
		} else {
			out = append(out, clientv3.OpPut(k, string(o.Value)))
		}
	}
	return out
}

// ErrOwned: another live holder owns the space (Owned says who).
var ErrOwned = errors.New("store: another holder owns the space")

// Owned is the answer to a claim of a space another live holder owns.
type Owned struct {
	Space  string
	Holder string
}

func (o *Owned) Error() string { return fmt.Sprintf("store: %s owns the space", o.Holder) }
func (o *Owned) Unwrap() error { return ErrOwned }

// ClaimUnder claims space for holder under lease, by compare and swap: it
// is taken when nobody owns it (the owner key is absent: a holder's lease
// expired and took its keys with it, or it released them) or its owner
// key carries no lease (a claim of one machine's); a holder that already
// owns it under the same lease gets its fence again. Otherwise the answer
// is an *Owned naming the holder. The owner key is written with the lease,
// so a dead holder's spaces come free when its lease expires, and its
// fences (the key's mod revision) go stale with it.
func (e *Etcd) ClaimUnder(ctx context.Context, space, holder string, lease clientv3.LeaseID) (Fence, error) {
	if space == "" {
		return Fence{}, errors.New("store: a claim names a space")
	}
	k := e.ownerKey(space)
	for try := 0; try < 3; try++ {
		cur, err := e.cli.Get(ctx, k)
		if err != nil {
			return Fence{}, err
		}
		cmp := clientv3.Compare(clientv3.CreateRevision(k), "=", 0)
		if len(cur.Kvs) > 0 {
			kv := cur.Kvs[0]
			if kv.Lease == int64(lease) && string(kv.Value) == holder {
				return Fence{Space: space, Epoch: uint64(kv.ModRevision)}, nil
			}
			if kv.Lease != 0 {
				return Fence{}, &Owned{Space: space, Holder: string(kv.Value)}
			}
			cmp = clientv3.Compare(clientv3.ModRevision(k), "=", kv.ModRevision)
		}
		resp, err := e.cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(k, holder, clientv3.WithLease(lease))).Commit()
		if err != nil {
			return Fence{}, err
		}
		if resp.Succeeded {
			return Fence{Space: space, Epoch: uint64(resp.Header.Revision)}, nil
		}
		// Someone claimed it between the read and the swap: look again.
	}
	return Fence{}, fmt.Errorf("store: the claim of a space kept racing with others'")
}

// OwnerOf answers the holder that owns space, "" when none does.
func (e *Etcd) OwnerOf(ctx context.Context, space string) (string, error) {
	r, err := e.cli.Get(ctx, e.ownerKey(space))
	if err != nil || len(r.Kvs) == 0 || r.Kvs[0].Lease == 0 {
		return "", err
	}
	return string(r.Kvs[0].Value), nil
}

// SpacesOf answers the spaces holder owns under lease.
func (e *Etcd) SpacesOf(ctx context.Context, holder string, lease clientv3.LeaseID) ([]string, error) {
	base := e.ownerKey("")
	r, err := e.cli.Get(ctx, base, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, kv := range r.Kvs {
		if kv.Lease == int64(lease) && string(kv.Value) == holder {
			out = append(out, string(kv.Key[len(base):]))
		}
	}
	return out, nil
}

// Claim implements Store: the owner key is written, and its new mod
// revision is the fence. (Claims under a gateway's lease, by compare and
// swap against a live owner, are the cluster's: docs/cluster.md.)
func (e *Etcd) Claim(ctx context.Context, space string) (Fence, error) {
	if space == "" {
		return Fence{}, errors.New("store: a claim names a space")
	}
	resp, err := e.cli.Put(ctx, e.ownerKey(space), "")
	if err != nil {
		return Fence{}, err
	}
	return Fence{Space: space, Epoch: uint64(resp.Header.Revision)}, nil
}
