package capability

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/store"
)

func openSecrets(t *testing.T) (*Secrets, *store.Writer) {
	t.Helper()
	b, err := store.OpenBolt(filepath.Join(t.TempDir(), "s.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	w := store.NewWriter(b)
	s := NewSecrets(w)
	s.SetKey(bytes.Repeat([]byte("k"), 32))
	return s, w
}

// TestSecretsSealedAtRest: the store holds no value in the clear, and a
// sealed value copied under another tenant's name does not open there.
func TestSecretsSealedAtRest(t *testing.T) {
	ctx := context.Background()
	s, w := openSecrets(t)
	const value = "sk-PLAIN-value-0123456789"
	if _, err := s.Put(ctx, "apps", "alice", "API_KEY", value); err != nil {
		t.Fatal(err)
	}
	var stored []byte
	w.Scan(ctx, tableSecrets, store.Range{}, func(k, v []byte) bool { stored = append([]byte(nil), v...); return true })
	if len(stored) == 0 || bytes.Contains(stored, []byte(value)) || bytes.Contains(stored, []byte("PLAIN")) {
		t.Fatalf("the stored record: %q", stored)
	}
	if v, ok, err := s.value(ctx, "apps", "alice", "API_KEY"); err != nil || !ok || v != value {
		t.Fatalf("open: %q %v %v", v, ok, err)
	}
	// Moved to mallory's key: the associated data differs, it does not open.
	if err := w.CommitIn(ctx, store.Space("apps", "mallory"), nil, []store.Op{store.Put(tableSecrets, secretKey("apps", "mallory", "API_KEY"), stored)}); err != nil {
		t.Fatal(err)
	}
	if v, _, err := s.value(ctx, "apps", "mallory", "API_KEY"); err == nil || v != "" {
		t.Fatalf("a moved record opened for mallory: %q %v", v, err)
	}
	// Under another key nothing opens either.
	s.SetKey(bytes.Repeat([]byte("x"), 32))
	if _, _, err := s.value(ctx, "apps", "alice", "API_KEY"); err == nil {
		t.Fatal("opened under another secrets_key")
	}
	s.SetKey(nil)
	if _, err := s.List(ctx, "apps", "alice"); fault.As(err) == nil || fault.As(err).Code != fault.NotImplemented {
		t.Fatalf("without a key: %v", err)
	}
}

// TestSecretsInjectedOverHTTPSOnly: a header is set for its own host over
// HTTPS; over plain HTTP only with outbound_allow_private; never for
// another host or port.
func TestSecretsInjectedOverHTTPSOnly(t *testing.T) {
	ctx := context.Background()
	s, _ := openSecrets(t)
	if _, err := s.Put(ctx, "apps", "alice", "TOKEN", "t0k"); err != nil {
		t.Fatal(err)
	}
	headers := map[string]map[string]string{"api.example.com": {"Authorization": "Bearer {secret.TOKEN}"}}
	strict := s.injector("apps", "alice", headers, false)
	if h, err := strict(ctx, "https", "api.example.com", ""); err != nil || h.Get("Authorization") != "Bearer t0k" {
		t.Fatalf("https: %v %v", h, err)
	}
	for _, u := range [][3]string{{"http", "api.example.com", ""}, {"https", "other.example.com", ""}, {"https", "api.example.com", "8443"}} {
		if h, err := strict(ctx, u[0], u[1], u[2]); err != nil || h != nil {
			t.Fatalf("%v: %v %v", u, h, err)
		}
	}
	if h, _ := s.injector("apps", "alice", headers, true)(ctx, "http", "api.example.com", ""); h.Get("Authorization") != "Bearer t0k" {
		t.Fatalf("http with outbound_allow_private: %v", h)
	}
	if err := s.CheckHeaders(ctx, "apps", "bob", headers); err == nil || !strings.Contains(err.Error(), "TOKEN") {
		t.Fatalf("bob naming alice's secret: %v", err)
	}
	if err := s.CheckHeaders(ctx, "apps", "alice", map[string]map[string]string{"api.example.com": {"Host": "x"}}); err == nil {
		t.Fatal("a hop-by-hop header was accepted")
	}
}

func TestParseSecretsKey(t *testing.T) {
	for in, n := range map[string]int{"": 0, strings.Repeat("a", 32): 32, "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=": 32} {
		if k, err := ParseSecretsKey(in); err != nil || len(k) != n {
			t.Errorf("%q: %d %v", in, len(k), err)
		}
	}
	if _, err := ParseSecretsKey("too-short"); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Errorf("a short key: %v", err)
	}
}
