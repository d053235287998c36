package wirejson

import "encoding/binary"

// Bytes cross between Go and an isolate as Latin-1 strings, one character
// per byte (v8go 0.9 cannot make an ArrayBuffer from Go bytes, and a string
// is one copy each way), inside frames and host-call answers alike.

// Latin1 is b as a Latin-1 string: byte c becomes the character U+00cc.
func Latin1(b []byte) string {
	if IsASCII(b) {
		return string(b) // the same characters, one byte each in UTF-8 too
	}
	r := make([]rune, len(b))
	for i, c := range b {
		r[i] = rune(c)
	}
	return string(r)
}

// IsASCII reports whether every byte of b is below 0x80: its Latin-1
// string is then its UTF-8 text as well.
func IsASCII(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b)&0x8080808080808080 != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// isASCIIString is IsASCII for a string, without copying it.
func isASCIIString(s string) bool {
	for len(s) >= 8 {
		if binary.LittleEndian.Uint64([]byte(s[:8]))&0x8080808080808080 != 0 {
			return false
		}
		s = s[8:]
	}
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// Latin1Bytes turns a Latin-1 string back into bytes; a character past
// U+00FF (the string was not made by Latin1) gives its low byte.
func Latin1Bytes(s string) []byte {
	b, _ := Latin1BytesChecked(s)
	return b
}

// Latin1BytesChecked is Latin1Bytes that reports, with ok false, a
// character past U+00FF: for strings an isolate made, which are hostile.
func Latin1BytesChecked(s string) (b []byte, ok bool) {
	if isASCIIString(s) {
		return []byte(s), true // one byte a character either way
	}
	b = make([]byte, 0, len(s))
	ok = true
	for _, r := range s {
		if r > 0xff {
			ok = false
		}
		b = append(b, byte(r))
	}
	return b, ok
}

// Chunk is a host's answer to a program's read of a body it holds
// (body.read, fetch.read): what has arrived, as Latin-1, and whether the
// body ended.
func Chunk(data []byte, done bool) ([]byte, error) {
	return Marshal(struct {
		Data string `json:"data,omitempty"`
		Done bool   `json:"done,omitempty"`
	}{Latin1(data), done})
}
