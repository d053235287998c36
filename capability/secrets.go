package capability

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/store"
)

// Secrets are the tenants' secrets (docs/secrets.md): values a program's
// fetch carries in headers the gateway sets, which never enter an isolate.
// Each is sealed with AES-GCM under the Caddyfile's secrets_key, the
// registry, tenant and name bound in as associated data (a value copied to
// another tenant's key does not open). Safe for concurrent use.
type Secrets struct {
	w    *store.Writer
	aead atomic.Pointer[cipher.AEAD]
	// tenants serializes each tenant's puts and deletes (by a hash of
	// registry and tenant): a put counts the tenant's secrets and commits
	// its new one with no other put of the tenant in between, so 40 puts
	// of new names at once never carry 96 past the quota of 100. In a
	// cluster one gateway, the space's owner, writes a tenant's secrets
	// (its commits are fenced; docs/cluster.md).
	tenants [64]sync.Mutex
}

func (s *Secrets) lockTenant(registry, tenant string) func() {
	h := fnv.New32a()
	h.Write(secretPrefix(registry, tenant))
	mu := &s.tenants[h.Sum32()%uint32(len(s.tenants))]
	mu.Lock()
	return mu.Unlock
}

// CheckSecretValue refuses a value a header cannot carry (docs/secrets.md):
// a control character other than a tab (CR, LF, NUL among them), which
// would otherwise be stored and fail every fetch that names it.
func CheckSecretValue(value string) error {
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
			return fault.New(fault.BadRequest, "A secret's value goes into a header: it may hold no control character but a tab (byte %d is 0x%02x).", i, c)
		}
	}
	return nil
}

// tableSecrets holds registry \x00 tenant \x00 name → updatedAt (8 bytes,
// Unix nanoseconds) | nonce | sealed value.
const tableSecrets = "secrets"

var secretName = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,63}$`)

// secretRef is a {secret.NAME} in a header template.
var secretRef = regexp.MustCompile(`\{secret\.([^{}]*)\}`)

// NewSecrets answers the secrets kept through w; without SetKey they
// answer NOT_IMPLEMENTED.
func NewSecrets(w *store.Writer) *Secrets { return &Secrets{w: w} }

// ParseSecretsKey reads the Caddyfile's secrets_key: base64 of at least 32
// bytes, or at least 32 raw bytes. "" is no key.
func ParseSecretsKey(s string) ([]byte, error) {
	if s == "" {
		return nil, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) >= 32 {
			return b, nil
		}
	}
	if len(s) < 32 {
		return nil, fmt.Errorf("secrets_key is %d bytes; it must be at least 32 (raw, or as base64)", len(s))
	}
	return []byte(s), nil
}

// SetKey sets the key secrets are sealed under (nil: none; the secrets
// answer NOT_IMPLEMENTED). The AES-256 key is the SHA-256 of key.
func (s *Secrets) SetKey(key []byte) {
	if len(key) == 0 {
		s.aead.Store(nil)
		return
	}
	k := sha256.Sum256(key)
	block, _ := aes.NewCipher(k[:])
	g, _ := cipher.NewGCM(block)
	s.aead.Store(&g)
}

func (s *Secrets) gcm() (cipher.AEAD, error) {
	if s == nil {
		return nil, errNoSecretsKey()
	}
	g := s.aead.Load()
	if g == nil {
		return nil, errNoSecretsKey()
	}
	return *g, nil
}

func errNoSecretsKey() error {
	return fault.New(fault.NotImplemented, "Secrets need the secrets_key option in the Caddyfile's global retainer block (docs/secrets.md).")
}

func secretKey(registry, tenant, name string) []byte {
	return []byte(registry + "\x00" + tenant + "\x00" + name)
}

func secretPrefix(registry, tenant string) []byte {
	return []byte(registry + "\x00" + tenant + "\x00")
}

// SecretInfo is what the API shows of a secret: never its value.
type SecretInfo struct {
	Name      string    `json:"name"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// CheckSecretName refuses a name outside [A-Z][A-Z0-9_]{0,63}.
func CheckSecretName(name string) error {
	if !secretName.MatchString(name) {
		return fault.New(fault.BadRequest, "A secret's name is an upper-case letter, then up to 63 upper-case letters, digits or underscores.")
	}
	return nil
}

// Put stores value under name for the tenant, replacing what was there.
func (s *Secrets) Put(ctx context.Context, registry, tenant, name, value string) (SecretInfo, error) {
	g, err := s.gcm()
	if err != nil {
		return SecretInfo{}, err
	}
	if err := CheckSecretName(name); err != nil {
		return SecretInfo{}, err
	}
	if len(value) > budgets.SecretValueBytes {
		return SecretInfo{}, fault.New(fault.TooLarge, "A secret's value is at most %d bytes.", budgets.SecretValueBytes)
	}
	if err := CheckSecretValue(value); err != nil {
		return SecretInfo{}, err
	}
	defer s.lockTenant(registry, tenant)()
	key := secretKey(registry, tenant, name)
	old, err := s.w.Get(ctx, tableSecrets, key)
	if err != nil {
		return SecretInfo{}, err
	}
	if old == nil {
		n := 0
		if err := s.w.Scan(ctx, tableSecrets, store.Range{Prefix: secretPrefix(registry, tenant), KeysOnly: true}, func(_, _ []byte) bool { n++; return true }); err != nil {
			return SecretInfo{}, err
		}
		if n >= budgets.SecretsPerTenant {
			return SecretInfo{}, fault.New(fault.QuotaExceeded, "A tenant keeps at most %d secrets.", budgets.SecretsPerTenant)
		}
	}
	now := time.Now().UTC()
	rec := binary.BigEndian.AppendUint64(nil, uint64(now.UnixNano()))
	nonce := make([]byte, g.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return SecretInfo{}, err
	}
	rec = append(rec, nonce...)
	rec = g.Seal(rec, nonce, []byte(value), key)
	cond := store.Absent(tableSecrets, key)
	if old != nil {
		cond = store.Holds(tableSecrets, key, old)
	}
	if err := s.w.CommitIn(ctx, store.Space(registry, tenant), []store.Cond{cond}, []store.Op{store.Put(tableSecrets, key, rec)}); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return SecretInfo{}, fault.New(fault.Conflict, "The secret %s changed meanwhile; try again.", name)
		}
		return SecretInfo{}, err
	}
	return SecretInfo{Name: name, UpdatedAt: now}, nil
}

// List answers the tenant's secrets' names and times, by name.
func (s *Secrets) List(ctx context.Context, registry, tenant string) ([]SecretInfo, error) {
	if _, err := s.gcm(); err != nil {
		return nil, err
	}
	prefix := secretPrefix(registry, tenant)
	out := []SecretInfo{}
	err := s.w.Scan(ctx, tableSecrets, store.Range{Prefix: prefix}, func(k, v []byte) bool {
		if len(v) >= 8 {
			out = append(out, SecretInfo{Name: string(k[len(prefix):]), UpdatedAt: time.Unix(0, int64(binary.BigEndian.Uint64(v))).UTC()})
		}
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

// Delete removes a secret; false when there was none.
func (s *Secrets) Delete(ctx context.Context, registry, tenant, name string) (bool, error) {
	if _, err := s.gcm(); err != nil {
		return false, err
	}
	if err := CheckSecretName(name); err != nil {
		return false, err
	}
	defer s.lockTenant(registry, tenant)()
	key := secretKey(registry, tenant, name)
	// The delete is of the value read, as a put replaces the value it
	// read: a write its caller stopped waiting for (a stalled etcd may
	// apply it later) never lands over a newer put (docs/cluster.md).
	old, err := s.w.Get(ctx, tableSecrets, key)
	if err != nil || old == nil {
		return false, err
	}
	err = s.w.CommitIn(ctx, store.Space(registry, tenant), []store.Cond{store.Holds(tableSecrets, key, old)}, []store.Op{store.Delete(tableSecrets, key)})
	if errors.Is(err, store.ErrConflict) {
		return false, nil
	}
	return err == nil, err
}

// value opens a secret; ok is false when there is none.
func (s *Secrets) value(ctx context.Context, registry, tenant, name string) (string, bool, error) {
	g, err := s.gcm()
	if err != nil {
		return "", false, err
	}
	key := secretKey(registry, tenant, name)
	rec, err := s.w.Get(ctx, tableSecrets, key)
	if err != nil || rec == nil {
		return "", false, err
	}
	ns := g.NonceSize()
	if len(rec) < 8+ns {
		return "", false, fault.New(fault.Internal, "The secret %s is unreadable.", name)
	}
	plain, err := g.Open(nil, rec[8:8+ns], rec[8+ns:], key)
	if err != nil {
		return "", false, fault.New(fault.Internal, "The secret %s does not open under this secrets_key.", name)
	}
	return string(plain), true, nil
}

// CheckHeaders checks a request's outbound.headers (docs/secrets.md):
// valid header names, no hop-by-hop ones, and every {secret.NAME} one of
// the tenant's secrets (BAD_REQUEST naming it).
func (s *Secrets) CheckHeaders(ctx context.Context, registry, tenant string, headers map[string]map[string]string) error {
	for host, hs := range headers {
		if host == "" || strings.ContainsAny(host, "/%@ ") {
			return fault.New(fault.BadRequest, "outbound.headers: %q is not a host.", host)
		}
		for name, tmpl := range hs {
			if !validHeaderName(name) || hopByHop[strings.ToLower(name)] {
				return fault.New(fault.BadRequest, "outbound.headers: %q is not a header the gateway may set.", name)
			}
			if strings.ContainsAny(tmpl, "\r\n\x00") {
				return fault.New(fault.BadRequest, "outbound.headers: the value of %s holds a line break.", name)
			}
			for _, m := range secretRef.FindAllStringSubmatch(tmpl, -1) {
				if err := CheckSecretName(m[1]); err != nil {
					return fault.New(fault.BadRequest, "outbound.headers: {secret.%s} names no possible secret.", m[1])
				}
				if _, err := s.gcm(); err != nil {
					return err
				}
				rec, err := s.w.Get(ctx, tableSecrets, secretKey(registry, tenant, m[1]))
				if err != nil {
					return err
				}
				if rec == nil {
					return fault.New(fault.BadRequest, "outbound.headers: there is no secret %s (PUT /secrets/%s first).", m[1], m[1])
				}
			}
		}
	}
	return nil
}

func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// injector answers the headers the gateway sets on a fetch to a URL under
// a run's outbound.headers: those of the hosts that match it, over HTTPS
// unless allowPrivate, each {secret.NAME} read now (a rotated secret
// applies from the next fetch).
func (s *Secrets) injector(registry, tenant string, headers map[string]map[string]string, allowPrivate bool) func(ctx context.Context, scheme, host, port string) (http.Header, error) {
	if len(headers) == 0 {
		return nil
	}
	return func(ctx context.Context, scheme, host, port string) (http.Header, error) {
		if scheme != "https" && !allowPrivate {
			return nil, nil
		}
		var out http.Header
		for pattern, hs := range headers {
			if !Allowed([]string{pattern}, scheme, host, port) {
				continue
			}
			for name, tmpl := range hs {
				var ferr error
				v := secretRef.ReplaceAllStringFunc(tmpl, func(ref string) string {
					name := ref[len("{secret.") : len(ref)-1]
					val, ok, err := s.value(ctx, registry, tenant, name)
					if err == nil && !ok {
						err = fault.New(fault.BadRequest, "fetch: the secret %s named in outbound.headers no longer exists.", name)
					}
					if err != nil && ferr == nil {
						ferr = err
					}
					return val
				})
				if ferr != nil {
					return nil, ferr
				}
				if out == nil {
					out = http.Header{}
				}
				out.Set(name, v)
			}
		}
		return out, nil
	}
}
