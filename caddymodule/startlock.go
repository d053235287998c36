package caddymodule

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// One gateway a store and a port (docs/decisions.md, "One gateway a store
// and a port"). A start is refused while it provisions, before any app
// starts (Caddy starts its apps in no set order, so its HTTP app may
// listen before the retainer app has opened the store):
//
//   - on a store another process holds (store.CheckBolt answers
//     store.ErrLocked at once; app.go), where it served 503 "starting"
//     for the 5 s OpenBolt waits for the lock, then failed; or another
//     gateway has claimed while its config provisioned (claimStore), so
//     that of two started at the same instant the later is refused;
//   - on a port another Retainer gateway serves, which Caddy would let
//     it bind beside the first (it listens with SO_REUSEPORT so that its
//     own reloads overlap) and take half its connections.
//
//   - on a port, its admin address's or a served one, that another
//     process (any, not only a gateway) listens on beside it
//     (sharedListeners, sharedport_linux.go): Caddy binds the admin
//     endpoint before it provisions the apps, with SO_REUSEPORT too, and
//     two gateways on one admin address each took part of its requests
//     (a reload, `/stop`).
//
// `caddy validate` provisions the same config and never starts it, and
// works beside the running gateway (README.md): it is refused neither.

// validating reports whether the config being provisioned is
// caddy.Validate's (`caddy validate`, `caddy adapt --validate`):
// provisioned, cleaned up, never started. Caddy hands a module no sign of
// it (run(cfg, start) keeps its flag to itself, and Provision is the
// same call for both), so it is read from the call stack: the exported
// function, by its name (inlined or not, CallersFrames names it).
// TestOperatorCommands validates the running gateway's config beside it,
// store and port held, and fails if a Caddy upgrade renames it.
func validating() bool {
	pc := make([]uintptr, 256)
	frames := goruntime.CallersFrames(pc[:goruntime.Callers(2, pc)])
	for {
		f, more := frames.Next()
		if f.Function == "github.com/caddyserver/caddy/v2.Validate" {
			return true
		}
		if !more {
			return false
		}
	}
}

// listenClaims are the ports this process's gateway serves, each a lock
// that ends with the process (listenLock), counted by the configs that
// serve it: a reload provisions the new config before it cleans up the
// old one, so the count never drops to zero across it and no other
// gateway can take the port meanwhile.
var listenClaims = caddy.NewUsagePool()

// claimListen claims the ports of the HTTP server whose handler is being
// provisioned with ctx (the retainer and retainer_api handlers), for a
// as long as its config lives (released by Cleanup). A port another
// process's gateway holds refuses the start, unless this is
// `caddy validate`, which claims nothing.
func (a *App) claimListen(ctx caddy.Context) error {
	srv, ok := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok || validating() {
		return nil
	}
	for _, addr := range srv.Listen {
		keys, err := listenKeys(addr)
		if err != nil {
			return err
		}
		for _, k := range keys {
			_, _, err := listenClaims.LoadOrNew(k.key, func() (caddy.Destructor, error) {
				return lockListen(k.key, k.name)
			})
			if err != nil {
				return fmt.Errorf("listen address %s: %w", addr, err)
			}
			a.claims = append(a.claims, k.key)
		}
		// Another process on the port, not a Retainer gateway (a plain
		// Caddy), would share it all the same; and its UDP port where the
		// server answers HTTP/3 on it (Caddy's default for a server with
		// TLS: its QUIC listener binds with SO_REUSEPORT too).
		na, err := caddy.ParseNetworkAddress(addr)
		if err != nil || !strings.HasPrefix(na.Network, "tcp") {
			continue
		}
		networks := []string{na.Network}
		if len(srv.TLSConnPolicies) > 0 && slices.Contains(srv.Protocols, "h3") {
			networks = append(networks, "udp"+strings.TrimPrefix(na.Network, "tcp"))
		}
		for _, network := range networks {
			var ports []int
			for p := na.StartPort; p <= na.EndPort && p > 0; p++ {
				k := fmt.Sprintf("%s/%d", network[:3], p)
				if !a.checked[k] { // once a config, not each handler
					ports = append(ports, int(p))
					if a.checked == nil {
						a.checked = map[string]bool{}
					}
					a.checked[k] = true
				}
			}
			if len(ports) == 0 {
				continue
			}
			if err := sharedListeners(ports, network, na.Host); err != nil {
				return fmt.Errorf("listen address %s: %w", addr, err)
			}
		}
	}
	return nil
}

// claimStore claims this config's bbolt store for as long as the config
// lives, as a port is claimed: an abstract socket named by the store
// file's path, bound in one step while the config provisions, so that of
// two gateways started at the same instant on one store the later is
// refused at once. store.CheckBolt's look at the store's lock could not
// tell them apart: neither holds it until its app starts, so both passed
// it and the later waited 5 s in Start while its listeners answered 503.
// Not for `caddy validate`, nor a cluster's store (etcd's).
func (a *App) claimStore() error {
	if a.clustered() || validating() {
		return nil
	}
	key := storeClaim(a.Store)
	if _, _, err := listenClaims.LoadOrNew(key, func() (caddy.Destructor, error) {
		return lockListen(key, "store "+a.Store)
	}); err != nil {
		return err
	}
	a.claims = append(a.claims, key)
	return nil
}

// storeClaim is the claim's key of the bbolt store at path: its file's
// path made canonical, a link at the file itself followed.
func storeClaim(path string) string {
	path = canonicalFile(path)
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	return pathClaim("store/", path)
}

// pathClaim is the claim's key of a file at path (made canonical by the
// caller) under kind: the path's hash, so that any path fits the
// abstract socket's name.
func pathClaim(kind, path string) string {
	sum := sha256.Sum256([]byte(path))
	return kind + hex.EncodeToString(sum[:16])
}

// releaseClaims ends this config's claims (the last config of a port
// closes its lock).
func (a *App) releaseClaims() {
	for _, k := range a.claims {
		listenClaims.Delete(k)
	}
	a.claims = nil
}

// listenKey is a claim's lock's name and what an error calls it.
type listenKey struct {
	key  string
	name string
}

// listenKeys are the claims of a server's listen address: a port of the
// machine for TCP and UDP, whatever its host (with SO_REUSEPORT a
// gateway on 127.0.0.1:p would take localhost's connections from one on
// :p), or a Unix socket's path (Caddy unlinks a socket's file before it
// listens, and would take the whole socket). A file descriptor (socket
// activation) claims nothing: it is the service manager's.
func listenKeys(addr string) ([]listenKey, error) {
	na, err := caddy.ParseNetworkAddress(addr)
	if err != nil {
		return nil, err
	}
	if na.IsUnixNetwork() {
		// Caddy's "path|bits" spelling sets the socket file's mode: the
		// same path (Caddy cuts it at the first "|", as here).
		path, _, _ := strings.Cut(na.Host, "|")
		return []listenKey{{key: pathClaim("unix/", canonicalFile(path)), name: "socket " + path}}, nil
	}
	if !strings.HasPrefix(na.Network, "tcp") && !strings.HasPrefix(na.Network, "udp") {
		return nil, nil
	}
	var keys []listenKey
	for p := na.StartPort; p <= na.EndPort && p > 0; p++ {
		keys = append(keys, listenKey{key: fmt.Sprintf("port/%d", p), name: fmt.Sprintf("port %d", p)})
	}
	return keys, nil
}
