// Package wirejson encodes the JSON that crosses the worker boundary and
// measures it. It exists because encoding/json escapes '<', '>' and '&' to
// six bytes each (for HTML embedding, which nothing here does): a program
// that answers three million '<' would otherwise make an 18 MB frame out of
// a 3 MB value. Every bound on what a program sends outward is checked on
// the length this package gives (README.md, Caddyfile: measured after encoding).
//
// It deliberately knows nothing of frames, faults or V8.
package wirejson

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// Marshal is json.Marshal without HTML escaping (and without the trailing
// newline json.Encoder adds). Raw messages inside v are compacted without
// escaping too.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return b[:len(b)-1], nil
}

// StringLen is the length of s encoded as a JSON string by Marshal, quotes
// included: control characters take six bytes (\u00XX, or two for \n, \t,
// \r, \b, \f), '"' and '\\' two, invalid UTF-8 bytes six (\ufffd), U+2028
// and U+2029 six; everything else its UTF-8 length.
func StringLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			n += asciiLen(c)
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 6
		case r == '\u2028' || r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

func asciiLen(c byte) int {
	switch {
	case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
		return 2
	case c < 0x20:
		return 6
	}
	return 1
}

// Cut answers the longest prefix of s (cut on a rune boundary) whose
// encoding by Marshal, quotes included, is at most max bytes, and whether
// it had to cut.
func Cut(s string, max int) (string, bool) {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		w, size := 0, 1
		if c < utf8.RuneSelf {
			w = asciiLen(c)
		} else {
			var r rune
			r, size = utf8.DecodeRuneInString(s[i:])
			switch {
			case r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029':
				w = 6
			default:
				w = size
			}
		}
		if n+w > max {
			return s[:i], true
		}
		n += w
		i += size
	}
	return s, false
}
