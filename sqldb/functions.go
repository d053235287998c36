package sqldb

import (
	"bytes"
	"errors"
	"unicode/utf8"

	"github.com/ncruces/go-sqlite3"

	"github.com/retainer-gw/retainer/budgets"
)

// SQLite's instr(), replace() and trim() compare the needle at every position of
// the haystack (a memcmp each, (n-m)·m bytes in all), inside one function
// call the statement's interrupt is never checked in: instr of a 1 MB
// needle in a 2 MB haystack held a gateway core for 23 s past the run's
// bound. These are the same functions, linear (bytes.Index, bytes.Count, a set),
// registered on each connection in place of SQLite's (docs/sql.md, "Limits").
func registerFunctions(c *sqlite3.Conn) error {
	const flags = sqlite3.DETERMINISTIC | sqlite3.INNOCUOUS
	if err := c.CreateFunction("instr", 2, flags, instr); err != nil {
		return err
	}
	if err := c.CreateFunction("replace", 3, flags, replace); err != nil {
		return err
	}
	if err := registerLike(c, flags); err != nil {
		return err
	}
	for name, sides := range map[string]int{"trim": trimLeft | trimRight, "ltrim": trimLeft, "rtrim": trimRight} {
		if err := c.CreateFunction(name, 2, flags, trimmer(sides)); err != nil {
			return err
		}
	}
	return nil
}

const (
	trimLeft = 1 << iota
	trimRight
)

// trimWork bounds the byte comparisons of a trim whose characters are not
// UTF-8 (the only one done SQLite's way, a comparison a character each).
const trimWork = 64 << 20

// trimmer is trim(X, Y), ltrim(X, Y) or rtrim(X, Y) as SQLite's: NULL if
// either is NULL; X's text without the characters of Y at its ends. SQLite's
// compares every character of Y at each position, (len X)·(len Y) bytes in
// one call (20 KB by 10 KB took 2.2 s). Y's characters are SQLite's: a byte
// from 0xC0 with the continuation bytes after it, or any other byte. When Y
// is UTF-8 they are runes, none a prefix or a suffix of another: at most one
// matches at a position, found in a set.
func trimmer(sides int) sqlite3.ScalarFunction {
	return func(ctx sqlite3.Context, arg ...sqlite3.Value) {
		if arg[0].Type() == sqlite3.NULL || arg[1].Type() == sqlite3.NULL {
			ctx.ResultNull()
			return
		}
		x, y := arg[0].RawText(), arg[1].RawText()
		var chars [][]byte
		for i := 0; i < len(y); {
			j := i + 1
			if y[i] >= 0xc0 {
				for j < len(y) && y[j]&0xc0 == 0x80 {
					j++
				}
			}
			chars = append(chars, y[i:j])
			i = j
		}
		var match func(b []byte, left bool) int
		if utf8.Valid(y) {
			set := map[string]bool{}
			lens := [5]bool{}
			for _, c := range chars {
				set[string(c)] = true
				lens[len(c)] = true
			}
			match = func(b []byte, left bool) int {
				for l := 1; l <= 4 && l <= len(b); l++ {
					if !lens[l] {
						continue
					}
					if left && set[string(b[:l])] || !left && set[string(b[len(b)-l:])] {
						return l
					}
				}
				return 0
			}
		} else {
			work := 0
			match = func(b []byte, left bool) int {
				for _, c := range chars {
					if work += len(c); work > trimWork {
						return -1
					}
					if left && bytes.HasPrefix(b, c) || !left && bytes.HasSuffix(b, c) {
						return len(c)
					}
				}
				return 0
			}
		}
		if len(chars) > 0 && sides&trimLeft != 0 {
			for len(x) > 0 {
				l := match(x, true)
				if l < 0 {
					ctx.ResultError(errTrimWork)
					return
				}
				if l == 0 {
					break
				}
				x = x[l:]
			}
		}
		if len(chars) > 0 && sides&trimRight != 0 {
			for len(x) > 0 {
				l := match(x, false)
				if l < 0 {
					ctx.ResultError(errTrimWork)
					return
				}
				if l == 0 {
					break
				}
				x = x[:len(x)-l]
			}
		}
		ctx.ResultText(string(x))
	}
}

var errTrimWork = errors.New("trim: too much work for characters to trim that are not UTF-8")

// instr(X, Y) as SQLite's: NULL if either is NULL; two BLOBs, the byte
// position (from 1) of Y's first occurrence in X; otherwise both as text,
// its character position; 0 when Y is not in X, 1 when Y is empty.
func instr(ctx sqlite3.Context, arg ...sqlite3.Value) {
	th, tn := arg[0].Type(), arg[1].Type()
	if th == sqlite3.NULL || tn == sqlite3.NULL {
		ctx.ResultNull()
		return
	}
	var h, n []byte
	text := th != sqlite3.BLOB || tn != sqlite3.BLOB
	if text {
		h, n = arg[0].RawText(), arg[1].RawText()
	} else {
		h, n = arg[0].RawBlob(), arg[1].RawBlob()
	}
	if len(n) == 0 {
		ctx.ResultInt64(1)
		return
	}
	i := bytes.Index(h, n)
	if i < 0 {
		ctx.ResultInt64(0)
		return
	}
	if !text {
		ctx.ResultInt64(int64(i) + 1)
		return
	}
	// SQLite tries the first byte and then each byte that starts a
	// character (not 10xxxxxx): a match elsewhere is a needle that starts
	// with a continuation byte, which only the first position can match.
	if i > 0 && n[0]&0xc0 == 0x80 {
		ctx.ResultInt64(0)
		return
	}
	pos := int64(1)
	for j := 0; j < i; j++ {
		if j == 0 || h[j]&0xc0 != 0x80 {
			pos++
		}
	}
	ctx.ResultInt64(pos)
}

// replace(X, Y, Z) as SQLite's: NULL if any is NULL; X's text when Y is
// empty (or starts with a NUL byte); otherwise X's text with every
// occurrence of Y, left to right, replaced by Z.
func replace(ctx sqlite3.Context, arg ...sqlite3.Value) {
	if arg[0].Type() == sqlite3.NULL || arg[1].Type() == sqlite3.NULL {
		ctx.ResultNull()
		return
	}
	x, y := arg[0].RawText(), arg[1].RawText()
	if len(y) == 0 || y[0] == 0 {
		ctx.ResultText(string(x)) // as text, as SQLite's
		return
	}
	if arg[2].Type() == sqlite3.NULL {
		ctx.ResultNull()
		return
	}
	z := arg[2].RawText()
	if len(z) > len(y) {
		if k := bytes.Count(x, y); int64(len(x))+int64(k)*int64(len(z)-len(y)) > budgets.SQLValueBytes {
			ctx.ResultError(sqlite3.TOOBIG)
			return
		}
	}
	ctx.ResultText(string(bytes.ReplaceAll(x, y, z))) // "" is text, not NULL
}
