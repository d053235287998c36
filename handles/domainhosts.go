package handles

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"regexp"
	"strings"

	"github.com/retainer-gw/retainer/fault"
)

// A domain's host name (what a claim may name, docs/domains.md) and the
// TXT challenge that proves control of it.

// ChallengeName is the TXT record that proves control of host.
func ChallengeName(host string) string { return "_retainer-challenge." + host }

var ldhLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidHost checks a domain's host name and answers it lower-cased: at
// least two LDH labels of 1–63 characters, 253 in all, no IP literal, no
// wildcard, and not in or under a zone of reserved (the operator's own
// zones; "*.apps.example.com" and "apps.example.com" both reserve that zone
// and every name under it).
func ValidHost(host string, reserved []string) (string, error) {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	bad := func(why string) (string, error) {
		return "", fault.New(fault.BadRequest, "%q is not a host a domain can have: %s", host, why)
	}
	if h == "" || len(h) > 253 {
		return bad("a host name has 1 to 253 characters.")
	}
	if net.ParseIP(h) != nil || strings.HasPrefix(h, "[") {
		return bad("an IP address is not a domain.")
	}
	if strings.Contains(h, "*") {
		return bad("a wildcard is not a domain; register each host.")
	}
	labels := strings.Split(h, ".")
	if len(labels) < 2 {
		return bad("a domain has at least two labels (shop.example.com).")
	}
	for _, l := range labels {
		if !ldhLabel.MatchString(l) {
			return bad("each label is 1 to 63 letters, digits or inner hyphens.")
		}
	}
	if ipv4Shaped(labels[len(labels)-1]) {
		return bad("a URL reads a host whose last label is a number as an IPv4 address.")
	}
	for _, zone := range reserved {
		z := strings.TrimPrefix(strings.ToLower(strings.TrimSuffix(zone, ".")), "*.")
		if z != "" && (h == z || strings.HasSuffix(h, "."+z)) {
			return "", fault.New(fault.BadRequest, "%q is under %s, a zone this gateway keeps for itself.", h, zone)
		}
	}
	return h, nil
}

// ipv4Shaped reports whether a URL parser reads a host ending in label as
// an IPv4 address (the WHATWG URL standard's "ends in a number" rule):
// `127.1`, `0x7f.1` and `foo.123` are addresses to a browser, so no domain
// may be one. label is lower case.
func ipv4Shaped(label string) bool {
	digits := strings.TrimLeft(label, "0123456789")
	if label != "" && digits == "" {
		return true
	}
	hex, ok := strings.CutPrefix(label, "0x")
	return ok && strings.Trim(hex, "0123456789abcdef") == ""
}

func newChallenge() string {
	b := make([]byte, 24)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func quoteAll(vs []string) string {
	q := make([]string, 0, len(vs))
	for i, v := range vs {
		if i == 4 {
			q = append(q, "…")
			break
		}
		if len(v) > 80 {
			v = v[:80] + "…"
		}
		q = append(q, `"`+v+`"`)
	}
	return strings.Join(q, ", ")
}
