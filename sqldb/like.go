package sqldb

import (
	"bytes"
	"errors"

	"github.com/ncruces/go-sqlite3"
)

// SQLite's LIKE and GLOB (patternCompare in its func.c) try the rest of
// the pattern at every position a '%' or '*' could stop at: (len X)·(len
// pattern) steps inside one function call, where the statement's interrupt
// is never checked (a 20 KB value against '%' and 10 KB took 0.6 s; 16 MB
// against SQLite's 50 KB pattern bound would take most of an hour). These
// are SQLite's algorithm, ported step for step, with its steps counted:
// past likeWork the call fails (docs/sql.md, "Limits").

// likeWork bounds one LIKE or GLOB call's steps (a step is a character of
// the value read, or a try of the rest of the pattern).
const likeWork = 64 << 20

var errLikeWork = errors.New("LIKE or GLOB pattern too complex: too much work for this value")

const (
	likeMatch = iota
	likeNoMatch
	likeNoWildcardMatch
	likeTooMuch
)

type likeInfo struct {
	matchAll, matchOne, matchSet rune
	noCase                       bool
}

var (
	likeInfoNorm = likeInfo{'%', '_', 0, true}
	globInfo     = likeInfo{'*', '?', '[', false}
)

func registerLike(c *sqlite3.Conn, flags sqlite3.FunctionFlag) error {
	if err := c.CreateFunction("like", 2, flags, likeFunc(likeInfoNorm)); err != nil {
		return err
	}
	if err := c.CreateFunction("like", 3, flags, likeFunc(likeInfoNorm)); err != nil {
		return err
	}
	return c.CreateFunction("glob", 2, flags, likeFunc(globInfo))
}

// likeFunc is SQLite's likeFunc: like(P, X[, E]) and glob(P, X).
func likeFunc(norm likeInfo) sqlite3.ScalarFunction {
	return func(ctx sqlite3.Context, arg ...sqlite3.Value) {
		info := norm // a call's own: the escape may change it
		// SQLite's order (built with SQLITE_LIKE_DOESNT_MATCH_BLOBS): a
		// BLOB matches nothing, then the pattern's length, the escape, NULL.
		if arg[0].Type() == sqlite3.BLOB || arg[1].Type() == sqlite3.BLOB {
			ctx.ResultInt64(0)
			return
		}
		if len(arg[0].RawText()) > likePatternLength {
			ctx.ResultError(errors.New("LIKE or GLOB pattern too complex"))
			return
		}
		escape := info.matchSet
		if len(arg) == 3 {
			if arg[2].Type() == sqlite3.NULL {
				ctx.ResultNull()
				return
			}
			e := cString(arg[2].RawText())
			if utf8CharLen(e) != 1 {
				ctx.ResultError(errors.New("ESCAPE expression must be a single character"))
				return
			}
			i := 0
			escape = utf8Read(e, &i)
			if escape == info.matchAll {
				info.matchAll = 0
			}
			if escape == info.matchOne {
				info.matchOne = 0
			}
		}
		if arg[0].Type() == sqlite3.NULL || arg[1].Type() == sqlite3.NULL {
			ctx.ResultNull()
			return
		}
		p, x := cString(arg[0].RawText()), cString(arg[1].RawText())
		m := &matcher{info: info}
		switch m.compare(p, x, escape) {
		case likeTooMuch:
			ctx.ResultError(errLikeWork)
		case likeMatch:
			ctx.ResultInt64(1)
		default:
			ctx.ResultInt64(0)
		}
	}
}

// likePatternLength is SQLite's SQLITE_MAX_LIKE_PATTERN_LENGTH, the bound
// its likeFunc checks.
const likePatternLength = 50000

// cString is s as C sees it: up to its first NUL.
func cString(s []byte) []byte {
	if i := bytes.IndexByte(s, 0); i >= 0 {
		return s[:i]
	}
	return s
}

// utf8Trans1 is SQLite's sqlite3Utf8Trans1: a lead byte's bits.
var utf8Trans1 = [64]rune{
	0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
	0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
	0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
	0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x00, 0x01, 0x02, 0x03, 0x00, 0x01, 0x00, 0x00,
}

// utf8Read is SQLite's sqlite3Utf8Read on s from *i (0 at the end).
func utf8Read(s []byte, i *int) rune {
	if *i >= len(s) {
		return 0
	}
	c := rune(s[*i])
	*i++
	if c >= 0xc0 {
		c = utf8Trans1[c-0xc0]
		for *i < len(s) && s[*i]&0xc0 == 0x80 {
			c = c<<6 + rune(s[*i]&0x3f)
			*i++
		}
		if c < 0x80 || c&^0x7ff == 0xd800 || c&^1 == 0xfffe {
			c = 0xfffd
		}
	}
	return c
}

func utf8CharLen(s []byte) int {
	n := 0
	for i := 0; i < len(s); {
		utf8Read(s, &i)
		n++
	}
	return n
}

func toLower(c rune) rune {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func toUpper(c rune) rune {
	if c >= 'a' && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}

type matcher struct {
	info likeInfo
	work int
}

// compare is SQLite's patternCompare, its steps counted.
func (m *matcher) compare(p, s []byte, matchOther rune) int {
	matchAll, matchOne, noCase := m.info.matchAll, m.info.matchOne, m.info.noCase
	pi, si := 0, 0
	escaped := -1
	if m.work++; m.work > likeWork {
		return likeTooMuch
	}
	for {
		c := utf8Read(p, &pi)
		if c == 0 {
			break
		}
		if c == matchAll && matchAll != 0 {
			for {
				c = utf8Read(p, &pi)
				if c == matchAll && matchAll != 0 || c == matchOne && matchOne != 0 {
					if c == matchOne {
						m.work++
						if utf8Read(s, &si) == 0 {
							return likeNoWildcardMatch
						}
					}
					continue
				}
				break
			}
			if c == 0 {
				return likeMatch
			} else if c == matchOther {
				if m.info.matchSet == 0 {
					c = utf8Read(p, &pi)
					if c == 0 {
						return likeNoWildcardMatch
					}
				} else {
					// "[...]" right after the "*".
					for si < len(s) {
						r := m.compare(p[pi-1:], s[si:], matchOther)
						if r != likeNoMatch {
							return r
						}
						utf8Read(s, &si) // SQLITE_SKIP_UTF8
					}
					return likeNoWildcardMatch
				}
			}
			for {
				var c2 rune
				if c < 0x80 {
					// strcspn for c (either case): then one past it.
					found := false
					for si < len(s) {
						m.work++
						b := rune(s[si])
						si++
						if b == c || noCase && (b == toUpper(c) || b == toLower(c)) {
							found = true
							break
						}
					}
					if !found {
						break
					}
				} else {
					c2 = utf8Read(s, &si)
					m.work++
					if c2 == 0 {
						break
					}
					if c2 != c {
						if m.work > likeWork {
							return likeTooMuch
						}
						continue
					}
				}
				r := m.compare(p[pi:], s[si:], matchOther)
				if r != likeNoMatch {
					return r
				}
				if m.work > likeWork {
					return likeTooMuch
				}
			}
			return likeNoWildcardMatch
		}
		if c == matchOther && matchOther != 0 {
			if m.info.matchSet == 0 {
				c = utf8Read(p, &pi)
				if c == 0 {
					return likeNoMatch
				}
				escaped = pi
			} else {
				var prior rune
				seen, invert := false, false
				c = utf8Read(s, &si)
				if c == 0 {
					return likeNoMatch
				}
				c2 := utf8Read(p, &pi)
				if c2 == '^' {
					invert = true
					c2 = utf8Read(p, &pi)
				}
				if c2 == ']' {
					if c == ']' {
						seen = true
					}
					c2 = utf8Read(p, &pi)
				}
				for c2 != 0 && c2 != ']' {
					if c2 == '-' && pi < len(p) && p[pi] != ']' && prior > 0 {
						c2 = utf8Read(p, &pi)
						if c >= prior && c <= c2 {
							seen = true
						}
						prior = 0
					} else {
						if c == c2 {
							seen = true
						}
						prior = c2
					}
					c2 = utf8Read(p, &pi)
				}
				if c2 == 0 || seen == invert {
					return likeNoMatch
				}
				continue
			}
		}
		c2 := utf8Read(s, &si)
		m.work++
		if c == c2 {
			continue
		}
		if noCase && toLower(c) == toLower(c2) && c < 0x80 && c2 < 0x80 {
			continue
		}
		if c == matchOne && matchOne != 0 && pi != escaped && c2 != 0 {
			continue
		}
		return likeNoMatch
	}
	if si >= len(s) {
		return likeMatch
	}
	return likeNoMatch
}
