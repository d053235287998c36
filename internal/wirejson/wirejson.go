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
	"math"
	"strconv"
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

const hexDigits = "0123456789abcdef"

// AppendString appends s encoded as a JSON string exactly as Marshal
// encodes it (StringLen bytes): without reflection or an encoder, for
// values encoded on every request (logstore's request entries).
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendFloat appends f as Marshal encodes a float64, and false for NaN
// and the infinities (which Marshal refuses).
func AppendFloat(dst []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-09 becomes e-9, as Marshal writes it.
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}
