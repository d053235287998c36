package handles

import (
	"math/rand/v2"
	"strings"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
)

// A split (docs/deployments.md): a route bound to 2–4 of its tenant's
// handles at whole percentages summing to 100. Each new request goes to
// one of them at those weights; a visitor whose request carries the
// cookie VersionCookie naming one of them stays on it, and a visitor
// without one is given it with the first answer. The route's executionId
// is the split's first handle (which ends the route if it ends, as for a
// plain bind); a later handle of the split that ends leaves the others to
// share its traffic. A plain bind ends the split. The split is the route's
// current version (versions.go), stored with it: every gateway of a
// cluster honours it.

// VersionCookie pins a visitor to one handle of a split.
const VersionCookie = "retainer-version"

// Share is one handle of a split and its percentage.
type Share struct {
	ExecutionID string `json:"executionId"`
	Percent     int    `json:"percent"`
}

// BindRoute points name at the tenant's handle id; a later bind moves
// the name atomically, and ends a split.
func (r *Registry) BindRoute(tenant, name, id string) (Route, error) {
	return r.bindBounded(tenant, name, id, nil)
}

// BindSplit points name at a split of the tenant's handles.
func (r *Registry) BindSplit(tenant, name string, split []Share) (Route, error) {
	if err := r.checkSplit(tenant, split); err != nil {
		return Route{}, err
	}
	return r.bindBounded(tenant, name, split[0].ExecutionID, split)
}

// checkSplit answers BAD_REQUEST unless split is 2–4 distinct handles of
// the tenant at whole percentages of at least 1 summing to 100. A handle
// that is not the tenant's is refused exactly as one that never existed.
func (r *Registry) checkSplit(tenant string, split []Share) error {
	if len(split) < 2 || len(split) > 4 {
		return fault.New(fault.BadRequest, "A split names 2 to 4 handles, not %d.", len(split))
	}
	sum := 0
	seen := map[string]bool{}
	for _, sh := range split {
		if sh.Percent < 1 || sh.Percent > 99 {
			return fault.New(fault.BadRequest, "A split's percent is a whole number from 1 to 99, not %d.", sh.Percent)
		}
		if seen[sh.ExecutionID] {
			return fault.New(fault.BadRequest, "A split names handle %q twice.", sh.ExecutionID)
		}
		seen[sh.ExecutionID] = true
		sum += sh.Percent
		if _, err := r.owned(tenant, sh.ExecutionID); err != nil {
			return fault.New(fault.BadRequest, "A split's handles are the tenant's live handles; %q is not one.", sh.ExecutionID)
		}
	}
	if sum != 100 {
		return fault.New(fault.BadRequest, "A split's percentages sum to 100, not %d.", sum)
	}
	return nil
}

// splitLocked answers the handle of rec's split that serves req, when key
// resolved to rec through a route (or a domain following one) that is
// split; else rec. pinned is false when the visitor carried no cookie
// naming one of the split's live handles. s.mu is held.
func (r *Registry) splitLocked(key string, resolve Resolve, rec *Record, req program.WireRequest) (chosen *Record, split, pinned bool) {
	s := r.store
	name := ""
	if resolve&ResolveDomains != 0 && strings.IndexByte(key, '.') >= 0 {
		if d := s.domains[r.name][strings.ToLower(key)].active(); d != nil {
			name = d.Route
		}
	} else if resolve&ResolveRoutes != 0 {
		name = key
	}
	if name == "" || s.routes[r.name][name] != rec.ID {
		return rec, false, false
	}
	shares := s.history[r.name][name].split()
	if len(shares) == 0 {
		return rec, false, false
	}
	live := make([]*Record, 0, len(shares))
	total := 0
	for _, sh := range shares {
		if m := s.records[sh.ExecutionID]; m != nil && m.Tenant == rec.Tenant && m.Registry == r.name {
			live = append(live, m)
			total += sh.Percent
		} else {
			live = append(live, nil)
		}
	}
	if pin := cookie(req, VersionCookie); pin != "" {
		for _, m := range live {
			if m != nil && m.ID == pin {
				return m, true, true
			}
		}
	}
	if total == 0 {
		return rec, true, false
	}
	n := rand.IntN(total)
	for i, sh := range shares {
		if live[i] == nil {
			continue
		}
		if n < sh.Percent {
			return live[i], true, false
		}
		n -= sh.Percent
	}
	return rec, true, false
}

// liveSplitLocked answers the members of split that are still the
// tenant's live handles, as a route's answer shows them; nil when fewer
// than two are left (the route then serves its executionId alone, as a
// plain bind). s.mu is held.
func (s *Store) liveSplitLocked(registry, tenant string, split []Share) []Share {
	var live []Share
	for _, sh := range split {
		if m := s.records[sh.ExecutionID]; m != nil && m.Tenant == tenant && m.Registry == registry {
			live = append(live, sh)
		}
	}
	if len(live) < 2 {
		return nil
	}
	return live
}

// pinCookie is the Set-Cookie header that keeps a visitor on id.
func pinCookie(id string) [2]string {
	return [2]string{"Set-Cookie", VersionCookie + "=" + id + "; Path=/; HttpOnly; SameSite=Lax"}
}

// cookie is the value of the request's cookie name, or "".
func cookie(req program.WireRequest, name string) string {
	for _, h := range req.Headers {
		if !strings.EqualFold(h[0], "cookie") {
			continue
		}
		for _, part := range strings.Split(h[1], ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
			if ok && k == name {
				return strings.Trim(v, `"`)
			}
		}
	}
	return ""
}
