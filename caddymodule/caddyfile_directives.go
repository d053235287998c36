package caddymodule

import (
	"net"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// The site directives' Caddyfile syntax (registered in caddyfile.go):
// retainer_api, retainer and retainer_jwt. The `retainer` global option
// and the helpers both use are caddyfile.go's.

// parseAPI parses:
//
//	retainer_api [<registry>] {
//		provider <name> {
//			tool <name> <upstream url>
//		}
//		outbound_allow_private
//		allow_anonymous
//		require_scopes
//		spawn_depth <n>
//		spawn_children <n>
//		generate {
//			endpoint <url>
//			model <name>
//			api_key <key or placeholder>
//			system <file>
//			timeout <duration>
//		}
//		ai {
//			endpoint <url>
//			api_key <key or placeholder>
//			model <name> [<upstream model>]
//			timeout <duration>
//		}
//		domains {
//			resolver <host:port>
//			target <cname>
//			reserved <zone...>
//		}
//	}
func parseAPI(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	api := new(API)
	h.Next()
	if h.NextArg() {
		api.Registry = h.Val()
	}
	if h.NextArg() {
		return nil, h.ArgErr()
	}
	for h.NextBlock(0) {
		switch h.Val() {
		case "provider":
			if !h.NextArg() {
				return nil, h.ArgErr()
			}
			name := h.Val()
			if api.Providers == nil {
				api.Providers = map[string]map[string]string{}
			}
			if _, dup := api.Providers[name]; dup {
				return nil, h.Errf("provider %q is declared twice", name)
			}
			tools := map[string]string{}
			for nest := h.Nesting(); h.NextBlock(nest); {
				if h.Val() != "tool" {
					return nil, h.Errf("unknown subdirective %q in provider %s (want tool)", h.Val(), name)
				}
				args := h.RemainingArgs()
				if len(args) != 2 {
					return nil, h.Err("tool takes a name and an upstream URL")
				}
				tools[args[0]] = args[1]
			}
			api.Providers[name] = tools
		case "outbound_allow_private":
			api.OutboundAllowPrivate = true
		case "allow_anonymous":
			api.AllowAnonymous = true
		case "require_scopes":
			api.RequireScopes = true
		case "spawn_depth", "spawn_children":
			name := h.Val()
			if !h.NextArg() {
				return nil, h.ArgErr()
			}
			n, err := positive(h.Dispenser, h.Val())
			if err != nil {
				return nil, err
			}
			if name == "spawn_depth" {
				api.SpawnDepth = n
			} else {
				api.SpawnChildren = n
			}
		case "ai":
			ai, err := parseAI(h.Dispenser)
			if err != nil {
				return nil, err
			}
			api.AI = ai
		case "generate":
			g := new(GenerateConfig)
			for nest := h.Nesting(); h.NextBlock(nest); {
				name := h.Val()
				if !h.NextArg() {
					return nil, h.ArgErr()
				}
				val := h.Val()
				if h.NextArg() {
					return nil, h.ArgErr()
				}
				switch name {
				case "endpoint":
					g.Endpoint = val
				case "model":
					g.Model = val
				case "api_key":
					g.APIKey = val
				case "system":
					g.System = val
				case "timeout":
					d, err := duration(h.Dispenser, val)
					if err != nil {
						return nil, err
					}
					g.Timeout = d
				default:
					return nil, h.Errf("unknown subdirective %q in generate (want endpoint, model, api_key, system or timeout)", name)
				}
			}
			api.Generate = g
		case "domains":
			d := new(DomainsConfig)
			for nest := h.Nesting(); h.NextBlock(nest); {
				name := h.Val()
				args := h.RemainingArgs()
				if len(args) == 0 || name != "reserved" && len(args) != 1 {
					return nil, h.ArgErr()
				}
				switch name {
				case "resolver":
					if _, _, err := net.SplitHostPort(args[0]); err != nil {
						return nil, h.Errf("resolver is a host:port, not %q", args[0])
					}
					d.Resolver = args[0]
				case "target":
					d.Target = args[0]
				case "reserved":
					d.Reserved = append(d.Reserved, args...)
				default:
					return nil, h.Errf("unknown subdirective %q in domains (want resolver, target or reserved)", name)
				}
			}
			api.Domains = d
		default:
			return nil, h.Errf("unknown subdirective %q in retainer_api", h.Val())
		}
		if h.NextArg() {
			return nil, h.ArgErr()
		}
	}
	return api, nil
}

// parseRetainer parses:
//
//	retainer [<registry>] {
//		key <placeholder>
//		resolve routes|ids|both|domains...
//		pass_credentials
//	}
func parseRetainer(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	r := new(Retainer)
	h.Next()
	if h.NextArg() {
		r.Registry = h.Val()
	}
	if h.NextArg() {
		return nil, h.ArgErr()
	}
	for h.NextBlock(0) {
		switch h.Val() {
		case "key":
			if !h.NextArg() {
				return nil, h.ArgErr()
			}
			r.Key = h.Val()
		case "resolve":
			words := h.RemainingArgs()
			if len(words) == 0 {
				return nil, h.ArgErr()
			}
			r.Resolve = strings.Join(words, " ")
			if _, err := parseResolve(r.Resolve); err != nil {
				return nil, h.Err(err.Error())
			}
		case "pass_credentials":
			r.PassCredentials = true
		default:
			return nil, h.Errf("unknown subdirective %q in retainer", h.Val())
		}
		if h.NextArg() {
			return nil, h.ArgErr()
		}
	}
	if r.Key == "" {
		return nil, h.Err("retainer needs a key, e.g. key {labels.2}")
	}
	return r, nil
}

// parseJWT parses:
//
//	retainer_jwt {
//		secret <secret or placeholder>
//		secret_base64 <base64>
//		key <pem file>
//		jwks <url>
//		jwks_refresh <duration>
//		issuer <iss>
//		audience <aud>
//		tenant_claim <claim>
//		leeway <duration>
//		claims <claim...>
//		require_claims <claim...>
//		cookie <name>
//		query <name>
//		max_token_size <size>
//	}
func parseJWT(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	j := new(JWTHandler)
	h.Next()
	if h.NextArg() {
		return nil, h.ArgErr()
	}
	for h.NextBlock(0) {
		name := h.Val()
		args := h.RemainingArgs()
		one := func() (string, error) {
			if len(args) != 1 {
				return "", h.ArgErr()
			}
			return args[0], nil
		}
		var err error
		switch name {
		case "secret":
			j.Secret, err = one()
		case "secret_base64":
			j.SecretBase64, err = one()
		case "key":
			var f string
			if f, err = one(); err == nil {
				j.KeyFiles = append(j.KeyFiles, f)
			}
		case "jwks":
			j.JWKS, err = one()
		case "jwks_refresh":
			var v string
			if v, err = one(); err == nil {
				j.JWKSRefresh, err = duration(h.Dispenser, v)
			}
		case "issuer":
			j.Issuer, err = one()
		case "audience":
			j.Audience, err = one()
		case "tenant_claim":
			j.TenantClaim, err = one()
		case "leeway":
			var v string
			if v, err = one(); err == nil {
				var d caddy.Duration
				if d, err = duration(h.Dispenser, v); err == nil {
					j.Leeway = d
				}
			}
		case "claims":
			if len(args) == 0 {
				return nil, h.ArgErr()
			}
			j.Claims = append(j.Claims, args...)
		case "require_claims":
			if len(args) == 0 {
				return nil, h.ArgErr()
			}
			j.RequireClaims = append(j.RequireClaims, args...)
		case "cookie":
			j.Cookie, err = one()
		case "query":
			j.Query, err = one()
		case "max_token_size":
			var v string
			if v, err = one(); err == nil {
				var n int64
				if n, err = size(h.Dispenser, v); err == nil {
					j.MaxTokenBytes = int(n)
				}
			}
		default:
			return nil, h.Errf("unknown subdirective %q in retainer_jwt", name)
		}
		if err != nil {
			return nil, err
		}
	}
	if j.Secret == "" && j.SecretBase64 == "" && len(j.KeyFiles) == 0 && j.JWKS == "" {
		return nil, h.Err("retainer_jwt needs a secret, a key or a jwks URL")
	}
	return j, nil
}
