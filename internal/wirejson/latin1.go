package wirejson

import "unicode/utf8"

// Bytes cross between Go and an isolate as Latin-1 strings, one character
// per byte (v8go 0.9 cannot make an ArrayBuffer from Go bytes, and a string
// is one copy each way), inside frames and host-call answers alike.

// Latin1 is b as a Latin-1 string: byte c becomes the character U+00cc.
func Latin1(b []byte) string {
	if IsASCII(b) {
		return string(b) // the same characters, one byte each in UTF-8 too
	}
	// A byte from 0x80 up is two bytes of UTF-8 (C2 or C3, then one), the
	// rest are themselves: written straight, without a rune a byte.
	n := len(b)
	for _, c := range b {
		n += int(c >> 7)
	}
	out := make([]byte, 0, n)
	for _, c := range b {
		if c < 0x80 {
			out = append(out, c)
		} else {
			out = append(out, 0xc0|c>>6, 0x80|c&0x3f)
		}
	}
	return string(out)
}

// IsASCII reports whether every byte of b is below 0x80: its Latin-1
// string is then its UTF-8 text as well.
func IsASCII(b []byte) bool { return isASCII(b) }

// isASCII is IsASCII for bytes or a string (a string is not copied), eight
// bytes a step.
func isASCII[T ~string | ~[]byte](b T) bool {
	for len(b) >= 8 {
		if (b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7])&0x80 != 0 {
			return false
		}
		b = b[8:]
	}
	for i := 0; i < len(b); i++ {
		if b[i] >= 0x80 {
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
	if isASCII(s) {
		return []byte(s), true // one byte a character either way
	}
	b = make([]byte, 0, len(s))
	ok = true
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c < 0x80: // a run of ASCII, copied at once
			j := i + 1
			for j < len(s) && s[j] < 0x80 {
				j++
			}
			b = append(b, s[i:j]...)
			i = j
		case (c == 0xc2 || c == 0xc3) && i+1 < len(s) && s[i+1]&0xc0 == 0x80: // U+0080–U+00FF
			b = append(b, c<<6|s[i+1]&0x3f)
			i += 2
		default: // past U+00FF, or not UTF-8: as ranging over s decodes it
			r, n := utf8.DecodeRuneInString(s[i:])
			ok = ok && r <= 0xff
			b = append(b, byte(r))
			i += n
		}
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
