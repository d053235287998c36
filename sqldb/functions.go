package sqldb

import (
	"bytes"

	"github.com/ncruces/go-sqlite3"
)

// SQLite's instr() and replace() compare the needle at every position of
// the haystack (a memcmp each, (n-m)·m bytes in all), inside one function
// call the statement's interrupt is never checked in: instr of a 1 MB
// needle in a 2 MB haystack held a gateway core for 23 s past the run's
// bound. These are the same functions, linear (bytes.Index, bytes.Count),
// registered on each connection in place of SQLite's (docs/sql.md, "Limits").
func registerFunctions(c *sqlite3.Conn) error {
	const flags = sqlite3.DETERMINISTIC | sqlite3.INNOCUOUS
	if err := c.CreateFunction("instr", 2, flags, instr); err != nil {
		return err
	}
	return c.CreateFunction("replace", 3, flags, replace)
}

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
		if k := bytes.Count(x, y); int64(len(x))+int64(k)*int64(len(z)-len(y)) > maxValue {
			ctx.ResultError(sqlite3.TOOBIG)
			return
		}
	}
	ctx.ResultText(string(bytes.ReplaceAll(x, y, z))) // "" is text, not NULL
}
