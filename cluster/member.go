package cluster

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/retainer-gw/retainer/store"
)

// MinLease is the shortest lease a member may hold: renewals every sixth
// of it must fit a loaded machine's pauses.
const MinLease = 2 * time.Second

// Config names a member and its lease.
type Config struct {
	// Name is unique among the live members.
	Name string
	// Address is where other members forward requests to it (host:port).
	Address string
	// Lease is how long the member's spaces outlive its last renewal.
	Lease time.Duration
	// Now is the member's clock (tests inject one). Default time.Now.
	Now func() time.Time
	// Logf reports renewals that failed. Default: nothing.
	Logf func(format string, args ...any)
}

// ErrLost: the member's lease expired (or may have, by its own clock):
// it owns nothing from then on.
var ErrLost = errors.New("cluster: this gateway's lease has expired; its spaces may be owned by another gateway")

// Elsewhere is the answer to a claim of a space another live member owns.
type Elsewhere struct {
	Space   string
	Name    string
	Address string
}

func (e *Elsewhere) Error() string {
	return fmt.Sprintf("cluster: the space is owned by %s (%s)", e.Name, e.Address)
}

// Member is one gateway of the cluster.
type Member struct {
	e     *store.Etcd
	cfg   Config
	lease clientv3.LeaseID

	mu         sync.Mutex
	validUntil time.Time // by the member's own clock: renewal sent + TTL - margin
	lost       chan struct{}
	lostOnce   sync.Once

	stop chan struct{}
	done chan struct{}
}

// Join makes the gateway a member: a lease of cfg.Lease, kept alive from
// then on, and its name registered under it. A name held by another live
// lease is refused naming it; a restart under its own name waits up to one
// lease for its old registration to expire.
func Join(ctx context.Context, e *store.Etcd, cfg Config) (*Member, error) {
	if cfg.Name == "" || strings.ContainsAny(cfg.Name, "/\x00") {
		return nil, fmt.Errorf("cluster: a member's name must be non-empty, without / (got %q)", cfg.Name)
	}
	if cfg.Lease < MinLease {
		return nil, fmt.Errorf("cluster: lease %v is shorter than the %v minimum", cfg.Lease, MinLease)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	cli := e.Client()
	sent := cfg.Now()
	grant, err := cli.Grant(ctx, int64((cfg.Lease+time.Second-1)/time.Second))
	if err != nil {
		return nil, fmt.Errorf("cluster: granting a lease: %w", err)
	}
	m := &Member{e: e, cfg: cfg, lease: grant.ID, lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	m.renewed(sent, grant.TTL)
	key := m.memberKey(cfg.Name)
	deadline := cfg.Now().Add(cfg.Lease + time.Second)
	for {
		resp, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, cfg.Address, clientv3.WithLease(grant.ID))).
			Commit()
		if err != nil {
			cli.Revoke(context.Background(), grant.ID)
			return nil, fmt.Errorf("cluster: registering %q: %w", cfg.Name, err)
		}
		if resp.Succeeded {
			break
		}
		if cfg.Now().After(deadline) {
			cli.Revoke(context.Background(), grant.ID)
			return nil, nameTaken(ctx, cli, key, cfg)
		}
		// Keep our own lease alive while we wait for the old one.
		if _, err := m.renewOnce(ctx, renewEvery(cfg.Lease)); err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			cli.Revoke(context.Background(), grant.ID)
			return nil, fmt.Errorf("cluster: registering %q: %w while waiting for the live gateway of that name to go", cfg.Name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	go m.keepAlive()
	return m, nil
}

func (m *Member) memberKey(name string) string { return m.e.Prefix() + "/m/" + name }

// nameTaken is the refusal of a name a live member holds: it names the
// name and the holder's address, and what to change.
func nameTaken(ctx context.Context, cli *clientv3.Client, key string, cfg Config) error {
	holder := "unknown"
	if r, err := cli.Get(ctx, key); err == nil && len(r.Kvs) > 0 {
		holder = string(r.Kvs[0].Value)
	}
	return fmt.Errorf("cluster: the member name %q is held by a live gateway at %s (this one advertises %s); "+
		"each member needs a name of its own: set cluster { name } (it defaults to the host name, the same for every gateway on one machine)",
		cfg.Name, holder, cfg.Address)
}

// Rejoin joins again under the member's name after it lost its lease by
// its own clock (etcd unreachable past it): the old lease is revoked
// first, so the name and the spaces it held are free at once instead of
// a lease later (a restarted etcd gives every lease a whole TTL again).
// Everything under it was given up when it was lost; a revoke that fails
// (etcd still unreachable) fails the rejoin, to be tried again.
func (m *Member) Rejoin(ctx context.Context) (*Member, error) {
	m.Abandon()
	m.markLost()
	if _, err := m.e.Client().Revoke(ctx, m.lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil, fmt.Errorf("cluster: revoking the lost lease of %q: %w", m.cfg.Name, err)
	}
	return Join(ctx, m.e, m.cfg)
}

// Renew renews the member's lease after it was lost by its own clock
// (etcd stalled, unreachable or restarted past it), and answers a member
// under the same lease when etcd still holds it: the spaces it owned, and
// what serves them, are still its own. That is safe because etcd never
// renews a lease it let expire (a renewal of an expired lease waits for
// its revocation and answers not found): a lease renewed was alive all
// along at etcd, its owner keys with it, so no other member could claim
// any of its spaces meanwhile (a claim is refused while an owner key has
// a live lease), and its fences (the keys' mod revisions) still hold. A
// restarted etcd gives every lease a whole TTL, so after an outage that
// only etcd had, every member's lease comes back. Renew answers ErrLost
// when etcd let the lease go (the spaces must be dropped: Rejoin), and
// etcd's error when it did not answer (try again).
func (m *Member) Renew(ctx context.Context) (*Member, error) {
	m.Abandon()
	m.markLost()
	sent := m.cfg.Now()
	resp, err := m.e.Client().KeepAliveOnce(ctx, m.lease)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) || err == nil && resp.TTL <= 0 {
		return nil, ErrLost
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: renewing the lost lease of %q: %w", m.cfg.Name, err)
	}
	next := &Member{e: m.e, cfg: m.cfg, lease: m.lease, lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	next.renewed(sent, resp.TTL)
	go next.keepAlive()
	return next, nil
}

// renewed moves the member's deadline: the lease runs ttl seconds from
// when the server took the renewal, which is after sent; a margin of a
// tenth of the lease covers clocks that run at slightly different rates.
func (m *Member) renewed(sent time.Time, ttl int64) {
	until := sent.Add(time.Duration(ttl)*time.Second - m.cfg.Lease/10)
	m.mu.Lock()
	if until.After(m.validUntil) {
		m.validUntil = until
	}
	m.mu.Unlock()
}

func (m *Member) renewOnce(ctx context.Context, wait time.Duration) (bool, error) {
	sent := m.cfg.Now()
	cctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	resp, err := m.e.Client().KeepAliveOnce(cctx, m.lease)
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			m.markLost()
			return false, ErrLost
		}
		if ctx.Err() == nil {
			m.cfg.Logf("cluster: renewing the lease of %s: %v", m.cfg.Name, err)
		}
		return false, nil
	}
	m.renewed(sent, resp.TTL)
	return true, nil
}

// renewEvery is how often a member sends a renewal of its lease: a
// twelfth of the lease (keepAlive's tick makes it up to an eighth of
// that more). A renewal is not waited for before the next is sent (each
// waits up to the lease for its answer), so when etcd stalls the last
// renewal answered was sent about a tenth of the lease before, and the
// member's own deadline (the lease less a tenth) outlasts a stall of 60%
// by about a fifth of the lease (390 ms with the 2 s minimum), which is
// what etcd's first answer after its return may take: that answer is to
// a renewal sent during the stall, which moves the deadline well past it.
// Before, every sixth, each renewal waited for (up to a sixth) before the
// next was sent, left as little as 9% (180 ms): under CPU load etcd's
// first answer after a stall of 60% came later, and the member stopped
// serving until it renewed (TestClusterEtcdStallShorterThanTheLease, 2
// of 12 runs beside CPU hogs); with renewals every third, a stall of 60%
// lost the lease outright (TestEtcdStallShorterThanTheLeaseLosesNothing).
func renewEvery(lease time.Duration) time.Duration { return lease / 12 }

// keepAlive sends a renewal every renewEvery, each in its own goroutine,
// and marks the member lost once its own clock passes the deadline
// without a renewal. The renewals still waiting are cancelled when it
// stops.
func (m *Member) keepAlive() {
	defer close(m.done)
	ctx, cancel := context.WithCancel(context.Background())
	var renewals sync.WaitGroup
	defer renewals.Wait()
	defer cancel()
	tick := time.NewTicker(renewEvery(m.cfg.Lease) / 4)
	defer tick.Stop()
	lastSent := time.Time{}
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
		if !m.Serving() {
			m.markLost()
			return
		}
		if m.cfg.Now().Sub(lastSent) < renewEvery(m.cfg.Lease) {
			continue
		}
		lastSent = m.cfg.Now()
		renewals.Add(1)
		go func() {
			defer renewals.Done()
			m.renewOnce(ctx, m.cfg.Lease) // ErrLost marks the member lost
		}()
	}
}

func (m *Member) markLost() { m.lostOnce.Do(func() { close(m.lost) }) }

// Serving reports whether the member may still act for its spaces: its
// lease cannot have expired yet by its own clock.
func (m *Member) Serving() bool {
	select {
	case <-m.lost:
		return false
	default:
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg.Now().Before(m.validUntil)
}

// Lost is closed when the member lost its lease: every space it owned may
// be another's, and it must stop serving them (in-flight work answers a
// retryable fault).
func (m *Member) Lost() <-chan struct{} { return m.lost }

// Name is the member's name.
func (m *Member) Name() string { return m.cfg.Name }

// LeaseID is the member's etcd lease.
func (m *Member) LeaseID() clientv3.LeaseID { return m.lease }

// Claim makes the member the owner of space, or answers an *Elsewhere
// naming the live member that owns it, or ErrLost.
func (m *Member) Claim(ctx context.Context, space string) (store.Fence, error) {
	if !m.Serving() {
		return store.Fence{}, ErrLost
	}
	f, err := m.e.ClaimUnder(ctx, space, m.cfg.Name, m.lease)
	var owned *store.Owned
	if errors.As(err, &owned) {
		addr, _ := m.addressOf(ctx, owned.Holder)
		return store.Fence{}, &Elsewhere{Space: space, Name: owned.Holder, Address: addr}
	}
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		// etcd let the lease expire before this member learnt it (a claim
		// sent as a paused etcd resumed): the member is lost, as its
		// renewal will find, and the claim is refused as a lost lease's.
		return store.Fence{}, ErrLost
	}
	return f, err
}

// Owner answers the live member that owns space (name "" when none does).
func (m *Member) Owner(ctx context.Context, space string) (name, address string, err error) {
	name, err = m.e.OwnerOf(ctx, space)
	if err != nil || name == "" {
		return "", "", err
	}
	address, err = m.addressOf(ctx, name)
	return name, address, err
}

func (m *Member) addressOf(ctx context.Context, name string) (string, error) {
	r, err := m.e.Client().Get(ctx, m.memberKey(name))
	if err != nil || len(r.Kvs) == 0 {
		return "", err
	}
	return string(r.Kvs[0].Value), nil
}

// Space is one space a member owns.
type Space struct {
	Registry string `json:"registry"`
	Tenant   string `json:"tenant"`
}

// Info is one live member, as GET /retainer/cluster lists it.
type Info struct {
	Name        string  `json:"name"`
	Address     string  `json:"address"`
	Spaces      []Space `json:"spaces"`
	LeaseLeftMs int64   `json:"leaseLeftMs"`
}

// Members lists the live members (a member whose lease expired is gone
// with its key), with the spaces each owns and its lease's time left.
func (m *Member) Members(ctx context.Context) ([]Info, error) {
	cli := m.e.Client()
	base := m.memberKey("")
	r, err := cli.Get(ctx, base, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	owners, err := cli.Get(ctx, m.e.Prefix()+"/o/", clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		info := Info{Name: string(kv.Key[len(base):]), Address: string(kv.Value), Spaces: []Space{}}
		if ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease)); err == nil && ttl.TTL > 0 {
			info.LeaseLeftMs = ttl.TTL * 1000
		} else {
			continue // expired since the read
		}
		for _, o := range owners.Kvs {
			if o.Lease == kv.Lease && string(o.Value) == info.Name {
				sp := string(o.Key[len(m.e.Prefix()+"/o/"):])
				reg, tenant, _ := strings.Cut(sp, "\x00")
				info.Spaces = append(info.Spaces, Space{Registry: reg, Tenant: tenant})
			}
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Elected answers whether this member is the one that runs the cluster's
// shared chores (the sweep of spaces nobody owns): the live member whose
// name sorts first. Two members may both believe it for a moment while
// one joins or dies; a chore is safe to run twice, as claims are compare
// and swap.
func (m *Member) Elected(ctx context.Context) (bool, error) {
	if !m.Serving() {
		return false, nil
	}
	base := m.memberKey("")
	r, err := m.e.Client().Get(ctx, base, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil {
		return false, err
	}
	return len(r.Kvs) == 1 && string(r.Kvs[0].Key[len(base):]) == m.cfg.Name, nil
}

// WatchGone calls gone with the address of every member whose
// registration ends (its lease expired, or it left) until ctx ends: a
// forwarder stops waiting on a member that can no longer answer for any
// space. A watch that breaks (etcd unreachable) is started again; what
// ended meanwhile is not told.
func WatchGone(ctx context.Context, e *store.Etcd, gone func(address string)) {
	base := e.Prefix() + "/m/"
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range e.Client().Watch(wctx, base, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithFilterPut()) {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete && ev.PrevKv != nil {
					gone(string(ev.PrevKv.Value))
				}
			}
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// Leave stops renewing and revokes the lease: the member's name and every
// space it owned are free at once.
func (m *Member) Leave(ctx context.Context) error {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
	m.markLost()
	_, err := m.e.Client().Revoke(ctx, m.lease)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil
	}
	return err
}

// Abandon stops renewing without revoking, as a gateway that died would:
// its spaces stay its own until the lease expires. For tests of failover.
func (m *Member) Abandon() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
}
