package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"
	"time"
	_ "unsafe" // go:linkname, below

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
	"github.com/caddyserver/certmagic"
	"github.com/retainer-gw/retainer/budgets"
	"go.uber.org/zap"
)

func init() {
	caddy.RegisterModule(TLSPermission{})
}

// TLSPermission (`tls.permission.retainer`) lets on-demand TLS obtain or
// load a certificate only for the active domains of one registry
// (docs/domains.md): no outside service is asked, and no certificate is
// ever issued for a host nobody verified. Certificates cost the operator
// (each is an order on its ACME account): a tenant's domains get at most
// the `retainer` app's issuance_per_hour new ones in a clock hour; a host
// whose certificate is in storage is not new. Denied handshakes are logged
// at most once a second per host.
//
//	{
//		on_demand_tls {
//			permission retainer <registry>
//		}
//	}
type TLSPermission struct {
	// Registry names the registry whose domains may have certificates.
	// Default "default".
	Registry string `json:"registry,omitempty"`

	live    *started
	storage certmagic.Storage
	logger  *zap.Logger
	denials *denialLog
	// lookups gates, in a cluster, the store reads for hosts this gateway
	// does not hold (handles.Registry.ActiveDomainTenantNow): one bucket
	// for every name, as a handshake's asker has no address here.
	lookups *lookupBuckets
}

// CaddyModule returns the Caddy module information.
func (TLSPermission) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "tls.permission.retainer", New: func() caddy.Module { return new(TLSPermission) }}
}

// UnmarshalCaddyfile reads `retainer [<registry>]`.
func (p *TLSPermission) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	if d.NextArg() {
		p.Registry = d.Val()
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

// Provision finds the registry once the app has started.
func (p *TLSPermission) Provision(ctx caddy.Context) error {
	appIface, err := ctx.App("retainer")
	if err != nil {
		return fmt.Errorf("tls.permission.retainer: %w", err)
	}
	app := appIface.(*App)
	if p.Registry == "" {
		p.Registry = "default"
	}
	p.live = new(started)
	p.storage = ctx.Storage()
	p.logger = ctx.Logger()
	p.denials = new(denialLog)
	p.lookups = new(lookupBuckets)
	app.whenStarted(func(rt *runtime) {
		p.live.rt.Store(rt)
		p.live.reg.Store(app.registry(rt, p.Registry))
	})
	return nil
}

// CertificateAllowed answers nil only for an active domain whose tenant
// has not used up its new certificates this hour, or whose certificate is
// in storage already.
func (p *TLSPermission) CertificateAllowed(ctx context.Context, name string) error {
	reg, rt := p.live.reg.Load(), p.live.rt.Load()
	if reg == nil || rt == nil {
		return fmt.Errorf("%s: the gateway is starting", name)
	}
	tenant, err := reg.ActiveDomainTenantNow(ctx, name, p.lookups.gate(""))
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if tenant == "" {
		err := fmt.Errorf("%s is not an active domain of registry %s", name, p.Registry)
		if p.denials.first(name, time.Now()) {
			p.logger.Debug("certificate refused", zap.String("server_name", name), zap.Error(err))
		}
		return err
	}
	if certificateStored(ctx, p.storage, name) {
		return nil
	}
	limit := rt.app.Load().IssuancePerHour
	if n, ok := rt.issuance.allow(p.Registry, tenant, strings.ToLower(name), limit, time.Now()); !ok {
		err := fmt.Errorf("%s: its tenant's domains got %d new certificates this hour, the most issuance_per_hour allows", name, n)
		if p.denials.first(name, time.Now()) {
			p.logger.Warn("certificate refused: the tenant's issuance budget is spent until the hour turns",
				zap.String("server_name", name), zap.String("registry", p.Registry), zap.String("tenant", tenant), zap.Int("issuance_per_hour", limit))
		}
		return err
	}
	return nil
}

// issuanceBook counts the hosts each tenant got a new certificate for in
// the current clock hour; it starts empty when the hour turns, so it holds
// at most issuance_per_hour hosts a tenant.
type issuanceBook struct {
	mu    sync.Mutex
	hour  time.Time
	hosts map[string]map[string]bool // registry and tenant → hosts
}

// allow counts host for the tenant unless limit hosts are counted this
// hour already (a host counted is allowed again: a retry, or a second
// handshake while the first waits for the CA); it answers the count.
func (b *issuanceBook) allow(registry, tenant, host string, limit int, now time.Time) (int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := now.Truncate(time.Hour); !h.Equal(b.hour) || b.hosts == nil {
		b.hour, b.hosts = h, map[string]map[string]bool{}
	}
	space := registry + "\x00" + tenant
	hosts := b.hosts[space]
	if hosts[host] {
		return len(hosts), true
	}
	if len(hosts) >= limit {
		return len(hosts), false
	}
	if hosts == nil {
		hosts = map[string]bool{}
		b.hosts[space] = hosts
	}
	hosts[host] = true
	return len(hosts), true
}

// denialLog lets a denied handshake be logged once a second per host,
// and at most budgets.TLSDenialLogsPerSecond hosts a second in all (a scanner sends any
// names it likes).
type denialLog struct {
	mu     sync.Mutex
	second time.Time
	hosts  map[string]bool
}

func (l *denialLog) first(host string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := now.Truncate(time.Second); !s.Equal(l.second) || l.hosts == nil {
		l.second, l.hosts = s, map[string]bool{}
	}
	if l.hosts[host] || len(l.hosts) >= budgets.TLSDenialLogsPerSecond {
		return false
	}
	l.hosts[host] = true
	return true
}

// certificateStored reports whether storage holds a certificate for host
// from any issuer (Caddy then loads it: nothing new is issued).
func certificateStored(ctx context.Context, storage certmagic.Storage, host string) bool {
	if storage == nil {
		return false
	}
	for _, issuer := range certIssuers(ctx, storage) {
		if storage.Exists(ctx, certmagic.StorageKeys.SiteCert(issuer, host)) {
			return true
		}
	}
	return false
}

// certIssuers are the issuer keys storage holds certificates of.
func certIssuers(ctx context.Context, storage certmagic.Storage) []string {
	dirs, _ := storage.List(ctx, "certificates", false)
	out := make([]string, 0, len(dirs))
	for _, d := range dirs {
		out = append(out, path.Base(d))
	}
	return out
}

// forgetCertificates drops hosts' certificates from Caddy's cache at once
// (the next handshake asks the permission, which says no) and from its
// storage in the background (a deleted domain keeps nothing of it).
func (rt *runtime) forgetCertificates(hosts []string) {
	evictCertificates(hosts)
	a := rt.app.Load()
	if a == nil || a.ctx.Context == nil {
		return
	}
	storage, logger := a.ctx.Storage(), a.logger
	if storage == nil {
		return
	}
	go func() {
		defer func() { recover() }()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, issuer := range certIssuers(ctx, storage) {
			for _, h := range hosts {
				site := certmagic.StorageKeys.CertsSitePrefix(issuer, h)
				if !storage.Exists(ctx, site) {
					continue
				}
				for _, k := range []string{certmagic.StorageKeys.SiteCert(issuer, h), certmagic.StorageKeys.SitePrivateKey(issuer, h), certmagic.StorageKeys.SiteMeta(issuer, h), site} {
					if err := storage.Delete(ctx, k); err != nil && !errors.Is(err, fs.ErrNotExist) {
						logger.Warn("removing a deleted domain's certificate from storage", zap.String("key", k), zap.Error(err))
					}
				}
			}
		}
	}()
}

// Caddy keeps the certificates it obtained on demand in one cache and
// serves them without asking the permission again. A host that stops being
// a domain must stop being served at once, and Caddy exports no way to
// drop one name: its cache is reached by name instead, pinned to the Caddy
// version in go.mod (TestCustomDomainOverHTTPS fails if it moves).
//
//go:linkname caddyCertCache github.com/caddyserver/caddy/v2/modules/caddytls.certCache
var caddyCertCache *certmagic.Cache

//go:linkname caddyCertCacheMu github.com/caddyserver/caddy/v2/modules/caddytls.certCacheMu
var caddyCertCacheMu sync.RWMutex

// evictCertificates drops the managed certificates of hosts from Caddy's
// cache: the next handshake for one asks the permission, which says no.
func evictCertificates(hosts []string) {
	caddyCertCacheMu.RLock()
	defer caddyCertCacheMu.RUnlock()
	if caddyCertCache == nil {
		return
	}
	subjects := make([]certmagic.SubjectIssuer, len(hosts))
	for i, h := range hosts {
		subjects[i] = certmagic.SubjectIssuer{Subject: h}
	}
	caddyCertCache.RemoveManaged(subjects)
}

// Interface guards.
var (
	_ caddytls.OnDemandPermission = (*TLSPermission)(nil)
	_ caddy.Provisioner           = (*TLSPermission)(nil)
	_ caddyfile.Unmarshaler       = (*TLSPermission)(nil)
)
