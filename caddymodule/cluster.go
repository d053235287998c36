package caddymodule

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/cluster"
	"github.com/retainer-gw/retainer/handles"
	"github.com/retainer-gw/retainer/sqldb"
	"github.com/retainer-gw/retainer/store"
)

// The cluster's configuration (docs/cluster.md): `store etcd`, `receipts
// postgres` and `cluster`, all three or none.

// EtcdStore is `store etcd { ... }`: the registry and kv in etcd.
type EtcdStore struct {
	Endpoints []string `json:"endpoints"`
	// Prefix is what every key begins with. Default /retainer.
	Prefix   string   `json:"prefix,omitempty"`
	TLS      *EtcdTLS `json:"tls,omitempty"`
	Username string   `json:"username,omitempty"`
	// Password may be a placeholder ({env.ETCD_PASSWORD}).
	Password string `json:"password,omitempty"`
	// KVBudget, in bytes, refuses writes that grow tenants' kv
	// (QUOTA_EXCEEDED) while etcd's database is this large or larger.
	// Cluster-wide; 0 is no budget beyond etcd's own quota.
	KVBudget int64 `json:"kv_budget,omitempty"`
}

// EtcdTLS is the client's certificate authority and key pair files.
type EtcdTLS struct {
	CA   string `json:"ca,omitempty"`
	Cert string `json:"cert,omitempty"`
	Key  string `json:"key,omitempty"`
}

// PostgresReceipts is `receipts postgres { dsn ... }`.
type PostgresReceipts struct {
	// DSN may be a placeholder ({env.RETAINER_RECEIPTS_DSN}).
	DSN string `json:"dsn"`
}

// ClusterConfig is `cluster { ... }`: this gateway as a member.
type ClusterConfig struct {
	// Name is unique among the live members. Default: the host name.
	Name string `json:"name,omitempty"`
	// Listen is the internal listener for forwarded requests.
	Listen string `json:"listen"`
	// Advertise is the address other members reach Listen at. Default
	// Listen.
	Advertise string `json:"advertise,omitempty"`
	// Secret authenticates forwarded requests: at least 32 bytes, the same
	// on every gateway. May be a placeholder.
	Secret string `json:"secret"`
	// Lease is how long a dead gateway's spaces stay its own. Default 10s.
	Lease caddy.Duration `json:"lease,omitempty"`
}

// clustered reports whether the app runs as a cluster member.
func (a *App) clustered() bool { return a.StoreEtcd != nil }

// storeKey names the runtime's store in the UsagePool. A file is named
// by its canonical path, so that a reload that spells the store this
// process holds otherwise (relative, through a symbolic link, with "..")
// finds its runtime instead of opening the file again and waiting out
// its own lock (red team, seventh session).
func (a *App) storeKey() string {
	if a.StoreEtcd != nil {
		return "etcd " + strings.Join(a.StoreEtcd.Endpoints, ",") + " " + a.StoreEtcd.Prefix
	}
	return canonicalFile(a.Store)
}

// canonicalFile is path absolute, cleaned, and with its folder's
// symbolic links resolved (the file itself may not exist yet); path as
// it is when that fails.
func canonicalFile(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return abs
	}
	return filepath.Join(dir, filepath.Base(abs))
}

// validateCluster checks the three blocks together; the messages name
// what is missing.
func (a *App) validateCluster() error {
	switch {
	case a.StoreEtcd == nil && a.Cluster != nil:
		return errors.New("retainer: cluster requires store etcd")
	case a.StoreEtcd == nil && a.ReceiptsPostgres != nil:
		return errors.New("retainer: receipts postgres requires store etcd")
	case a.StoreEtcd == nil:
		return nil
	case a.Cluster == nil:
		return errors.New("retainer: store etcd requires a cluster block (name, listen, secret, lease)")
	case a.ReceiptsPostgres == nil:
		return errors.New("retainer: store etcd requires receipts postgres (receipts are kept in PostgreSQL in a cluster)")
	case len(a.StoreEtcd.Endpoints) == 0:
		return errors.New("retainer: store etcd needs endpoints")
	case a.ReceiptsPostgres.DSN == "":
		return errors.New("retainer: receipts postgres needs a dsn")
	case a.StoreEtcd.KVBudget < 0:
		return errors.New("retainer: store etcd kv_budget must be a positive size")
	case a.Cluster.Listen == "":
		return errors.New("retainer: cluster needs listen (host:port of the internal listener)")
	case time.Duration(a.Cluster.Lease) < cluster.MinLease:
		return fmt.Errorf("retainer: cluster lease must be at least %v", cluster.MinLease)
	}
	if a.StoreEtcd.Prefix != "" && !strings.HasPrefix(a.StoreEtcd.Prefix, "/") {
		return fmt.Errorf("retainer: store etcd prefix %q must begin with /", a.StoreEtcd.Prefix)
	}
	if secret := caddy.NewReplacer().ReplaceAll(a.Cluster.Secret, ""); len(secret) < 32 {
		return fmt.Errorf("retainer: cluster secret must be at least 32 bytes (it is %d)", len(secret))
	}
	return nil
}

// clusterDefaults fills what the cluster blocks leave out.
func (a *App) clusterDefaults() {
	if a.StoreEtcd != nil && a.StoreEtcd.Prefix == "" {
		a.StoreEtcd.Prefix = "/retainer"
	}
	if c := a.Cluster; c != nil {
		if c.Name == "" {
			c.Name, _ = os.Hostname()
		}
		if c.Advertise == "" {
			c.Advertise = c.Listen
		}
		if c.Lease == 0 {
			c.Lease = caddy.Duration(budgets.DefaultClusterLease)
		}
	}
}

// backends are what a runtime persists through: one store on one machine;
// etcd, its membership and PostgreSQL in a cluster.
type backends struct {
	registry store.Store
	receipts store.Store
	writer   *store.Writer
	// In a cluster: the membership (replaced when a lost lease is joined
	// again) and what it was joined with.
	member       atomic.Pointer[cluster.Member]
	memberConfig cluster.Config
	etcd         *store.Etcd
	// pg is the cluster's PostgreSQL: receipts, and the SQL databases'
	// pages (docs/sql.md).
	pg *store.Postgres
	// sqlFenceSkip is until when (UnixNano) claims skip raising the SQL
	// epoch: PostgreSQL did not answer the last one.
	sqlFenceSkip atomic.Int64
}

func (b *backends) close() error {
	if m := b.member.Load(); m != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		m.Leave(ctx)
		cancel()
	}
	err := b.registry.Close()
	if b.receipts != b.registry {
		if cerr := b.receipts.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// openBackends opens the store (and in a cluster joins it): a start that
// cannot reach etcd or PostgreSQL fails within 30 s naming the endpoint.
func openBackends(a *App) (*backends, error) {
	if !a.clustered() {
		b, err := store.OpenBolt(a.Store, 0)
		if err != nil {
			return nil, err
		}
		// What the deploy journal held at open (docs/decisions.md, "A
		// deploy's record is journalled").
		r := b.Replayed()
		if r.Entries > 0 {
			a.logger.Sugar().Infof("store %s: %d journal entries replayed (%d-%d)", a.Store, r.Entries, r.From, r.To)
		} else {
			a.logger.Sugar().Infof("store %s: no journal entry to replay", a.Store)
		}
		for _, n := range r.Notes {
			a.logger.Sugar().Warnf("store %s: %s", a.Store, n)
		}
		return &backends{registry: b, receipts: b, writer: store.NewWriter(b)}, nil
	}
	repl := caddy.NewReplacer()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := store.EtcdConfig{
		Endpoints: a.StoreEtcd.Endpoints, Prefix: a.StoreEtcd.Prefix,
		Username: repl.ReplaceAll(a.StoreEtcd.Username, ""), Password: repl.ReplaceAll(a.StoreEtcd.Password, ""),
	}
	if t := a.StoreEtcd.TLS; t != nil {
		tc, err := etcdTLS(t)
		if err != nil {
			return nil, err
		}
		cfg.TLS = tc
	}
	e, err := store.OpenEtcd(ctx, cfg)
	if err != nil {
		return nil, err
	}
	mcfg := cluster.Config{Name: a.Cluster.Name, Address: a.Cluster.Advertise, Lease: time.Duration(a.Cluster.Lease),
		Logf: func(format string, args ...any) { a.logger.Sugar().Warnf(format, args...) }}
	m, err := cluster.Join(ctx, e, mcfg)
	if err != nil {
		e.Close()
		return nil, err
	}
	pg, err := store.OpenPostgres(ctx, repl.ReplaceAll(a.ReceiptsPostgres.DSN, ""))
	if err != nil {
		m.Leave(context.Background())
		e.Close()
		return nil, err
	}
	b := &backends{registry: e, receipts: pg, memberConfig: mcfg, etcd: e, pg: pg}
	b.member.Store(m)
	b.writer = store.NewWriterClaiming(e, func(ctx context.Context, space string) (store.Fence, error) {
		f, err := b.member.Load().Claim(ctx, space)
		if err == nil {
			metricClaims.Inc()
			b.fenceSQL(ctx, space, f)
		}
		return f, err
	})
	return b, nil
}

// fenceSQL raises the epoch of the space's SQL database in PostgreSQL to
// a claim's fence before the claim serves anything (docs/sql.md, "In a
// cluster"): from then on a commit of the gateway that owned the space
// before changes nothing, even one that gateway sends before this one
// first uses the database (which raises it too). The claim holds the
// writer's lock, so a PostgreSQL that does not answer within 250 ms is
// left to that first use, and the claims of the next 5 s do not wait for
// it.
func (b *backends) fenceSQL(ctx context.Context, space string, f store.Fence) {
	registry, tenant, ok := strings.Cut(space, "\x00")
	if !ok || time.Now().UnixNano() < b.sqlFenceSkip.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
	defer cancel()
	if _, _, err := b.pg.SQLOpen(ctx, []byte(sqldb.Key(registry, tenant)), f.Epoch); err != nil {
		b.sqlFenceSkip.Store(time.Now().Add(5 * time.Second).UnixNano())
	}
}

func etcdTLS(t *EtcdTLS) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CA != "" {
		pem, err := os.ReadFile(t.CA)
		if err != nil {
			return nil, fmt.Errorf("store etcd tls ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("store etcd tls ca %s: no certificate in it", t.CA)
		}
		tc.RootCAs = pool
	}
	if t.Cert != "" || t.Key != "" {
		pair, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, fmt.Errorf("store etcd tls cert/key: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// parseStoreEtcd parses the block of `store etcd`:
//
//	store etcd {
//		endpoints <url>...
//		prefix <prefix>
//		tls { ca <file>; cert <file>; key <file> }
//		username <name>
//		password <password>
//		kv_budget <size>
//	}
func parseStoreEtcd(d *caddyfile.Dispenser) (*EtcdStore, error) {
	cfg := &EtcdStore{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "endpoints":
			cfg.Endpoints = d.RemainingArgs()
			if len(cfg.Endpoints) == 0 {
				return nil, d.ArgErr()
			}
		case "prefix":
			if !d.AllArgs(&cfg.Prefix) {
				return nil, d.ArgErr()
			}
		case "username":
			if !d.AllArgs(&cfg.Username) {
				return nil, d.ArgErr()
			}
		case "password":
			if !d.AllArgs(&cfg.Password) {
				return nil, d.ArgErr()
			}
		case "kv_budget":
			var v string
			if !d.AllArgs(&v) {
				return nil, d.ArgErr()
			}
			n, err := size(d, v)
			if err != nil {
				return nil, err
			}
			cfg.KVBudget = n
		case "tls":
			cfg.TLS = &EtcdTLS{}
			if err := blockOptions(d, "store etcd tls", "", map[string]func(string) error{
				"ca": into(&cfg.TLS.CA), "cert": into(&cfg.TLS.Cert), "key": into(&cfg.TLS.Key),
			}); err != nil {
				return nil, err
			}
		default:
			return nil, d.Errf("store etcd: unknown option %q (docs/cluster.md)", d.Val())
		}
	}
	return cfg, nil
}

// parseReceiptsPostgres parses `receipts postgres { dsn <dsn> }`.
func parseReceiptsPostgres(d *caddyfile.Dispenser) (*PostgresReceipts, error) {
	cfg := &PostgresReceipts{}
	if err := blockOptions(d, "receipts postgres", "", map[string]func(string) error{
		"dsn": into(&cfg.DSN),
	}); err != nil {
		return nil, err
	}
	return cfg, nil
}

// parseCluster parses `cluster { name; listen; advertise; secret; lease }`.
func parseCluster(d *caddyfile.Dispenser) (*ClusterConfig, error) {
	cfg := &ClusterConfig{}
	lease := func(v string) error {
		dur, err := duration(d, v)
		cfg.Lease = dur
		return err
	}
	if err := blockOptions(d, "cluster", "docs/cluster.md", map[string]func(string) error{
		"name": into(&cfg.Name), "listen": into(&cfg.Listen), "advertise": into(&cfg.Advertise),
		"secret": into(&cfg.Secret), "lease": lease,
	}); err != nil {
		return nil, err
	}
	return cfg, nil
}

// watchKVBudget measures etcd's database every few seconds while the
// runtime lives (retainer_cluster_etcd_db_bytes) and answers, through
// full, whether it is at kv_budget (never, with no budget: 0).
// A write is refused from the first measurement past the budget to the
// first below it; etcd's size is not read per write (a status call costs
// a round trip to every endpoint).
func (rt *runtime) watchKVBudget(e *store.Etcd, budget int64, full *atomic.Bool) {
	measure := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n, err := e.DBSize(ctx)
		if err != nil {
			rt.logger.Load().Warn("measuring etcd's database size: " + err.Error())
			return
		}
		metricEtcdSize.Set(float64(n))
		full.Store(budget > 0 && n >= budget)
	}
	measure()
	rt.every(kvBudgetEvery, measure)
}

// every calls f each interval until the runtime closes.
func (rt *runtime) every(interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-rt.closing:
			return
		case <-t.C:
			f()
		}
	}
}

// kvBudgetEvery is how often etcd's size is measured for kv_budget.
const kvBudgetEvery = 5 * time.Second

// sweepUnowned runs, on the elected member only, the sweep of spaces
// nobody owns (handles.Store.SweepUnowned) every unownedSweepEvery.
func (rt *runtime) sweepUnowned() {
	b := rt.backing
	rt.every(unownedSweepEvery, func() {
		ctx, cancel := context.WithTimeout(context.Background(), unownedSweepEvery)
		defer cancel()
		if elected, err := b.member.Load().Elected(ctx); err == nil && elected {
			err = rt.store.SweepUnowned(ctx, func(ctx context.Context, space string) (bool, error) {
				owner, err := b.etcd.OwnerOf(ctx, space)
				return owner != "", err
			})
			if err != nil {
				rt.logger.Load().Warn("sweeping unowned spaces: " + err.Error())
			}
		}
	})
}

// finishTakeBacks finishes, at the gateway's start and every
// handles.TakeBackMarksEvery after, the take-backs of deploys given up on
// that the store's marks name (handles.Store.FinishTakeBacks): one whose
// gateway was killed or restarted before it landed is finished here when
// the space is this gateway's or nobody's.
func (rt *runtime) finishTakeBacks() {
	b := rt.backing
	finish := func() {
		ctx, cancel := context.WithTimeout(context.Background(), handles.TakeBackMarksEvery)
		defer cancel()
		if !b.member.Load().Serving() {
			return
		}
		err := rt.store.FinishTakeBacks(ctx, func(ctx context.Context, space string) (bool, error) {
			owner, err := b.etcd.OwnerOf(ctx, space)
			return owner != "", err
		})
		// etcd slower than the interval is said by the writes it refuses;
		// the next interval tries again.
		if err != nil && ctx.Err() == nil {
			rt.logger.Load().Warn("finishing the take-backs of deploys given up on: " + err.Error())
		}
	}
	finish()
	rt.every(handles.TakeBackMarksEvery, finish)
}

// unownedSweepEvery is how often the elected member sweeps spaces nobody
// owns; an idle handle of a dead gateway's space ends within its idle
// bound plus this.
const unownedSweepEvery = time.Minute
