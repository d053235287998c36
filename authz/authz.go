package authz

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// Scopes gating the control plane (README.md, Caddyfile).
const (
	ScopeExecute = "retainer:execute"
	ScopeDeploy  = "retainer:deploy"
	ScopeRead    = "retainer:read"
)

// MinSecretBytes is the shortest HMAC secret accepted.
const MinSecretBytes = 32

// Config describes how tokens are verified.
type Config struct {
	// Secret is an HMAC secret, used as its raw bytes.
	Secret []byte
	// PEMKeys are public keys (or certificates) in PEM form.
	PEMKeys [][]byte
	// JWKS is a key set fetched from a URL; see NewJWKS.
	JWKS *JWKS
	// Issuer, when set, must equal the iss claim.
	Issuer string
	// Audience, when set, must be among the aud claim's values.
	Audience string
	// Leeway tolerates clock skew on exp, nbf and iat. Default 60s.
	Leeway time.Duration
	// TenantClaim names the claim that holds the tenant. Default "sub".
	TenantClaim string
	// Claims are copied into Identity.Claims (as strings).
	Claims []string
	// RequiredClaims must be present.
	RequiredClaims []string
	// MaxTokenBytes refuses longer tokens unread. Default 8 KiB.
	MaxTokenBytes int
}

// Identity is a verified token.
type Identity struct {
	Tenant string
	Scopes []string
	Claims map[string]string
	// Expires is when the token stops being accepted: its exp plus the
	// leeway (a connection it opened ends then).
	Expires time.Time
	// IssuedAt is the token's iat (zero when it has none).
	IssuedAt time.Time
}

// HasScope reports whether the identity holds scope.
func (id Identity) HasScope(scope string) bool {
	for _, s := range id.Scopes {
		if s == scope {
			return true
		}
	}
	return false
}

// ErrInvalidToken wraps every reason a token is refused.
var ErrInvalidToken = errors.New("invalid token")

// Verifier checks tokens. Safe for concurrent use.
type Verifier struct {
	cfg    Config
	keys   []pinnedKey
	parser *jwt.Parser
}

// pinnedKey is a key with the algorithms it may verify.
type pinnedKey struct {
	key  any
	algs []string
}

// New builds a verifier; it refuses a configuration without keys or with a
// short secret.
func New(cfg Config) (*Verifier, error) {
	if cfg.Leeway == 0 {
		cfg.Leeway = 60 * time.Second
	}
	if cfg.TenantClaim == "" {
		cfg.TenantClaim = "sub"
	}
	if cfg.MaxTokenBytes <= 0 {
		cfg.MaxTokenBytes = 8 << 10
	}
	v := &Verifier{cfg: cfg}
	if cfg.Secret != nil {
		if len(cfg.Secret) < MinSecretBytes {
			return nil, fmt.Errorf("the JWT secret is %d bytes; at least %d are required", len(cfg.Secret), MinSecretBytes)
		}
		v.keys = append(v.keys, pinnedKey{key: cfg.Secret, algs: []string{"HS256", "HS384", "HS512"}})
	}
	for i, data := range cfg.PEMKeys {
		k, err := parsePEM(data)
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", i+1, err)
		}
		v.keys = append(v.keys, k)
	}
	if len(v.keys) == 0 && cfg.JWKS == nil {
		return nil, errors.New("no key: configure a secret, a PEM key or a JWKS URL")
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(allAlgs),
		jwt.WithLeeway(cfg.Leeway),
		jwt.WithIssuedAt(),
		jwt.WithExpirationRequired(),
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

// allAlgs is every algorithm a key may pin; "none" is not among them.
var allAlgs = []string{"HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"}

func parsePEM(data []byte) (pinnedKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return pinnedKey{}, errors.New("no PEM block")
	}
	var pub any
	switch block.Type {
	case "CERTIFICATE":
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return pinnedKey{}, err
		}
		pub = cert.PublicKey
	case "RSA PUBLIC KEY":
		k, err := x509.ParsePKCS1PublicKey(block.Bytes)
		if err != nil {
			return pinnedKey{}, err
		}
		pub = k
	default:
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return pinnedKey{}, fmt.Errorf("a PEM key must be a public key or certificate: %w", err)
		}
		pub = k
	}
	algs := algsFor(pub)
	if algs == nil {
		return pinnedKey{}, fmt.Errorf("unsupported key type %T", pub)
	}
	return pinnedKey{key: pub, algs: algs}, nil
}

// algsFor pins a key to the algorithms of its type.
func algsFor(key any) []string {
	switch k := key.(type) {
	case []byte:
		return []string{"HS256", "HS384", "HS512"}
	case *rsa.PublicKey:
		return []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return []string{"ES256"}
		case elliptic.P384():
			return []string{"ES384"}
		}
	case ed25519.PublicKey:
		return []string{"EdDSA"}
	}
	return nil
}

func allowed(key any, alg string) bool {
	for _, a := range algsFor(key) {
		if a == alg {
			return true
		}
	}
	return false
}

// unknownKIDWait is a quarter of the unknown-kid window, within 50 ms–5 s.
func unknownKIDWait(every time.Duration) time.Duration {
	return min(max(every/4, 50*time.Millisecond), 5*time.Second)
}

// MaxTenantBytes bounds a tenant id (README.md, API).
const MaxTenantBytes = 256

// ValidTenant checks a tenant id: non-empty, at most 256 bytes of UTF-8,
// no control characters (they would let ids collide in keys and logs).
func ValidTenant(t string) error {
	if t == "" {
		return errors.New("is empty")
	}
	if len(t) > MaxTenantBytes {
		return fmt.Errorf("is over %d bytes", MaxTenantBytes)
	}
	if !utf8.ValidString(t) {
		return errors.New("is not UTF-8")
	}
	for _, r := range t {
		if unicode.IsControl(r) {
			return errors.New("holds a control character")
		}
	}
	return nil
}

// Verify checks a token and answers its identity. Errors wrap
// ErrInvalidToken and never contain the token.
func (v *Verifier) Verify(ctx context.Context, token string) (Identity, error) {
	if len(token) > v.cfg.MaxTokenBytes {
		return Identity{}, fmt.Errorf("%w: over %d bytes", ErrInvalidToken, v.cfg.MaxTokenBytes)
	}
	claims := jwt.MapClaims{}
	_, err := v.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		// RFC 7515 §4.1.11: a header parameter listed in crit that the
		// verifier does not understand makes the token invalid, and this
		// verifier understands none.
		if crit, ok := t.Header["crit"]; ok {
			return nil, fmt.Errorf("the token's crit header names extensions this verifier does not understand (%v)", crit)
		}
		alg := t.Method.Alg()
		if v.cfg.JWKS != nil {
			key, err := v.cfg.JWKS.kf.KeyfuncCtx(ctx)(t)
			if err == nil {
				if set, ok := key.(jwt.VerificationKeySet); ok {
					var keep jwt.VerificationKeySet
					for _, k := range set.Keys {
						if allowed(k, alg) {
							keep.Keys = append(keep.Keys, k)
						}
					}
					if len(keep.Keys) > 0 {
						return keep, nil
					}
				} else if allowed(key, alg) {
					return key, nil
				}
			}
			if len(v.keys) == 0 {
				if err != nil {
					return nil, err
				}
				return nil, fmt.Errorf("no key in the key set verifies %s", alg)
			}
		}
		var set jwt.VerificationKeySet
		for _, k := range v.keys {
			for _, a := range k.algs {
				if a == alg {
					set.Keys = append(set.Keys, k.key)
				}
			}
		}
		if len(set.Keys) == 0 {
			return nil, fmt.Errorf("no configured key verifies %s", alg)
		}
		return set, nil
	})
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	id := Identity{Claims: map[string]string{}}
	tenant, ok := claims[v.cfg.TenantClaim].(string)
	if !ok || tenant == "" {
		return Identity{}, fmt.Errorf("%w: no %q claim", ErrInvalidToken, v.cfg.TenantClaim)
	}
	if err := ValidTenant(tenant); err != nil {
		return Identity{}, fmt.Errorf("%w: the %q claim %v", ErrInvalidToken, v.cfg.TenantClaim, err)
	}
	id.Tenant = tenant
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil {
		id.Expires = exp.Time.Add(v.cfg.Leeway)
	}
	if iat, err := claims.GetIssuedAt(); err == nil && iat != nil {
		id.IssuedAt = iat.Time
	}
	for _, c := range v.cfg.RequiredClaims {
		if _, ok := claims[c]; !ok {
			return Identity{}, fmt.Errorf("%w: the required claim %q is missing", ErrInvalidToken, c)
		}
	}
	switch s := claims["scope"].(type) {
	case string:
		id.Scopes = append(id.Scopes, strings.Fields(s)...)
	}
	switch s := claims["scp"].(type) {
	case string:
		id.Scopes = append(id.Scopes, strings.Fields(s)...)
	case []any:
		for _, x := range s {
			if str, ok := x.(string); ok {
				id.Scopes = append(id.Scopes, str)
			}
		}
	}
	for _, c := range v.cfg.Claims {
		if val, ok := claims[c]; ok {
			switch x := val.(type) {
			case string:
				id.Claims[c] = x
			default:
				id.Claims[c] = fmt.Sprint(x)
			}
		}
	}
	return id, nil
}

// JWKS is a remote key set: fetched, cached, refreshed on an interval, and
// refreshed (rate-limited) when a token names an unknown kid. Close stops
// its goroutine.
type JWKS struct {
	kf     keyfunc.Keyfunc
	cancel context.CancelFunc
}

// JWKSOptions tune a JWKS.
type JWKSOptions struct {
	// Refresh is the refresh interval. Default 1h.
	Refresh time.Duration
	// UnknownKIDEvery is the least time between refreshes caused by an
	// unknown kid. Default 1m.
	UnknownKIDEvery time.Duration
	// Client fetches the set. Default: a client that ignores proxy
	// environment variables, with a 10s timeout.
	Client *http.Client
	// OnError hears refresh failures.
	OnError func(error)
}

// NewJWKS starts fetching url.
func NewJWKS(url string, o JWKSOptions) (*JWKS, error) {
	if o.Refresh <= 0 {
		o.Refresh = time.Hour
	}
	if o.UnknownKIDEvery <= 0 {
		o.UnknownKIDEvery = time.Minute
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{url}, keyfunc.Override{
		Client:            o.Client,
		RefreshInterval:   o.Refresh,
		RefreshUnknownKID: rate.NewLimiter(rate.Every(o.UnknownKIDEvery), 1),
		// jwkset runs the unknown-kid refresh itself under this deadline,
		// not only the wait for a slot: at 1 ms the HTTP fetch failed
		// whenever the machine was busy. rate.Limiter.Wait fails at once
		// when the next slot is further off than the deadline, so a request
		// is held at most this long, and only near the end of a window.
		RateLimitWaitMax: unknownKIDWait(o.UnknownKIDEvery),
		RefreshErrorHandlerFunc: func(string) func(context.Context, error) {
			return func(_ context.Context, err error) {
				if o.OnError != nil {
					o.OnError(err)
				}
			}
		},
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("loading jwks %s: %w", url, err)
	}
	return &JWKS{kf: kf, cancel: cancel}, nil
}

// Close stops the refresh goroutine.
func (j *JWKS) Close() { j.cancel() }
