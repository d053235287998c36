// Package urlparse parses URLs as the WHATWG URL Standard does, in Go, for
// the isolate's URL class (sandbox/js/url-fast.js). Under --jitless the
// bundled whatwg-url state machine costs 30–110 µs for any URL the
// canonical fast path refuses (a base, an upper-case host, an IP address);
// github.com/nlnwa/whatwg-url does the same parse in a few microseconds.
//
// The answer is the URL record in a small text form the JavaScript side
// splits without a parser of its own (Parse's doc). Left to the JavaScript
// parser (Deferred), so that what a program sees never depends on which
// parser ran: a special URL's host that needs UTS #46 processing
// (non-ASCII, percent-encoded, or an "xn--" label), where the Go IDNA
// tables are of an older Unicode version than the bundled tr46. Left to it
// too, because a host call is outside the isolate's CPU limit: a URL over
// MaxLength, and the shapes the library takes in quadratic time (userinfo,
// file: URLs, long hosts, many path segments). The library's two known
// departures from the current standard are mended here (pathSet, record).
// The WPT URL data and a differential test against whatwg-url in an
// isolate (sandbox/url_native_test.go) hold both parsers to the same
// answers.
package urlparse

import (
	"strings"

	wurl "github.com/nlnwa/whatwg-url/url"
)

// Outcome says what Parse made of its input.
type Outcome int

const (
	// Parsed: the record is in Parse's answer.
	Parsed Outcome = iota
	// Failure: the input is not a URL (the standard's "failure").
	Failure
	// Deferred: the JavaScript parser must decide (a host that needs
	// IDNA, or a shape past the bounds below).
	Deferred
)

// MaxLength bounds what Parse takes (input and base together, in bytes);
// a longer one is Deferred. The Go parse runs inside a host call, where
// the isolate's CPU limit cannot stop it and its copies are not on the
// isolate's heap; the JavaScript parser is held by both. With the other
// bounds below, every shape tried at this length parses in under ~1 ms
// (BenchmarkSlowestShapes has the search). URLs in use are shorter.
const MaxLength = 4 << 10

// maxSegments bounds the path separators Parse takes: the library adds a
// path's segments in quadratic time (8 KiB of "/" took 40 ms).
const maxSegments = 256

func segments(s string) int { return strings.Count(s, "/") + strings.Count(s, "\\") }

// maxHost is the longest host Parse takes (DNS names are at most 253
// bytes; IPv6 addresses 47).
const maxHost = 255

// userinfo reports whether s has an "@" before its query or fragment,
// where it may end a userinfo: the library takes userinfo in quadratic
// time (8,000 ":" before an "@" took 30 ms, 64 KiB of "@" 8 s). Userinfo
// is rare in a handler's URLs; an "@" in a path takes the JavaScript
// parser with it.
func userinfo(s string) bool {
	if end := strings.IndexAny(s, "?#"); end >= 0 {
		s = s[:end]
	}
	return strings.IndexByte(s, '@') >= 0
}

// pathSet is the standard's path percent-encode set. The library's lacks
// U+005E (^), added to the standard in 2024 (WPT: "foo://host/…^…").
var pathSet = wurl.PathPercentEncodeSet.Set(0x5e)

// Parse parses input against base (a serialized URL, or "" for none) and
// answers the URL record as eight fields joined by "\n" (a serialized URL
// is ASCII and never holds a newline, which the parser strips):
//
//	scheme, username, password,
//	host     "" for null, else "=" and the serialized host
//	port     "" for null, else its digits
//	path     "'" and the opaque path, or "" for an empty list, or "/" and the segments joined by "/"
//	query    "" for null, else "?" and the query
//	fragment "" for null, else "#" and the fragment
func Parse(input, base string) (string, Outcome) {
	if len(input)+len(base) > MaxLength || userinfo(input) || userinfo(base) || fileScheme(input) || fileScheme(base) ||
		segments(input)+segments(base) > maxSegments {
		return "", Deferred
	}
	if wire, ok := fastParse(input, base); ok {
		return wire, Parsed
	}
	return libraryParse(input, base)
}

// libraryParse is Parse without the fast path.
func libraryParse(input, base string) (string, Outcome) {
	deferred := false
	p := wurl.NewParser(wurl.WithPathPercentEncodeSet(pathSet),
		wurl.WithPreParseHostFunc(func(u *wurl.Url, host string) string {
			// A host longer than DNS allows is deferred too: the library
			// percent-decodes an opaque host in quadratic time (8 KiB of
			// "%" took 125 ms). The empty host answered then ends the
			// library's work early; the answer is not used.
			if len(host) > maxHost || u.IsSpecialScheme() && needsIDNA(host) {
				deferred = true
				return ""
			}
			return host
		}))
	var u *wurl.Url
	var err error
	if base == "" {
		u, err = p.Parse(input)
	} else {
		u, err = p.ParseRef(base, input)
	}
	if deferred {
		return "", Deferred
	}
	if err != nil {
		return "", Failure
	}
	return record(u.Href(false)), Parsed
}

// fileScheme reports whether s may be a file: URL (or relative to one):
// the library handles Windows drive letters in quadratic time (64 KiB of
// "C:/" took 345 ms), and file URLs are rare in a handler. The test is
// loose on purpose: any "file:" in the first bytes, in any case and with
// the tabs and newlines the parser strips.
func fileScheme(s string) bool {
	head := s
	if len(head) > 64 {
		head = head[:64]
	}
	head = strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return -1
		}
		return r
	}, strings.ToLower(head))
	return strings.Contains(head, "file:")
}

// needsIDNA reports whether a special URL's host, as written, needs more
// of UTS #46 than ASCII lower-casing: the same rule as js/tr46-lazy.js.
func needsIDNA(host string) bool {
	for i := 0; i < len(host); i++ {
		if host[i] >= 0x80 || host[i] == '%' {
			return true
		}
	}
	lower := strings.ToLower(host)
	return strings.HasPrefix(lower, "xn--") || strings.Contains(lower, ".xn--")
}

// record splits a serialized URL into Parse's fields. The serializer's
// output can be split by its delimiters alone: each component
// percent-encodes the characters that end it.
func record(href string) string {
	colon := strings.IndexByte(href, ':')
	scheme, rest := href[:colon], href[colon+1:]
	var username, password, host, port string
	hasHost := strings.HasPrefix(rest, "//")
	if hasHost {
		rest = rest[2:]
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		authority := rest[:end]
		rest = rest[end:]
		if at := strings.LastIndexByte(authority, '@'); at >= 0 {
			username, password, _ = strings.Cut(authority[:at], ":")
			authority = authority[at+1:]
		}
		hostEnd := len(authority)
		if strings.HasPrefix(authority, "[") {
			hostEnd = strings.IndexByte(authority, ']') + 1
		} else if c := strings.IndexByte(authority, ':'); c >= 0 {
			hostEnd = c
		}
		host = "=" + authority[:hostEnd]
		if hostEnd < len(authority) {
			port = authority[hostEnd+1:]
		}
	} else if strings.HasPrefix(rest, "/.//") {
		// The serializer's "/." before a path that starts with an empty
		// segment when there is no host.
		rest = rest[2:]
	}
	pathEnd := strings.IndexAny(rest, "?#")
	if pathEnd < 0 {
		pathEnd = len(rest)
	}
	pathText, rest := rest[:pathEnd], rest[pathEnd:]
	var query, fragment string
	if strings.HasPrefix(rest, "?") {
		end := strings.IndexByte(rest, '#')
		if end < 0 {
			end = len(rest)
		}
		query, rest = rest[:end], rest[end:]
	}
	if strings.HasPrefix(rest, "#") {
		fragment = rest
	}
	var path string
	switch {
	case !hasHost && !strings.HasPrefix(pathText, "/"):
		// An opaque path. The standard (since 2024) writes a space just
		// before the query or fragment as "%20"; the library keeps it.
		if strings.HasSuffix(pathText, " ") && (query != "" || fragment != "") {
			pathText = pathText[:len(pathText)-1] + "%20"
		}
		path = "'" + pathText
	default:
		path = pathText // "" (no segments) or "/" and the segments
	}
	return strings.Join([]string{scheme, username, password, host, port, path, query, fragment}, "\n")
}
