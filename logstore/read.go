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
	var from []byte
	switch {
	case cursor != "":
		c, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil || len(c) != 12 {
			return "", fault.New(fault.BadRequest, "cursor: not one this API gave.")
		}
		from = append(append(append([]byte{}, prefix...), c...), 0)
	case !since.IsZero():
		if since.After(time.Unix(0, math.MaxInt64)) {
			return cursor, nil // after every time a key can hold: none
		}
		from = binary.BigEndian.AppendUint64(append([]byte{}, prefix...), max(oldest, unixNano(since)))
	default:
		// The newest limit entries: the oldest of them is where the page
		// starts (keys only; nothing is decoded).
		err := s.st.Scan(ctx, handles, store.Range{Prefix: prefix, Limit: limit, Reverse: true}, func(k, _ []byte) bool {
			if when, _ := handleKeyTime(k, len(prefix)); when < oldest {
				return false
			}
			from = store.Copy(k)
			return true
		})
		if err != nil {
			return "", fault.New(fault.Overloaded, "The log store did not answer: %v", err)
		}
		if from == nil {
			return cursor, nil
		}
	}
	var last []byte
	for left := limit; left > 0; {
		var part []encoded
		size, more := 0, false
		err := s.st.Scan(ctx, handles, store.Range{Prefix: prefix, From: from, Limit: left}, func(k, v []byte) bool {
			when, seq := handleKeyTime(k, len(prefix))
			from = append(store.Copy(k), 0)
			if when < oldest {
				return true
			}
			var e Entry
			if json.Unmarshal(v, &e) != nil {
				return true
			}
			e.Time = time.Unix(0, int64(when))
			b, err := e.MarshalJSON()
			if err != nil {
				return true
			}
			if len(part) > 0 && size+len(b) > partBytes {
				from = store.Copy(k) // read again in the next part
				more = true
				return false
			}
			part = append(part, encoded{e, b})
			size += len(b)
			last = binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, when), seq)
			return true
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
