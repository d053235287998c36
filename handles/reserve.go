package handles

import (
	"encoding/json"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
)

// Route names and domain hosts freed by their handle's end stay reserved
// to their tenant for routeReservation (docs/architecture.md, "Budgets"): a
// deployment ended by a bound, an idle sweep or a crash must never hand its
// customers' traffic (webhooks with their credentials, say) to whichever
// tenant binds the name next. Only the tenant it was reserved to may bind
// it meanwhile; an unbind the tenant asks for frees the name at once.
// Reservations are kept in the store, so a restart does not release them.
// Route names and hosts share one table: a route name is one DNS label and
// a host at least two, so they never collide.

// routeReservation is how long a freed route name stays its tenant's.
const routeReservation = budgets.NameReservation

var bucketReserved = []byte("reserved")

// reservation is a freed route name's owner and how long it stays so.
type reservation struct {
	Tenant string    `json:"tenant"`
	Until  time.Time `json:"until"`
}

// reservedTo answers the tenant a free route name is reserved to, or "".
// s.mu is held.
func (s *Store) reservedTo(registry, name string) string {
	res, ok := s.reserved[registry][name]
	if !ok || !s.opts.Now().Before(res.Until) {
		return ""
	}
	return res.Tenant
}

// reserveTx records that the routes of rec, freed by its end, are its
// tenant's for routeReservation; s.mu is not held (the caller's records
// already dropped the routes).
func (s *Store) reserve(tx *bolt.Tx, rec *Record, names []string) {
	until := s.opts.Now().Add(routeReservation)
	res := reservation{Tenant: rec.Tenant, Until: until}
	data, _ := json.Marshal(res)
	s.mu.Lock()
	if s.reserved[rec.Registry] == nil {
		s.reserved[rec.Registry] = map[string]reservation{}
	}
	for _, name := range names {
		s.reserved[rec.Registry][name] = res
	}
	s.mu.Unlock()
	b := tx.Bucket(bucketReserved)
	for _, name := range names {
		b.Put(key(rec.Registry, name), data)
	}
}

// unreserve drops a reservation its tenant has used (a bind). Called in
// the bind's transaction; s.mu is not held.
func (s *Store) unreserve(tx *bolt.Tx, registry, name string) {
	s.mu.Lock()
	delete(s.reserved[registry], name)
	s.mu.Unlock()
	tx.Bucket(bucketReserved).Delete(key(registry, name))
}

// sweepReservations forgets the reservations that have run out.
func (s *Store) sweepReservations() {
	now := s.opts.Now()
	var gone [][]byte
	s.mu.Lock()
	for reg, names := range s.reserved {
		for name, res := range names {
			if !now.Before(res.Until) {
				delete(names, name)
				gone = append(gone, key(reg, name))
			}
		}
	}
	s.mu.Unlock()
	s.deleteKeys(bucketReserved, gone)
}

// deleteKeys deletes keys from bucket in one transaction (a sweep's).
func (s *Store) deleteKeys(bucket []byte, keys [][]byte) {
	if len(keys) == 0 {
		return
	}
	s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		for _, k := range keys {
			b.Delete(k)
		}
		return nil
	})
}

// loadReservations reads the reservations at Open.
func (s *Store) loadReservations(tx *bolt.Tx) error {
	return tx.Bucket(bucketReserved).ForEach(func(k, v []byte) error {
		reg, name, ok := splitKey(k)
		var res reservation
		if !ok || json.Unmarshal(v, &res) != nil {
			return nil // a corrupt reservation reserves nothing
		}
		if s.reserved[reg] == nil {
			s.reserved[reg] = map[string]reservation{}
		}
		s.reserved[reg][name] = res
		return nil
	})
}

// takenFault is the CONFLICT of a bind to a name another tenant holds,
// bound or reserved: both answer alike.
func takenFault(name string) error {
	return fault.New(fault.Conflict, "The route name %q is taken.", name)
}
