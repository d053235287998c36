package authz

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

func claims(extra map[string]any) jwt.MapClaims {
	c := jwt.MapClaims{
		"sub": "alice", "iss": "https://id.example.com/", "aud": "retainer",
		"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix(),
		"scope": "retainer:execute retainer:read",
	}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

func sign(t testing.TB, method jwt.SigningMethod, key any, c jwt.MapClaims, kid string) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func verifier(t testing.TB, cfg Config) *Verifier {
	t.Helper()
	cfg.Issuer, cfg.Audience = "https://id.example.com/", "retainer"
	v, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func pemOf(t testing.TB, pub any) []byte {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func wantInvalid(t *testing.T, v *Verifier, token, why string) {
	t.Helper()
	if _, err := v.Verify(context.Background(), token); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("%s: accepted (%v)", why, err)
	} else if strings.Contains(err.Error(), token) {
		t.Fatalf("%s: the error contains the token", why)
	}
}

func TestValidTokens(t *testing.T) {
	v := verifier(t, Config{Secret: secret, Claims: []string{"org"}})
	id, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"org": "acme"}), ""))
	if err != nil {
		t.Fatal(err)
	}
	if id.Tenant != "alice" || !id.HasScope(ScopeExecute) || id.HasScope(ScopeDeploy) || id.Claims["org"] != "acme" {
		t.Fatalf("identity %+v", id)
	}
	id, err = v.Verify(context.Background(), sign(t, jwt.SigningMethodHS512, secret, claims(map[string]any{"scope": nil, "scp": []string{"retainer:deploy"}}), ""))
	if err != nil || !id.HasScope(ScopeDeploy) {
		t.Fatalf("scp array: %+v %v", id, err)
	}
}

func TestRefusedTokens(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	v := verifier(t, Config{Secret: secret, TenantClaim: "sub", RequiredClaims: []string{"iat"}})
	good := sign(t, jwt.SigningMethodHS256, secret, claims(nil), "")
	parts := strings.Split(good, ".")

	// alg none, in any case.
	for _, alg := range []string{"none", "None", "NONE", "nOnE"} {
		header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"` + alg + `","typ":"JWT"}`))
		wantInvalid(t, v, header+"."+parts[1]+".", "alg "+alg)
	}
	wantInvalid(t, v, sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"exp": time.Now().Add(-2 * time.Minute).Unix()}), ""), "expired beyond leeway")
	if _, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"exp": time.Now().Add(-30 * time.Second).Unix()}), "")); err != nil {
		t.Fatalf("expired within leeway refused: %v", err)
	}
	wantInvalid(t, v, sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"nbf": time.Now().Add(5 * time.Minute).Unix()}), ""), "nbf in the future")
	wantInvalid(t, v, sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"iat": time.Now().Add(5 * time.Minute).Unix()}), ""), "iat in the future")
	wantInvalid(t, v, sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"exp": nil}), ""), "no exp")
	wantInvalid(t, v, sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"iss": "https://evil.example/"}), ""), "wrong iss")
	wantInvalid(t, v, sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"aud": "someone-else"}), ""), "wrong aud")
	wantInvalid(t, v, sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"sub": nil}), ""), "missing tenant claim")
	wantInvalid(t, v, sign(t, jwt.SigningMethodHS256, []byte("another-secret-another-secret-xx"), claims(nil), ""), "wrong secret")
	wantInvalid(t, v, sign(t, jwt.SigningMethodRS256, rsaKey, claims(nil), ""), "RS256 against an HMAC secret")
	// Tampered payload, stripped signature.
	forged := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"mallory","iss":"https://id.example.com/","aud":"retainer","exp":9999999999}`))
	wantInvalid(t, v, parts[0]+"."+forged+"."+parts[2], "tampered payload")
	wantInvalid(t, v, parts[0]+"."+parts[1]+".", "stripped signature")
	wantInvalid(t, v, parts[0]+"."+parts[1], "two parts")
	wantInvalid(t, v, sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"pad": strings.Repeat("x", 10000)}), ""), "oversized token")
	wantInvalid(t, v, "garbage", "garbage")
}

func TestHMACWithThePublicKeyIsRefused(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	pubPEM := pemOf(t, &rsaKey.PublicKey)
	v := verifier(t, Config{PEMKeys: [][]byte{pubPEM}})
	if _, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodRS256, rsaKey, claims(nil), "")); err != nil {
		t.Fatalf("RS256: %v", err)
	}
	if _, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodPS256, rsaKey, claims(nil), "")); err != nil {
		t.Fatalf("PS256: %v", err)
	}
	// The classic confusion: HS256 "signed" with the RSA public key's bytes.
	wantInvalid(t, v, sign(t, jwt.SigningMethodHS256, pubPEM, claims(nil), ""), "HS256 with the RSA public key")
	der, _ := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	wantInvalid(t, v, sign(t, jwt.SigningMethodHS256, der, claims(nil), ""), "HS256 with the RSA public key (DER)")
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ev := verifier(t, Config{PEMKeys: [][]byte{pemOf(t, &ecKey.PublicKey)}})
	if _, err := ev.Verify(context.Background(), sign(t, jwt.SigningMethodES256, ecKey, claims(nil), "")); err != nil {
		t.Fatalf("ES256: %v", err)
	}
	wantInvalid(t, ev, sign(t, jwt.SigningMethodRS256, rsaKey, claims(nil), ""), "RS256 against an EC key")
}

func TestShortSecretRefused(t *testing.T) {
	if _, err := New(Config{Secret: []byte("short")}); err == nil {
		t.Fatal("a 5-byte secret was accepted")
	}
	if _, err := New(Config{Secret: []byte{}}); err == nil {
		t.Fatal("an empty secret was accepted")
	}
	if _, err := New(Config{}); err == nil {
		t.Fatal("no key was accepted")
	}
}

// jwksServer serves a key set that the test can rotate.
type jwksServer struct {
	mu      sync.Mutex
	keys    map[string]*rsa.PrivateKey
	fetches atomic.Int64
}

func (s *jwksServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.fetches.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []map[string]string
	for kid, k := range s.keys {
		keys = append(keys, map[string]string{
			"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
			"n": base64.RawURLEncoding.EncodeToString(k.N.Bytes()),
			"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(k.E)).Bytes()),
		})
	}
	json.NewEncoder(w).Encode(map[string]any{"keys": keys})
}

func TestJWKSRotationAndUnknownKid(t *testing.T) {
	k1, _ := rsa.GenerateKey(rand.Reader, 2048)
	k2, _ := rsa.GenerateKey(rand.Reader, 2048)
	srv := &jwksServer{keys: map[string]*rsa.PrivateKey{"one": k1}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	jwks, err := NewJWKS(ts.URL, JWKSOptions{Refresh: time.Hour, UnknownKIDEvery: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer jwks.Close()
	v := verifier(t, Config{JWKS: jwks})
	if _, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodRS256, k1, claims(nil), "one")); err != nil {
		t.Fatalf("kid one: %v", err)
	}
	// Rotation: the server now has "two"; a token with the unknown kid
	// triggers one refresh and verifies.
	srv.mu.Lock()
	srv.keys = map[string]*rsa.PrivateKey{"two": k2}
	srv.mu.Unlock()
	before := srv.fetches.Load()
	time.Sleep(250 * time.Millisecond)
	if _, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodRS256, k2, claims(nil), "two")); err != nil {
		t.Fatalf("rotated kid two: %v", err)
	}
	if srv.fetches.Load() != before+1 {
		t.Fatalf("fetches %d → %d, want one refresh", before, srv.fetches.Load())
	}
	// An unknown kid is refused, and repeated ones do not hammer the server.
	for i := 0; i < 5; i++ {
		wantInvalid(t, v, sign(t, jwt.SigningMethodRS256, k1, claims(nil), "nope"), "unknown kid")
	}
	if n := srv.fetches.Load() - before; n > 3 {
		t.Fatalf("%d fetches for unknown kids: not rate limited", n)
	}
	// HS256 signed with a JWKS RSA key's modulus is not an HMAC key.
	wantInvalid(t, v, sign(t, jwt.SigningMethodHS256, k2.N.Bytes(), claims(nil), "two"), "HS256 against a JWKS RSA key")
}

func BenchmarkVerify(b *testing.B) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for _, c := range []struct {
		name   string
		cfg    Config
		method jwt.SigningMethod
		key    any
	}{
		{"HS256", Config{Secret: secret}, jwt.SigningMethodHS256, secret},
		{"RS256", Config{PEMKeys: [][]byte{pemOf(b, &rsaKey.PublicKey)}}, jwt.SigningMethodRS256, rsaKey},
		{"ES256", Config{PEMKeys: [][]byte{pemOf(b, &ecKey.PublicKey)}}, jwt.SigningMethodES256, ecKey},
	} {
		b.Run(c.name, func(b *testing.B) {
			v := verifier(b, c.cfg)
			tok := sign(b, c.method, c.key, claims(nil), "")
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := v.Verify(context.Background(), tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// README.md, API: a tenant id is non-empty, at most 256 bytes, without control
// characters; anything else refuses the token.
func TestTenantIDShape(t *testing.T) {
	v := verifier(t, Config{Secret: secret})
	for _, bad := range []string{"bob\x00", "bob\x00x", "a\nb", "tab\there", "\u0085next", strings.Repeat("a", 257)} {
		wantInvalid(t, v, sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"sub": bad}), ""), fmt.Sprintf("tenant %q", bad))
	}
	for _, good := range []string{"bob", "org:acme/user 7", "ünï", strings.Repeat("a", 256)} {
		if _, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"sub": good}), "")); err != nil {
			t.Errorf("tenant %q refused: %v", good, err)
		}
	}
}

// RFC 7515 §4.1.11: a crit header the verifier does not understand refuses
// the token.
func TestCritHeaderRefused(t *testing.T) {
	v := verifier(t, Config{Secret: secret})
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims(nil))
	tok.Header["crit"] = []string{"exp-ext"}
	tok.Header["exp-ext"] = true
	s, err := tok.SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	wantInvalid(t, v, s, "crit header")
}
