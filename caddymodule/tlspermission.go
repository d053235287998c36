package caddymodule

import (
	"context"
	"fmt"
	"sync"
	_ "unsafe" // go:linkname, below

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
	"github.com/caddyserver/certmagic"
)

func init() {
	caddy.RegisterModule(TLSPermission{})
}

// TLSPermission (`tls.permission.retainer`) lets on-demand TLS obtain or
// load a certificate only for the active domains of one registry
// (docs/domains.md): no outside service is asked, and no certificate is
// ever issued for a host nobody verified.
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

	live *started
	// lookups gates, in a cluster, the store reads for hosts this gateway
	// does not hold (handles.Registry.DomainActiveNow): one bucket for
	// every name, as a handshake's asker has no address here.
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
	p.lookups = new(lookupBuckets)
	app.whenStarted(func(rt *runtime) { p.live.reg.Store(app.registry(rt, p.Registry)) })
	return nil
}

// CertificateAllowed answers nil only for an active domain.
func (p *TLSPermission) CertificateAllowed(ctx context.Context, name string) error {
	reg := p.live.reg.Load()
	if reg == nil {
		return fmt.Errorf("%s: the gateway is starting", name)
	}
	active, err := reg.DomainActiveNow(ctx, name, p.lookups.gate(""))
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if !active {
		return fmt.Errorf("%s is not an active domain of registry %s", name, p.Registry)
	}
	return nil
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
