package handles

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/store"
)

// Ownership in a cluster (docs/cluster.md): every request of a space (a
// registry's tenant) is served by the one gateway that owns it, so every
// per-tenant rule stays what it is on one machine. Options.Own claims a
// space for this gateway, or answers who owns it (an error the Caddy
// module turns into a forward). The registry in memory is current for the
// spaces this gateway owns: the first time it owns a space (at start, or
// again after another gateway had it) it reads the space's records,
// routes, domains and reserved names from the store, and drops the
// isolates it held for it. On one machine Own is nil and none of this
// runs.

// reloadsAtOnce is how many spaces' reloads read the store at once.
const reloadsAtOnce = 4

// Own makes this gateway the owner of the tenant's space in the registry
// (nil on one machine), reloading the space the first time.
func (r *Registry) Own(ctx context.Context, tenant string) error {
	return r.store.own(ctx, r.name, tenant)
}

func (s *Store) own(ctx context.Context, registry, tenant string) error {
	if s.opts.Own == nil || tenant == "" {
		return nil
	}
	space := store.Space(registry, tenant)
	for {
		if err := s.opts.Own(ctx, space); err != nil {
			return err
		}
		s.ownMu.Lock()
		if s.owned[space] {
			s.ownMu.Unlock()
			return nil
		}
		if busy := s.loading[space]; busy != nil {
			// Its reload is under way: wait for it, then look again.
			s.ownMu.Unlock()
			select {
			case <-busy:
				continue
			case <-ctx.Done():
				return storeFault(ctx.Err(), "The tenant's handles could not be loaded.")
			}
		}
		done := make(chan struct{})
		s.loading[space] = done
		gen := s.ownGen
		s.ownMu.Unlock()
		// The store is read with ownMu free: a reload that waits for a
		// stalled etcd holds up only the requests of its own space (every
		// request takes ownMu to ask whether its space is owned), and
		// the reloads behind the few at once (a failover's claims).
		var err error
		select {
		case s.reloads <- struct{}{}:
			err = s.reloadSpace(ctx, registry, tenant)
			<-s.reloads
		case <-ctx.Done():
			err = ctx.Err()
		}
		s.ownMu.Lock()
		delete(s.loading, space)
		close(done)
		current := s.ownGen == gen
		if err == nil && current {
			s.owned[space] = true
		}
		s.ownMu.Unlock()
		if err != nil {
			return storeFault(err, "The tenant's handles could not be loaded.")
		}
		if current {
			return nil
		}
		// Spaces were let go while it loaded (a lost lease, a commit
		// whose outcome is unknown): what it read may be older than
		// that, so it is owned and read again.
	}
}

// Disowned forgets every space this gateway owned (its lease was lost)
// and closes their isolates: owning one again reloads it, and nothing
// computed by an isolate of the lease that ended is answered (ServeStream
// checks stillOwned).
func (s *Store) Disowned() {
	s.ownMu.Lock()
	owned := s.owned
	s.owned = map[string]bool{}
	s.ownGen++
	s.ownMu.Unlock()
	var closing []string
	s.mu.Lock()
	for id, rec := range s.records {
		if owned[store.Space(rec.Registry, rec.Tenant)] {
			closing = append(closing, id)
		}
	}
	s.mu.Unlock()
	for _, id := range closing {
		s.opts.Executor.Close(id)
	}
}

// stillOwned answers nil when this gateway still owns the tenant's space
// after an invocation there (always on one machine), or the retryable
// fault to answer instead: a gateway paused past its lease sends nothing
// its old isolate computed.
func (r *Registry) stillOwned(ctx context.Context, tenant string) error {
	s := r.store
	if s.opts.Own == nil {
		return nil
	}
	if !s.owns(r.name, tenant) {
		return fault.New(fault.Overloaded, "This gateway no longer serves this tenant; try again.")
	}
	return s.opts.Own(ctx, store.Space(r.name, tenant))
}

// owns answers whether this gateway owns the space and has loaded it.
func (s *Store) owns(registry, tenant string) bool {
	s.ownMu.Lock()
	defer s.ownMu.Unlock()
	return s.owned[store.Space(registry, tenant)]
}

// servedFilter answers whether this gateway keeps a space current and may
// act on it (flush its counters, sweep its idle handles, domains and
// reservations): always on one machine; in a cluster only for the spaces
// it owns and has loaded, since its copy of any other may be stale (a
// space another gateway served since). Called before s.mu is taken
// (ownMu comes first).
func (s *Store) servedFilter() func(registry, tenant string) bool {
	if s.opts.Own == nil {
		return func(string, string) bool { return true }
	}
	s.ownMu.Lock()
	owned := maps.Clone(s.owned)
	s.ownMu.Unlock()
	return func(registry, tenant string) bool { return owned[store.Space(registry, tenant)] }
}

// SweepUnowned is the cluster's sweep of spaces nobody owns (their owner
// died and no request came since), run by one elected gateway at a time:
// a space with a handle idle past its registry's bound, or with a handle
// that has schedules, is owned here, which loads it, and the ordinary idle
// sweep ends what is due (and the schedules' loop fires what is due). hasOwner
// answers whether a live gateway owns a space; a space it owns is its
// owner's to sweep.
func (s *Store) SweepUnowned(ctx context.Context, hasOwner func(ctx context.Context, space string) (bool, error)) error {
	if s.opts.Own == nil {
		return nil
	}
	now := s.opts.Now()
	bounds := map[string]time.Duration{}
	s.mu.Lock()
	for name, reg := range s.registries {
		bounds[name] = reg.config().IdleBound
	}
	s.mu.Unlock()
	served := s.servedFilter()
	due := map[[2]string]bool{}
	err := s.w.Scan(ctx, tableHandles, store.Range{}, func(_, v []byte) bool {
		var rec Record
		if json.Unmarshal(v, &rec) != nil {
			return true
		}
		bound, ok := bounds[rec.Registry]
		if rec.IdleMs > 0 {
			bound = time.Duration(rec.IdleMs) * time.Millisecond
		}
		// A routed handle is a deployment: the sweep would only park it,
		// and nothing holds its isolate (deployments.go).
		if ok && len(rec.Routes) == 0 && !served(rec.Registry, rec.Tenant) && now.Sub(rec.LastInvokedAt) > bound {
			due[[2]string{rec.Registry, rec.Tenant}] = true
		}
		// A handle with schedules needs an owner to fire its ticks
		// (schedules.go): its space is owned here.
		if ok && len(rec.Schedules) > 0 && !served(rec.Registry, rec.Tenant) {
			due[[2]string{rec.Registry, rec.Tenant}] = true
		}
		return true
	})
	if err != nil {
		return err
	}
	for sp := range due {
		owned, err := hasOwner(ctx, store.Space(sp[0], sp[1]))
		if err != nil {
			return err
		}
		if owned {
			continue
		}
		if err := s.own(ctx, sp[0], sp[1]); err != nil {
			continue // claimed meanwhile by a gateway that got a request
		}
	}
	if len(due) > 0 {
		s.SweepIdle()
	}
	return nil
}

// OwnedSpaces answers how many spaces this gateway owns and has loaded.
func (s *Store) OwnedSpaces() int {
	s.ownMu.Lock()
	defer s.ownMu.Unlock()
	return len(s.owned)
}

// storeLookupsKey carries the gate of Locate's store reads.
type storeLookupsKey struct{}

// StoreLookups is the gate on the store reads Locate makes for a key this
// gateway does not hold in what it owns: Allow answers whether one more
// read may be made now, Miss charges a read that found nothing (a key
// that names no handle, route or domain). A read that finds what the key
// names is not charged: a visitor asking for a handle that exists (while
// its space moves between gateways, say) spends nothing of its budget.
type StoreLookups struct {
	Allow func() bool
	Miss  func()
}

// WithStoreLookups answers ctx with a gate on the store reads Locate makes
// for a key it does not find in what this gateway owns: when the gate's
// Allow answers false, Locate answers QUOTA_EXCEEDED instead of reading.
// The Caddy module charges the misses to the visitor's address, since a
// made-up host is a store read on every request that names it.
func WithStoreLookups(ctx context.Context, gate StoreLookups) context.Context {
	return context.WithValue(ctx, storeLookupsKey{}, gate)
}

// Locate is the data plane's first step in a cluster: it finds the tenant
// whose handle key names (in memory when this gateway owns that tenant's
// space, else in the store: another gateway may have bound, moved or
// ended it since) and owns its space, or answers who does. A key that
// names nothing answers NOT_FOUND, whatever this gateway's memory still
// holds of spaces it does not own.
func (r *Registry) Locate(ctx context.Context, key string, resolve Resolve) error {
	_, err := r.locate(ctx, key, resolve)
	return err
}

// locate is Locate, answering the tenant it owned ("" on one machine).
func (r *Registry) locate(ctx context.Context, key string, resolve Resolve) (string, error) {
	s := r.store
	if s.opts.Own == nil {
		return "", nil
	}
	// Memory is current only for the spaces this gateway owns: a key
	// found there for another space may since have moved or ended.
	tenant := r.tenantOfKey(key, resolve)
	if tenant == "" || !s.owns(r.name, tenant) {
		gate, gated := ctx.Value(storeLookupsKey{}).(StoreLookups)
		if gated && !gate.Allow() {
			return "", fault.New(fault.QuotaExceeded, "This address asks for too many names this gateway has not seen; slow down.")
		}
		var err error
		if tenant, err = r.storedTenantOfKey(ctx, key, resolve); err != nil {
			return "", fault.Wrap(fault.Overloaded, err, "The cluster's store did not answer; try again.")
		}
		if tenant == "" {
			if gated {
				gate.Miss()
			}
			return "", fault.New(fault.NotFound, "No handler is deployed here.")
		}
	}
	return tenant, s.own(ctx, r.name, tenant)
}

// servable answers the record key names for a request Locate placed in
// tenant's space: in a cluster, only a record of that space while this
// gateway owns it (what memory holds of any other space may be stale).
func (r *Registry) servable(key string, resolve Resolve, tenant string) (*Record, error) {
	s := r.store
	s.mu.Lock()
	rec := r.lookupLocked(key, resolve)
	s.mu.Unlock()
	if s.opts.Own == nil {
		return rec, nil
	}
	if rec == nil || rec.Tenant != tenant {
		return nil, fault.New(fault.NotFound, "No handler is deployed here.")
	}
	if !s.owns(r.name, tenant) {
		// The space was let go between Locate and here (a lost lease).
		return nil, fault.New(fault.Overloaded, "This gateway no longer serves this tenant; try again.")
	}
	return rec, nil
}

// TenantOfKey answers the tenant whose handle key names, from memory (ok
// false when it names nothing here): what this gateway holds of every
// handle on one machine, and in a cluster of the spaces it owns, so a
// caller asks it after Locate. The data plane charges a visitor's request
// body to that tenant before it reads it (caddymodule/body.go).
func (r *Registry) TenantOfKey(key string, resolve Resolve) (tenant string, ok bool) {
	s := r.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec := r.lookupLocked(key, resolve); rec != nil {
		return rec.Tenant, true
	}
	return "", false
}

// tenantOfKey resolves key in memory.
func (r *Registry) tenantOfKey(key string, resolve Resolve) string {
	s := r.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec := r.lookupLocked(key, resolve); rec != nil {
		return rec.Tenant
	}
	return ""
}

// lookupLocked resolves key to this registry's record, or nil; s.mu is held.
// A route name is one DNS label and a domain at least two, so a key is
// looked up as one or the other, never both.
func (r *Registry) lookupLocked(key string, resolve Resolve) *Record {
	s := r.store
	var rec *Record
	if resolve&ResolveDomains != 0 && strings.IndexByte(key, '.') >= 0 {
		rec = s.domainTarget(r.name, key)
	} else if resolve&ResolveRoutes != 0 {
		if id, ok := s.routes[r.name][key]; ok {
			rec = s.records[id]
		}
	}
	if rec == nil && resolve&ResolveIDs != 0 {
		if cand := s.records[key]; cand != nil && cand.Registry == r.name {
			rec = cand
		}
	}
	return rec
}

// storedTenantOfKey resolves key in the store ("" when it names nothing).
func (r *Registry) storedTenantOfKey(ctx context.Context, k string, resolve Resolve) (string, error) {
	s := r.store
	tenantOfID := func(id string) (string, error) {
		v, err := s.w.Get(ctx, tableHandles, key(r.name, id))
		var rec Record
		if err != nil || v == nil || json.Unmarshal(v, &rec) != nil {
			return "", err
		}
		return rec.Tenant, nil
	}
	if resolve&ResolveDomains != 0 && strings.IndexByte(k, '.') >= 0 {
		v, err := s.w.Get(ctx, tableDomains, key(r.name, k))
		var d domainRecord
		if err != nil || v == nil || json.Unmarshal(v, &d) != nil {
			return "", err
		}
		return d.Tenant, nil
	}
	if resolve&ResolveRoutes != 0 {
		id, err := s.w.Get(ctx, tableRoutes, key(r.name, k))
		if err != nil {
			return "", err
		}
		if id != nil {
			return tenantOfID(string(id))
		}
	}
	if resolve&ResolveIDs != 0 {
		return tenantOfID(k)
	}
	return "", nil
}

// reloadSpace replaces what memory holds of a space with what the store
// holds, and closes the isolates this gateway held for it (another gateway
// may have served the space since: its handles start again, as after a
// failover). The caller holds the space's place in loading (own), not
// ownMu.
func (s *Store) reloadSpace(ctx context.Context, registry, tenant string) error {
	prefix := []byte(registry + "\x00")
	// Deploys given up on, marked by any gateway, are skipped and taken
	// back (writes.go).
	marked, err := s.marksOf(ctx, registry, tenant)
	if err != nil {
		return err
	}
	for _, r := range marked {
		go s.takeBackUntilLanded(r)
	}
	fresh := map[string]*Record{}
	err = s.w.Scan(ctx, tableHandles, store.Range{Prefix: prefix}, func(k, v []byte) bool {
		var rec Record
		// A deploy answered 503 whose take-back has not landed yet is
		// not brought back (writes.go).
		if json.Unmarshal(v, &rec) == nil && rec.Tenant == tenant && rec.Registry == registry && !s.takeBacks.has(rec.ID) && marked[rec.ID] == nil {
			fresh[rec.ID] = &rec
		}
		return true
	})
	if err != nil {
		return err
	}
	for _, rec := range fresh {
		if err := s.loadBody(ctx, rec); err != nil {
			return err
		}
	}
	routes := map[string]string{}
	err = s.w.Scan(ctx, tableRoutes, store.Range{Prefix: prefix}, func(k, v []byte) bool {
		if fresh[string(v)] != nil {
			routes[string(k[len(prefix):])] = string(v)
		}
		return true
	})
	if err != nil {
		return err
	}
	var domains []*domainRecord
	err = s.scanDomains(ctx, store.Range{Prefix: prefix}, func(_ string, d *domainRecord) {
		if d.Tenant == tenant {
			domains = append(domains, d)
		}
	})
	if err != nil {
		return err
	}
	histories, err := s.scanHistories(ctx, store.Range{Prefix: prefix}, tenant)
	if err != nil {
		return err
	}
	reserved := map[string]reservation{}
	err = s.scanReservations(ctx, store.Range{Prefix: prefix}, func(_, name string, res reservation) {
		if res.Tenant == tenant {
			reserved[name] = res
		}
	})
	if err != nil {
		return err
	}

	s.mu.Lock()
	var closing []string
	for id, rec := range s.records {
		if rec.Registry == registry && rec.Tenant == tenant {
			delete(s.records, id)
			delete(s.dirty, id)
			delete(s.live, id)
			closing = append(closing, id)
		}
	}
	for id, rec := range fresh {
		s.records[id] = rec
	}
	if s.routes[registry] == nil {
		s.routes[registry] = map[string]string{}
	}
	for name, id := range s.routes[registry] {
		if _, ok := s.records[id]; !ok || fresh[id] != nil {
			delete(s.routes[registry], name)
		}
	}
	for name, id := range routes {
		s.routes[registry][name] = id
	}
	for host, claims := range s.domains[registry] {
		if claims.of(tenant) != nil {
			s.dropClaim(registry, host, tenant)
		}
	}
	for _, d := range domains {
		s.setClaim(registry, d)
	}
	s.replaceHistoriesLocked(registry, tenant, histories[registry])
	if s.reserved[registry] == nil {
		s.reserved[registry] = map[string]reservation{}
	}
	for name, res := range s.reserved[registry] {
		if res.Tenant == tenant {
			delete(s.reserved[registry], name)
		}
	}
	for name, res := range reserved {
		s.reserved[registry][name] = res
	}
	s.mu.Unlock()
	for _, id := range closing {
		s.opts.Executor.Close(id)
	}
	// The lists of firings memory holds may be older than the store's
	// (schedulefirings.go): read again at their next flush.
	s.forgetFirings(closing...)
	s.forgetFirings(slices.Collect(maps.Keys(fresh))...)
	return nil
}
