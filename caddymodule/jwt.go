package caddymodule

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/caddyauth"
	"go.uber.org/zap"

	"github.com/retainer-gw/retainer/authz"
	"github.com/retainer-gw/retainer/fault"
)

func init() {
	caddy.RegisterModule(JWTProvider{})
	caddy.RegisterModule(JWTHandler{})
}

// Request variables through which retainer_jwt tells the data plane which
// cookie or query parameter carried the gateway's credentials.
const (
	jwtCookieVar = "retainer_jwt.cookie"
	jwtQueryVar  = "retainer_jwt.query"
)

// jwksPool shares one JWKS cache per URL across config reloads.
var jwksPool = caddy.NewUsagePool()

type jwksEntry struct{ *authz.JWKS }

func (e jwksEntry) Destruct() error { e.Close(); return nil }

// tokenExpiresKey names the user metadata that says when the token stops
// being accepted.
const tokenExpiresKey = "token_expires"

// tokenIssuedKey names the user metadata that says when the token was
// issued (its iat, Unix seconds): a tenant's plan changes only for a token
// issued later than the one that recorded it (docs/usage.md).
const tokenIssuedKey = "token_issued"

// JWTProvider authenticates a bearer token (module
// http.authentication.providers.retainer_jwt). A valid token sets
// {http.auth.user.id} to its tenant claim, {http.auth.user.scope} to its
// scopes, and {http.auth.user.<claim>} for each configured claim. A bad or
// missing token is "not authenticated" with a WWW-Authenticate: Bearer
// challenge (RFC 6750); only technical failures are errors. Tokens are
// never logged.
type JWTProvider struct {
	// Secret is an HMAC secret used as its raw bytes; placeholders such as
	// {env.RETAINER_JWT_SECRET} are replaced. At least 32 bytes.
	Secret string `json:"secret,omitempty"`
	// SecretBase64 is an HMAC secret in base64 (placeholders replaced).
	SecretBase64 string `json:"secret_base64,omitempty"`
	// KeyFiles are PEM public keys or certificates.
	KeyFiles []string `json:"key_files,omitempty"`
	// JWKS is a key set URL, cached and refreshed.
	JWKS string `json:"jwks,omitempty"`
	// JWKSRefresh is the key set's refresh interval. Default 1h.
	JWKSRefresh caddy.Duration `json:"jwks_refresh,omitempty"`
	// Issuer must equal the iss claim when set.
	Issuer string `json:"issuer,omitempty"`
	// Audience must be in the aud claim when set.
	Audience string `json:"audience,omitempty"`
	// TenantClaim names the tenant's claim. Default "sub".
	TenantClaim string `json:"tenant_claim,omitempty"`
	// Leeway tolerates clock skew. Default 60s.
	Leeway caddy.Duration `json:"leeway,omitempty"`
	// Claims become {http.auth.user.<claim>} placeholders.
	Claims []string `json:"claims,omitempty"`
	// RequireClaims must be present in a token.
	RequireClaims []string `json:"require_claims,omitempty"`
	// Cookie, when set, is read for the token if no Authorization header.
	Cookie string `json:"cookie,omitempty"`
	// Query, when set, is a query parameter read for the token.
	Query string `json:"query,omitempty"`
	// MaxTokenBytes refuses longer tokens. Default 8 KiB.
	MaxTokenBytes int `json:"max_token_bytes,omitempty"`

	verifier *authz.Verifier
	jwksKey  string
	logger   *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (JWTProvider) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.authentication.providers.retainer_jwt", New: func() caddy.Module { return new(JWTProvider) }}
}

// Provision builds the verifier. A secret shorter than 32 bytes (also one
// that is empty after its placeholder is replaced) stops the config.
func (p *JWTProvider) Provision(ctx caddy.Context) error {
	p.logger = ctx.Logger()
	repl := caddy.NewReplacer()
	cfg := authz.Config{
		Issuer: p.Issuer, Audience: p.Audience, TenantClaim: p.TenantClaim,
		Leeway: time.Duration(p.Leeway), Claims: p.Claims, RequiredClaims: p.RequireClaims,
		MaxTokenBytes: p.MaxTokenBytes,
	}
	if app, err := ctx.AppIfConfigured("retainer"); err == nil {
		// The plan claim reaches retainer_api as {http.auth.user.<claim>}
		// (docs/usage.md).
		if a, ok := app.(*App); ok && a.Plans != nil && !slices.Contains(cfg.Claims, a.Plans.claim()) {
			cfg.Claims = append(slices.Clone(cfg.Claims), a.Plans.claim())
		}
	}
	if p.Secret != "" {
		cfg.Secret = []byte(repl.ReplaceAll(p.Secret, ""))
		if len(cfg.Secret) == 0 {
			return fmt.Errorf("retainer_jwt: the secret %q is empty after its placeholders are replaced", p.Secret)
		}
	}
	if p.SecretBase64 != "" {
		raw := repl.ReplaceAll(p.SecretBase64, "")
		b, err := base64.StdEncoding.DecodeString(raw)
		if err != nil {
			return fmt.Errorf("retainer_jwt: secret_base64: %w", err)
		}
		if len(b) == 0 {
			return fmt.Errorf("retainer_jwt: secret_base64 is empty after its placeholders are replaced")
		}
		cfg.Secret = b
	}
	for _, f := range p.KeyFiles {
		data, err := os.ReadFile(repl.ReplaceAll(f, ""))
		if err != nil {
			return fmt.Errorf("retainer_jwt: reading key %s: %w", f, err)
		}
		cfg.PEMKeys = append(cfg.PEMKeys, data)
	}
	if p.JWKS != "" {
		p.jwksKey = p.JWKS
		val, _, err := jwksPool.LoadOrNew(p.jwksKey, func() (caddy.Destructor, error) {
			j, err := authz.NewJWKS(p.JWKS, authz.JWKSOptions{
				Refresh: time.Duration(p.JWKSRefresh),
				OnError: func(err error) { p.logger.Warn("refreshing the JWKS", zap.String("url", p.JWKS), zap.Error(err)) },
			})
			if err != nil {
				return nil, err
			}
			return jwksEntry{j}, nil
		})
		if err != nil {
			p.jwksKey = ""
			return fmt.Errorf("retainer_jwt: %w", err)
		}
		cfg.JWKS = val.(jwksEntry).JWKS
	}
	v, err := authz.New(cfg)
	if err != nil {
		return fmt.Errorf("retainer_jwt: %w", err)
	}
	p.verifier = v
	return nil
}

// Cleanup releases the shared JWKS cache.
func (p *JWTProvider) Cleanup() error {
	if p.jwksKey != "" {
		_, err := jwksPool.Delete(p.jwksKey)
		return err
	}
	return nil
}

// token finds the bearer token and where it came from.
func (p *JWTProvider) token(r *http.Request) (tok, cookie, query string) {
	if h := r.Header.Get("Authorization"); h != "" {
		if len(h) > 7 && strings.EqualFold(h[:7], "Bearer ") {
			return strings.TrimSpace(h[7:]), "", ""
		}
		return "", "", ""
	}
	if p.Cookie != "" {
		if c, err := r.Cookie(p.Cookie); err == nil && c.Value != "" {
			return c.Value, p.Cookie, ""
		}
	}
	if p.Query != "" {
		if v := r.URL.Query().Get(p.Query); v != "" {
			return v, "", p.Query
		}
	}
	return "", "", ""
}

// Authenticate implements caddyauth.Authenticator.
func (p *JWTProvider) Authenticate(w http.ResponseWriter, r *http.Request) (caddyauth.User, bool, error) {
	tok, cookie, query := p.token(r)
	if cookie != "" {
		caddyhttp.SetVar(r.Context(), jwtCookieVar, cookie)
	}
	if query != "" {
		caddyhttp.SetVar(r.Context(), jwtQueryVar, query)
	}
	if tok == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="retainer"`)
		return caddyauth.User{}, false, nil
	}
	id, err := p.verifier.Verify(r.Context(), tok)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return caddyauth.User{}, false, err
		}
		// The reason, never the token.
		if ce := p.logger.Check(zap.DebugLevel, "token refused"); ce != nil {
			ce.Write(zap.Error(err), zap.String("remote_ip", r.RemoteAddr))
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="retainer", error="invalid_token"`)
		return caddyauth.User{}, false, nil
	}
	meta := map[string]string{"scope": strings.Join(id.Scopes, " ")}
	for k, v := range id.Claims {
		meta[k] = v
	}
	if !id.Expires.IsZero() {
		// When the token stops being accepted ({http.auth.user.token_expires},
		// Unix seconds): an executor socket it opened is closed then.
		meta[tokenExpiresKey] = strconv.FormatInt(id.Expires.Unix(), 10)
	}
	if !id.IssuedAt.IsZero() {
		meta[tokenIssuedKey] = strconv.FormatInt(id.IssuedAt.Unix(), 10)
	}
	return caddyauth.User{ID: id.Tenant, Metadata: meta}, true, nil
}

// JWTHandler is what the `retainer_jwt` directive places: it authenticates
// with JWTProvider and, unlike Caddy's authentication handler, answers a
// failure itself with the UNAUTHENTICATED JSON envelope.
type JWTHandler struct {
	JWTProvider
}

// CaddyModule returns the Caddy module information.
func (JWTHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.retainer_jwt", New: func() caddy.Module { return new(JWTHandler) }}
}

// ServeHTTP authenticates, sets the user placeholders, and calls next.
func (h *JWTHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	user, ok, err := h.Authenticate(w, r)
	if err != nil {
		return caddyhttp.Error(http.StatusInternalServerError, err)
	}
	if !ok {
		msg := "A bearer token is required."
		if strings.Contains(w.Header().Get("WWW-Authenticate"), "invalid_token") {
			msg = "The bearer token is not valid."
		}
		writeFault(w, fault.New(fault.Unauthenticated, "%s", msg), "")
		return nil
	}
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	repl.Set("http.auth.user.id", user.ID)
	for k, v := range user.Metadata {
		repl.Set("http.auth.user."+k, v)
	}
	return next.ServeHTTP(w, r)
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*JWTProvider)(nil)
	_ caddy.CleanerUpper          = (*JWTProvider)(nil)
	_ caddyauth.Authenticator     = (*JWTProvider)(nil)
	_ caddyhttp.MiddlewareHandler = (*JWTHandler)(nil)
)
