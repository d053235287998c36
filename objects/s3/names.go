package s3

import "strings"

// maxName is S3's longest object name: a key can be as long as what
// the prefix and the space leave of it.
const maxName = 1024

// mark is how a key becomes an S3 name every service takes. Services
// that keep objects as files (SeaweedFS, MinIO) refuse a "." or ".."
// segment, drop empty ones ("a//b" is "a/b" there, "/a" is "a") and make
// a key ending in "/" a folder; AWS S3 and R2 take them all. Such a
// segment gets a mark after it ("a/./b" is "a/.\x01/b", "k/" is
// "k/\x01", "/a" is "\x01/a"). SeaweedFS also reads a "\" as a "/"
// ("a\b" would be "a/b") and refuses a NUL: those bytes are escaped as
// the mark and a byte after it ("\" is "\x01\x02", NUL "\x01\x03"),
// and a mark in a key is doubled. The mark
// is the least byte a key holds, so names sort as their keys do except
// where a marked segment meets a sibling that goes on with a byte below
// "/" ("./x" lists before ".."), and where a key holds an escaped byte
// (a "\" sorts as a byte below every other); no "/" is added or taken, so delimiters
// roll up the same. Other keys are their names.
const mark = "\x01"

// escaper escapes the mark, "\\" and NUL.
var escaper = strings.NewReplacer(mark, mark+mark, "\\", mark+"\x02", "\x00", mark+"\x03")

// encodeKey is a key's name; a list's prefix (whole false) leaves its
// last segment unmarked, since a key it prefixes may go on.
func encodeKey(k string, whole bool) string {
	if !strings.ContainsAny(k, mark+".\\\x00") && !strings.Contains(k, "//") && !strings.HasPrefix(k, "/") && !strings.HasSuffix(k, "/") {
		return k
	}
	segs := strings.Split(escaper.Replace(k), "/")
	for i, s := range segs {
		if i == len(segs)-1 && !whole {
			break
		}
		if s == "" || s == "." || s == ".." {
			segs[i] = s + mark
		}
	}
	return strings.Join(segs, "/")
}

// decodeKey undoes encodeKey.
func decodeKey(n string) string {
	if !strings.Contains(n, mark) {
		return n
	}
	var b strings.Builder
	for i := 0; i < len(n); i++ {
		if n[i] != mark[0] {
			b.WriteByte(n[i])
			continue
		}
		if i+1 < len(n) {
			switch n[i+1] {
			case mark[0]:
				b.WriteByte(mark[0])
				i++
			case 0x02:
				b.WriteByte('\\')
				i++
			case 0x03:
				b.WriteByte(0)
				i++
			}
		}
	}
	return b.String()
}
