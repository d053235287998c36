package logstore

// Pages: the stored form of a handle's entries since 2026-12-06 (docs/logs.md,
// "Storage, batching and limits"). Each commit writes one record a handle,
// its page, holding the entries of that handle the commit wrote, encoded
// compactly; the tables keep one key a page instead of two an entry.
//
// A page's key is lp(tenant) lp(id) when seq of its first entry (the
// order key, as the older one-entry-a-key form's); its value is
//
//	version (1 byte) | console length (4) | console count (4) | request count (4)
//	console section | request section
//
// Console and system entries are in the console section, request entries
// in the request section (the quota drops request entries first, and a
// page's request section is cut off by keeping the bytes before it); each
// section's entries are in order, each
//
//	uvarint order time − the last entry's (the first: − the page key's)
//	uvarint order seq − the last entry's (mod 2³²)
//	uvarint order time − the entry's time (0 unless it came after a newer one)
//	level (1 byte: an index in levels, or 0xff and the level's length and bytes)
//	fields (1 byte: which follow) | message | method | url | status | durationMs | cpuMs
//
// strings as a uvarint length and the bytes, status a zig-zag varint, the
// durations a float64's 8 bytes. An entry's order (when, seq) is its time
// and the writer's sequence, or just after the handle's last entry when it
// came later than a newer one (or than the handle's last stored entry, at
// commit: another gateway's clock, a restart's), so a handle's entries are
// one ordered stream across its pages, none of whose keys overlap (a
// page's entries are after every earlier page's): a read seeks the page
// holding its start and reads on.

import (
	"encoding/binary"
	"errors"
	"math"
	"time"
)

const (
	pageVersion = 1
	pageHeader  = 13
	// pageBytes bounds a page's entries (one larger entry has a page of its
	// own): bbolt rewrites the whole leaf a new key goes into, and a leaf
	// holds at least two keys, so a handle's pages of ~2 KiB make a
	// commit rewrite ~4 KiB of its older entries, where pages of a
	// commit's every entry rewrote the last two or three commits' pages
	// each time (docs/logs.md, "What it costs").
	pageBytes = 1900
)

// Which fields an entry holds.
const (
	fMessage = 1 << iota
	fMethod
	fURL
	fStatus
	fDuration
	fCPU
	fURLTruncated
)

// levels are the levels a byte names; any other is written out.
var levels = [...]string{"log", "info", "warn", "error", "debug", "system", "request"}

var errPage = errors.New("logstore: a stored page does not decode")

// key is an entry's place in its handle's log: its order time and
// sequence, compared as the stored keys' 12 bytes are.
type key struct {
	when uint64
	seq  uint32
}

func (k key) less(o key) bool { return k.when < o.when || k.when == o.when && k.seq < o.seq }

// next is the first key after k.
func (k key) next() key {
	if k.seq == math.MaxUint32 {
		return key{k.when + 1, 0}
	}
	return key{k.when, k.seq + 1}
}

func (k key) bytes() []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(make([]byte, 0, 12), k.when), k.seq)
}

// section is one kind of a page's entries as they wait and are stored.
type section struct {
	buf   []byte
	count int
	last  key // its last entry's (the page's first key before one is in)
}

// page is one handle's entries waiting for the writer, encoded as they
// will be stored.
type page struct {
	first, last key
	n           int
	sec         [2]section // console, request
	// floored: last is a key the page's entries go after, before any is in.
	floored bool
}

// add appends e at (when, seq), or just after the page's last entry when
// that is not before it, and answers the bytes it took. e's durations are
// finite (validEntry refused the others).
func (p *page) add(e *Entry, when uint64, seq uint32) int {
	k := key{when, seq}
	if (p.n > 0 || p.floored) && !p.last.less(k) {
		k = key{p.last.when + 1, seq}
	}
	if p.n == 0 {
		p.first = k
		p.sec[0].last, p.sec[1].last = k, k
	}
	s := &p.sec[0]
	if e.Level == "request" {
		s = &p.sec[1]
	}
	before := len(s.buf)
	s.buf = binary.AppendUvarint(s.buf, k.when-s.last.when)
	s.buf = binary.AppendUvarint(s.buf, uint64(k.seq-s.last.seq))
	s.buf = binary.AppendUvarint(s.buf, k.when-when)
	s.buf = appendBody(s.buf, e)
	s.last, p.last = k, k
	s.count++
	p.n++
	return len(s.buf) - before
}

// bytes is what the page's entries take.
func (p *page) bytes() int { return len(p.sec[0].buf) + len(p.sec[1].buf) }

// value is the page's stored value.
func (p *page) value() []byte {
	v := make([]byte, pageHeader, pageHeader+p.bytes())
	v[0] = pageVersion
	binary.BigEndian.PutUint32(v[1:], uint32(len(p.sec[0].buf)))
	binary.BigEndian.PutUint32(v[5:], uint32(p.sec[0].count))
	binary.BigEndian.PutUint32(v[9:], uint32(p.sec[1].count))
	return append(append(v, p.sec[0].buf...), p.sec[1].buf...)
}

// after is the page with its entries placed after last (each that is not
// after it, and after the one before it, goes just after): its first
// entry is not after the handle's last stored one.
func (p *page) after(last key) *page {
	np := &page{last: last, floored: true}
	r, err := openPage(p.first.bytes(), 0, p.value())
	if err != nil {
		return p
	}
	for {
		k, when, body, ok := r.next()
		if !ok {
			return np
		}
		e := decodeBody(body, when)
		np.add(&e, when, k.seq)
	}
}

// validEntry refuses what JSON cannot answer: a non-finite duration.
func validEntry(e *Entry) error {
	for _, f := range []float64{e.DurationMs, e.CPUMs} {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return errors.New("logstore: a duration is not a finite number")
		}
	}
	return nil
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// appendBody appends e's level and fields (not its time).
func appendBody(b []byte, e *Entry) []byte {
	lv := byte(0xff)
	for i, l := range levels {
		if l == e.Level {
			lv = byte(i)
			break
		}
	}
	b = append(b, lv)
	if lv == 0xff {
		b = appendString(b, e.Level)
	}
	var f byte
	if e.Message != "" {
		f |= fMessage
	}
	if e.Method != "" {
		f |= fMethod
	}
	if e.URL != "" {
		f |= fURL
	}
	if e.Status != 0 {
		f |= fStatus
	}
	if e.DurationMs != 0 {
		f |= fDuration
	}
	if e.CPUMs != 0 {
		f |= fCPU
	}
	if e.URLTruncated {
		f |= fURLTruncated
	}
	b = append(b, f)
	if f&fMessage != 0 {
		b = appendString(b, e.Message)
	}
	if f&fMethod != 0 {
		b = appendString(b, e.Method)
	}
	if f&fURL != 0 {
		b = appendString(b, e.URL)
	}
	if f&fStatus != 0 {
		b = binary.AppendVarint(b, int64(e.Status))
	}
	if f&fDuration != 0 {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(e.DurationMs))
	}
	if f&fCPU != 0 {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(e.CPUMs))
	}
	return b
}

// pageHead is a stored page's header.
type pageHead struct {
	clen           int
	ccount, rcount int
}

func parseHead(v []byte) (pageHead, bool) {
	if len(v) < pageHeader || v[0] != pageVersion {
		return pageHead{}, false
	}
	h := pageHead{clen: int(binary.BigEndian.Uint32(v[1:])),
		ccount: int(binary.BigEndian.Uint32(v[5:])), rcount: int(binary.BigEndian.Uint32(v[9:]))}
	if h.clen > len(v)-pageHeader {
		return pageHead{}, false
	}
	return h, true
}

// cursor reads one section's entries in order.
type cursor struct {
	b    []byte
	left int
	last key
	// The entry read last: its key, its time, and its body's bytes.
	k    key
	when uint64
	body []byte
}

// step reads the next entry's key and finds its body; false at the end
// (or when the bytes do not decode: the rest of the section is skipped).
func (c *cursor) step() bool {
	if c.left <= 0 {
		return false
	}
	dw, n1 := binary.Uvarint(c.b)
	if n1 <= 0 {
		c.left = 0
		return false
	}
	ds, n2 := binary.Uvarint(c.b[n1:])
	if n2 <= 0 {
		c.left = 0
		return false
	}
	late, n3 := binary.Uvarint(c.b[n1+n2:])
	if n3 <= 0 {
		c.left = 0
		return false
	}
	rest := c.b[n1+n2+n3:]
	n := bodyLen(rest)
	if n < 0 {
		c.left = 0
		return false
	}
	c.k = key{c.last.when + dw, c.last.seq + uint32(ds)}
	c.when = c.k.when - late
	c.body = rest[:n]
	c.b = rest[n:]
	c.last = c.k
	c.left--
	return true
}

// pageEntries reads a stored page's entries in order, both sections merged.
type pageEntries struct {
	cur [2]cursor
	ok  [2]bool
}

func openPage(k []byte, prefix int, v []byte) (*pageEntries, error) {
	h, ok := parseHead(v)
	if !ok || len(k) != prefix+12 {
		return nil, errPage
	}
	first := key{binary.BigEndian.Uint64(k[prefix:]), binary.BigEndian.Uint32(k[prefix+8:])}
	body := v[pageHeader:]
	p := &pageEntries{}
	p.cur[0] = cursor{b: body[:h.clen], left: h.ccount, last: first}
	p.cur[1] = cursor{b: body[h.clen:], left: h.rcount, last: first}
	p.ok[0], p.ok[1] = p.cur[0].step(), p.cur[1].step()
	return p, nil
}

// next answers the page's next entry: its key, its time and its body.
func (p *pageEntries) next() (key, uint64, []byte, bool) {
	i := 0
	switch {
	case p.ok[0] && p.ok[1]:
		if p.cur[1].k.less(p.cur[0].k) {
			i = 1
		}
	case p.ok[1]:
		i = 1
	case !p.ok[0]:
		return key{}, 0, nil, false
	}
	c := &p.cur[i]
	k, when, body := c.k, c.when, c.body
	p.ok[i] = c.step()
	return k, when, body, true
}

// lastKey is a stored page's last entry's key.
func lastKey(k []byte, prefix int, v []byte) (key, bool) {
	p, err := openPage(k, prefix, v)
	if err != nil {
		return key{}, false
	}
	var last key
	found := false
	for {
		k, _, _, ok := p.next()
		if !ok {
			return last, found
		}
		last, found = k, true
	}
}

func uvarintString(b []byte) (string, []byte, bool) {
	n, m := binary.Uvarint(b)
	if m <= 0 || n > uint64(len(b)-m) {
		return "", nil, false
	}
	return string(b[m : m+int(n)]), b[m+int(n):], true
}

func skipString(b []byte) int {
	n, m := binary.Uvarint(b)
	if m <= 0 || n > uint64(len(b)-m) {
		return -1
	}
	return m + int(n)
}

// bodyLen is how many bytes of b the entry's body takes (-1: it does not
// decode).
func bodyLen(b []byte) int {
	if len(b) < 1 {
		return -1
	}
	i := 1
	if b[0] == 0xff {
		n := skipString(b[i:])
		if n < 0 {
			return -1
		}
		i += n
	} else if int(b[0]) >= len(levels) {
		return -1
	}
	if len(b) < i+1 {
		return -1
	}
	f := b[i]
	i++
	for _, bit := range []byte{fMessage, fMethod, fURL} {
		if f&bit != 0 {
			n := skipString(b[i:])
			if n < 0 {
				return -1
			}
			i += n
		}
	}
	if f&fStatus != 0 {
		_, n := binary.Varint(b[i:])
		if n <= 0 {
			return -1
		}
		i += n
	}
	for _, bit := range []byte{fDuration, fCPU} {
		if f&bit != 0 {
			if len(b) < i+8 {
				return -1
			}
			i += 8
		}
	}
	return i
}

// decodeBody is the entry a body (bodyLen checked it) holds, at when.
func decodeBody(b []byte, when uint64) Entry {
	e := Entry{Time: time.Unix(0, int64(when))}
	if b[0] == 0xff {
		e.Level, b, _ = uvarintString(b[1:])
	} else {
		e.Level, b = levels[b[0]], b[1:]
	}
	f := b[0]
	b = b[1:]
	if f&fMessage != 0 {
		e.Message, b, _ = uvarintString(b)
	}
	if f&fMethod != 0 {
		e.Method, b, _ = uvarintString(b)
	}
	if f&fURL != 0 {
		e.URL, b, _ = uvarintString(b)
	}
	if f&fStatus != 0 {
		s, n := binary.Varint(b)
		e.Status, b = int(s), b[n:]
	}
	if f&fDuration != 0 {
		e.DurationMs, b = math.Float64frombits(binary.LittleEndian.Uint64(b)), b[8:]
	}
	if f&fCPU != 0 {
		e.CPUMs = math.Float64frombits(binary.LittleEndian.Uint64(b))
	}
	e.URLTruncated = f&fURLTruncated != 0
	return e
}
