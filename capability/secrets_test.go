package capability

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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

// slowCommits is a real bolt store whose commits take 20 ms longer, as a
// loaded disk's do: the window between a put's count and its commit.
type slowCommits struct{ store.Store }

func (s slowCommits) Commit(ctx context.Context, txn store.Txn) error {
	time.Sleep(20 * time.Millisecond)
	return s.Store.Commit(ctx, txn)
}

// TestSecretsQuotaUnderRacingPuts: with 96 secrets kept and every commit
// slow, 40 puts of new names at once store exactly 4 (before, each counted
// 96 and all 40 were stored: 136), the others QUOTA_EXCEEDED; another
// tenant's put goes through meanwhile.
func TestSecretsQuotaUnderRacingPuts(t *testing.T) {
	ctx := context.Background()
	b, err := store.OpenBolt(filepath.Join(t.TempDir(), "s.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s := NewSecrets(store.NewWriter(slowCommits{b}))
	s.SetKey(bytes.Repeat([]byte("k"), 32))
	for i := 0; i < 96; i++ {
		if _, err := s.Put(ctx, "apps", "alice", fmt.Sprintf("KEPT_%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var stored, refused atomic.Int32
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, err := s.Put(ctx, "apps", "alice", fmt.Sprintf("RACED_%d", i), "v")
			switch f := fault.As(err); {
			case err == nil:
				stored.Add(1)
			case f != nil && f.Code == fault.QuotaExceeded:
				refused.Add(1)
			default:
				t.Errorf("put %d: %v", i, err)
			}
		}(i)
	}
	if _, err := s.Put(ctx, "apps", "bob", "BOB_KEY", "v"); err != nil {
		t.Fatalf("bob's put meanwhile: %v", err)
	}
	wg.Wait()
	list, _ := s.List(ctx, "apps", "alice")
	if stored.Load() != 4 || refused.Load() != 36 || len(list) != 100 {
		t.Fatalf("40 racing puts over 96: %d stored, %d refused, %d kept; the quota is 100", stored.Load(), refused.Load(), len(list))
	}
}

// TestSecretValuesAHeaderCarries: CR, LF, NUL and the other control
// characters but a tab are refused when put (BAD_REQUEST), not when a
// fetch later fails on them.
func TestSecretValuesAHeaderCarries(t *testing.T) {
	s, _ := openSecrets(t)
	for _, v := range []string{"a\r\nX-Evil: 1", "a\nb", "a\rb", "nul\x00", "\x1b[31m", "del\x7f"} {
		_, err := s.Put(context.Background(), "apps", "alice", "K", v)
		if f := fault.As(err); f == nil || f.Code != fault.BadRequest {
			t.Fatalf("the value %q: %v", v, err)
		}
	}
	for _, v := range []string{"Bearer sk-123", "a\tb", "é ü", ""} {
		if _, err := s.Put(context.Background(), "apps", "alice", "K", v); err != nil {
			t.Fatalf("the value %q: %v", v, err)
		}
	}
}
