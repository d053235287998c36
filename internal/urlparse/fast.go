package urlparse

import (
	"strconv"
	"strings"
)

// The library takes 4–11 µs a URL here (a map lookup per character, 60–120
// allocations). Most URLs a handler builds are of a few plain shapes: an
// http(s) or ws(s) URL whose host needs only lower-casing, or a path, query
// or fragment against such a base. fastParse answers exactly those, each
// character checked against a set the parser would leave as it is, and
// refuses anything else (the library goes next): userinfo, an IPv4 host
// not written as four plain decimal parts, an IDNA host, a backslash, a
// dot segment, a character the parser would percent-encode or strip. Its
// answers are held to the library's by TestFastPathAgreesWithTheLibrary,
// and to whatwg-url's by the sandbox's differential test.

// Characters a special URL's path, query or fragment keeps as written
// (outside the percent-encode sets, and neither a delimiter nor "\").
var pathSafe, querySafe, fragmentSafe, hostSafe [128]bool

func init() {
	const unreserved = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~"
	for _, c := range unreserved + "!$&'()*+,;=:@%" {
		pathSafe[c] = true
	}
	for _, c := range unreserved + "!$&()*+,;=:@%/?" { // "'" is encoded in a special query
		querySafe[c] = true
	}
	for _, c := range unreserved + "!$&'()*+,;=:@%/?#" {
		fragmentSafe[c] = true
	}
	for _, c := range "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-." {
		hostSafe[c] = true
	}
}

// defaultPorts are the special schemes fastParse takes (file has no host
// rules of this kind, and ftp is rare).
var defaultPorts = map[string]int{"http": 80, "https": 443, "ws": 80, "wss": 443}

func allIn(s string, set *[128]bool) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 || !set[s[i]] {
			return false
		}
	}
	return true
}

// fastParse answers Parse's record for the plain shapes, or false.
func fastParse(input, base string) (string, bool) {
	if base == "" {
		return fastAbsolute(input)
	}
	end := strings.IndexAny(input, "/?#")
	if end < 0 {
		end = len(input)
	}
	if colon := strings.IndexByte(input, ':'); colon >= 0 && colon < end {
		return fastAbsolute(input) // it has a scheme: the base plays no part
	}
	return fastRelative(input, base)
}

func fastAbsolute(input string) (string, bool) {
	sep := strings.Index(input, "://")
	if sep <= 0 {
		return "", false
	}
	if !allIn(input[:sep], &hostSafe) { // ASCII only: strings.ToLower maps some other letters to ASCII
		return "", false
	}
	scheme := strings.ToLower(input[:sep])
	defaultPort, ok := defaultPorts[scheme]
	if !ok {
		return "", false
	}
	rest := input[sep+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, rest := rest[:end], rest[end:]
	host, portText, hasPort := strings.Cut(authority, ":")
	if host == "" || !allIn(host, &hostSafe) {
		return "", false
	}
	host = strings.ToLower(host)
	if endsInANumber(host) && !dottedQuad(host) || needsIDNA(host) {
		return "", false
	}
	port := ""
	if hasPort {
		n, err := strconv.Atoi(portText)
		if portText == "" || portText[0] == '+' || err != nil || n < 0 || n > 65535 {
			return "", false
		}
		if n != defaultPort {
			port = strconv.Itoa(n)
		}
	}
	path, query, fragment, ok := fastTail(rest)
	if !ok {
		return "", false
	}
	if path == "" {
		path = "/" // a special URL's path is never empty
	}
	return strings.Join([]string{scheme, "", "", "=" + host, port, path, query, fragment}, "\n"), true
}

// fastTail splits a path-absolute (or empty) path, query and fragment,
// answering them in Parse's form.
func fastTail(rest string) (path, query, fragment string, ok bool) {
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		if !allIn(rest[i+1:], &fragmentSafe) {
			return "", "", "", false
		}
		rest, fragment = rest[:i], rest[i:]
	}
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		if !allIn(rest[i+1:], &querySafe) {
			return "", "", "", false
		}
		rest, query = rest[:i], rest[i:]
	}
	if rest != "" && (rest[0] != '/' || !plainPath(rest[1:])) {
		return "", "", "", false
	}
	return rest, query, fragment, true
}

// plainPath reports whether segments joined by "/" are kept as written:
// safe characters and no dot segment (".", "..", or either with "%2e").
func plainPath(p string) bool {
	for _, seg := range strings.Split(p, "/") {
		if !allIn(seg, &pathSafe) {
			return false
		}
		if l := strings.ToLower(seg); l == "." || l == ".." || strings.Contains(l, "%2e") {
			return false
		}
	}
	return true
}

// endsInANumber is the host parser's test for an IPv4 address: the last
// label (after a trailing dot) is digits or "0x" and hex digits.
func endsInANumber(host string) bool {
	labels := strings.Split(host, ".")
	if len(labels) > 1 && labels[len(labels)-1] == "" {
		labels = labels[:len(labels)-1]
	}
	last := labels[len(labels)-1]
	if last == "" {
		return false
	}
	if strings.HasPrefix(last, "0x") {
		return allIn(last[2:], &hexDigit)
	}
	return allIn(last, &decDigit)
}

// dottedQuad reports whether an IPv4 host is already as the serializer
// writes it: four decimal parts of 0–255, without leading zeros.
func dottedQuad(host string) bool {
	parts := strings.Split(host, ".")
	if len(parts) != 4 {
		return false
	}
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || p == "" || len(p) > 3 || !allIn(p, &decDigit) || n > 255 || len(p) > 1 && p[0] == '0' {
			return false
		}
	}
	return true
}

var decDigit, hexDigit [128]bool

func init() {
	for _, c := range "0123456789" {
		decDigit[c], hexDigit[c] = true, true
	}
	for _, c := range "abcdef" {
		hexDigit[c] = true
	}
}

// fastRelative resolves a path, query or fragment (or "") against a base
// that is itself a plain http(s)/ws(s) URL with a host.
func fastRelative(input, base string) (string, bool) {
	b := strings.Split(record(base), "\n")
	if _, ok := defaultPorts[b[0]]; !ok || b[3] == "" || !strings.HasPrefix(b[5], "/") {
		return "", false
	}
	if strings.HasPrefix(input, "//") {
		return "", false // scheme-relative: a host of its own
	}
	path, query, fragment := b[5], b[6], ""
	switch {
	case input == "":
	case input[0] == '#':
		if !allIn(input[1:], &fragmentSafe) {
			return "", false
		}
		fragment = input
	case input[0] == '?':
		p, q, f, ok := fastTail(input)
		if !ok || p != "" {
			return "", false
		}
		query, fragment = q, f
	case input[0] == '/':
		p, q, f, ok := fastTail(input)
		if !ok {
			return "", false
		}
		path, query, fragment = p, q, f
	default:
		// Relative to the base's directory: its last segment is replaced.
		p, q, f, ok := fastTail("/" + input)
		if !ok {
			return "", false
		}
		path, query, fragment = path[:strings.LastIndexByte(path, '/')]+p, q, f
	}
	b[5], b[6], b[7] = path, query, fragment
	return strings.Join(b, "\n"), true
}
