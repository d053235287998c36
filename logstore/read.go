package logstore

// Reading a handle's stored log: pages by time and cursor, answered in
// parts so that a page never sits whole in memory (docs/logs.md).

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/store"
)

// Page is one page of a handle's log: entries oldest first, and the
// cursor that reads on after them.
type Page struct {
	Entries []Entry
	Cursor  string
}

// List answers a page of id's log, whole (Read writes one in parts). With
// a cursor: the entries after the one it names; else with since: the
// first entries at or after it; else the newest entries. limit ≤ 0 is
// DefaultLimit; more than budgets.LogPageEntries is that many. The cursor is the last
// entry's (or, on an empty page, the one given), so polling with it reads
// each entry once.
func (s *Store) List(tenant, id string, since time.Time, limit int, cursor string) (Page, error) {
	page := Page{Entries: []Entry{}}
	next, err := s.read(tenant, id, since, limit, cursor, math.MaxInt, func(part []encoded) error {
		for _, e := range part {
			page.Entries = append(page.Entries, e.entry)
		}
		return nil
	})
	if err != nil {
		return Page{}, err
	}
	page.Cursor = next
	return page, nil
}

// Read is List for a reader that writes the page as it is read: write is
// called with the entries' JSON in parts of at most partBytes (an entry
// is never larger), each read from the store after the last was written,
// so at most one part is held at once. It answers the cursor that reads on
// after the page; an error of write ends the page.
func (s *Store) Read(tenant, id string, since time.Time, limit int, cursor string, partBytes int, write func(entries [][]byte) error) (string, error) {
	var part [][]byte
	return s.read(tenant, id, since, limit, cursor, partBytes, func(es []encoded) error {
		part = part[:0]
		for _, e := range es {
			part = append(part, e.json)
		}
		return write(part)
	})
}

// encoded is an entry read, and its JSON as the API answers it.
type encoded struct {
	entry Entry
	json  []byte
}

// MaxEntryBytes bounds one entry's JSON as Read writes it (a part holds at
// least one entry): its message, its url, and the rest.
const MaxEntryBytes = budgets.LogMessageBytes + 2*budgets.LogURLBytes + 1024

func (s *Store) read(tenant, id string, since time.Time, limit int, cursor string, partBytes int, write func([]encoded) error) (string, error) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	limit = min(limit, budgets.LogPageEntries)
	partBytes = max(partBytes, MaxEntryBytes)
	s.FlushHandle(tenant, id)
	s.mu.Lock()
	oldest := unixNano(s.now().Add(-s.retention))
	s.mu.Unlock()
	ctx := context.Background()
	prefix := lp(lp(nil, tenant), id)
	var from key
	switch {
	case cursor != "":
		c, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil || len(c) != 12 {
			return "", fault.New(fault.BadRequest, "cursor: not one this API gave.")
		}
		k := key{binary.BigEndian.Uint64(c), binary.BigEndian.Uint32(c[8:])}
		if k.when == math.MaxUint64 && k.seq == math.MaxUint32 {
			return cursor, nil // the last key there can be: nothing is after it (next would wrap round to the oldest)
		}
		from = k.next()
	case !since.IsZero():
		if since.After(time.Unix(0, math.MaxInt64)) {
			return cursor, nil // after every time a key can hold: none
		}
		from = key{max(oldest, unixNano(since)), 0}
	default:
		// The newest limit entries: the first of them is where the page
		// starts.
		f, ok, err := s.newest(ctx, prefix, limit, oldest)
		if err != nil {
			return "", fault.New(fault.Overloaded, "The log store did not answer: %v", err)
		}
		if !ok {
			return cursor, nil
		}
		from = f
	}
	var last []byte
	for left := limit; left > 0; {
		var part []encoded
		size, more := 0, false
		err := s.each(ctx, prefix, from, oldest, func(k key, e Entry) bool {
			b, err := e.MarshalJSON()
			if err != nil {
				from = k.next()
				return true
			}
			if len(part) > 0 && size+len(b) > partBytes {
				more = true // read again in the next part
				return false
			}
			part = append(part, encoded{e, b})
			size += len(b)
			from, last = k.next(), k.bytes()
			return len(part) < left
		})
		if err != nil {
			return "", fault.New(fault.Overloaded, "The log store did not answer: %v", err)
		}
		if len(part) > 0 {
			if err := write(part); err != nil {
				return "", err
			}
		}
		left -= len(part)
		if !more {
			break
		}
	}
	if last == nil {
		return cursor, nil
	}
	return base64.RawURLEncoding.EncodeToString(last), nil
}

// each calls fn with the entries of the handle whose keys begin with
// prefix, from the key from on, in order (those stored before pages, then
// the pages'), leaving out those older than oldest, until fn answers
// false. fn is called during a read of the store: it must not read it.
func (s *Store) each(ctx context.Context, prefix []byte, from key, oldest uint64, fn func(key, Entry) bool) error {
	const oldChunk, pageChunk = 256, 8
	stopped := false
	at := func(k key) []byte { return append(append(make([]byte, 0, len(prefix)+13), prefix...), k.bytes()...) }
	start := at(from)
	for !stopped {
		seen := 0
		err := s.st.Scan(ctx, handles, store.Range{Prefix: prefix, From: start, Limit: oldChunk}, func(k, v []byte) bool {
			seen++
			start = append(store.Copy(k), 0)
			when, seq := handleKeyTime(k, len(prefix))
			if when < oldest {
				return true
			}
			var e Entry
			if json.Unmarshal(v, &e) != nil {
				return true
			}
			e.Time = time.Unix(0, int64(when))
			stopped = !fn(key{when, seq}, e)
			return !stopped
		})
		if err != nil {
			return err
		}
		if seen < oldChunk {
			break
		}
	}
	// The page holding from (the last whose first key is not after it),
	// then the pages after it.
	start = at(from)
	if err := s.st.Scan(ctx, pages, store.Range{Prefix: prefix, To: append(at(from), 0), Reverse: true, Limit: 1, KeysOnly: true}, func(k, _ []byte) bool {
		start = store.Copy(k)
		return false
	}); err != nil {
		return err
	}
	for !stopped {
		seen := 0
		err := s.st.Scan(ctx, pages, store.Range{Prefix: prefix, From: start, Limit: pageChunk}, func(k, v []byte) bool {
			seen++
			start = append(store.Copy(k), 0)
			p, err := openPage(k, len(prefix), v)
			if err != nil {
				return true
			}
			for {
				ek, when, body, ok := p.next()
				if !ok {
					return true
				}
				if ek.less(from) || when < oldest {
					continue
				}
				if stopped = !fn(ek, decodeBody(body, when)); stopped {
					return false
				}
			}
		})
		if err != nil {
			return err
		}
		if seen < pageChunk {
			break
		}
	}
	return nil
}

// newest is the key of the first of the handle's newest limit entries
// (false: it has none): pages' entries counted from their headers, newest
// first, then those stored before pages.
func (s *Store) newest(ctx context.Context, prefix []byte, limit int, oldest uint64) (key, bool, error) {
	const pageChunk = 16
	need := limit
	var from key
	found := false
	var to []byte
	for need > 0 {
		seen := 0
		err := s.st.Scan(ctx, pages, store.Range{Prefix: prefix, To: to, Reverse: true, Limit: pageChunk}, func(k, v []byte) bool {
			seen++
			to = store.Copy(k)
			h, ok := parseHead(v)
			if !ok {
				return true
			}
			n := h.ccount + h.rcount
			if n == 0 {
				return true
			}
			w, q := handleKeyTime(k, len(prefix))
			from, found = key{w, q}, true
			if n < need {
				need -= n
				return true
			}
			// The start is in this page: its entry n-need.
			if p, err := openPage(k, len(prefix), v); err == nil {
				for i := 0; i <= n-need; i++ {
					ek, _, _, ok := p.next()
					if !ok {
						break
					}
					from = ek
				}
			}
			need = 0
			return false
		})
		if err != nil {
			return key{}, false, err
		}
		if seen < pageChunk {
			break
		}
	}
	if need == 0 {
		return from, true, nil
	}
	// Then the entries stored before pages (keys only; nothing is decoded).
	err := s.st.Scan(ctx, handles, store.Range{Prefix: prefix, Limit: need, Reverse: true, KeysOnly: true}, func(k, _ []byte) bool {
		when, seq := handleKeyTime(k, len(prefix))
		if when < oldest {
			return false
		}
		from, found = key{when, seq}, true
		return true
	})
	return from, found, err
}
