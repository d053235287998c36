package crypto

import (
	"encoding/hex"
	"testing"

	"github.com/retainer-gw/retainer/internal/wirejson"
)

func call(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	return API.Run(nil, name, args...)
}

func latin1Hex(t *testing.T, s string) string {
	t.Helper()
	return hex.EncodeToString(wirejson.Latin1Bytes(s))
}

// The Go half answers the known vectors without an isolate: FIPS 180's
// SHA-256 of "abc", RFC 4231's first HMAC-SHA-256 case, and an AES-GCM
// round trip; too few arguments are refused by name.
func TestOpsWithoutV8(t *testing.T) {
	d, err := call(t, "digest", "SHA-256", "abc")
	if err != nil || latin1Hex(t, d) != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Fatalf("digest: %x %v", d, err)
	}
	key := wirejson.Latin1([]byte{0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b})
	mac, err := call(t, "hmac", "SHA-256", key, "Hi There")
	if err != nil || latin1Hex(t, mac) != "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7" {
		t.Fatalf("hmac: %v", err)
	}
	k, iv := string(make([]byte, 16)), string(make([]byte, 12))
	sealed, err := call(t, "aes", "AES-GCM", "encrypt", k, iv, "secret", "", "128")
	if err != nil {
		t.Fatal(err)
	}
	opened, err := call(t, "aes", "AES-GCM", "decrypt", k, iv, sealed, "", "128")
	if err != nil || opened != "secret" {
		t.Fatalf("AES-GCM round trip: %q %v", opened, err)
	}
	if _, err := call(t, "digest", "SHA-256"); err == nil || err.Error() != "digest needs an algorithm and data" {
		t.Fatalf("too few arguments: %v", err)
	}
}

// Every operation is declared once.
func TestOpsDeclaredOnce(t *testing.T) {
	seen := map[string]bool{}
	for _, op := range API.Ops {
		if seen[op.Name] || op.Do == nil || op.Args < 1 {
			t.Errorf("operation %q: declared twice, without a function or without arguments", op.Name)
		}
		seen[op.Name] = true
	}
}
