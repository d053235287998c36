package handles

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/store"
)

// A record in the store is two parts (docs/architecture.md, "The store
// contract"):
//
//   - its meta, at tableHandles: everything but the program and the
//     recorded tool answers. Counters, strikes and routes change it, so
//     it is small (a few hundred bytes) whatever the program.
//   - its body, at tableBodies: the program and the recorded tool
//     answers, which never change after the deploy, in chunks of
//     recordChunk bytes under registry\0id\0<index>, written once before the
//     meta and deleted with it.
//
// A counter flush rewrites only metas, and a record of several MiB fits
// a store whose transactions are smaller than it (etcd's 1.5 MiB). A
// record written whole by an earlier release (a meta with its program)
// is read as it is and split the next time the store is loaded.
const (
	tableBodies = "bodies"
	recordChunk = 256 << 10
)

// recordBody is the part of a record that never changes.
type recordBody struct {
	Program     program.Program `json:"program"`
	ToolAnswers []ToolAnswer    `json:"toolAnswers,omitempty"`
}

// metaOp writes rec's meta.
func metaOp(rec *Record) store.Op {
	m := *rec
	m.Program = program.Program{}
	m.ToolAnswers = nil
	data, _ := json.Marshal(&m)
	return store.Put(tableHandles, key(rec.Registry, rec.ID), data)
}

// bodyKey is the key of chunk i of a record's body.
func bodyKey(registry, id string, i int) []byte {
	return fmt.Appendf(key(registry, id), "\x00%06d", i)
}

// bodyOps writes rec's body in chunks; rec.BodyChunks must be set to
// their number before rec is shared (withBody). It is written without HTML
// escaping, so the recorded answers' 1 MiB (hostcall.go) is what is stored,
// not up to six times that for answers full of '<'.
func bodyOps(rec *Record) ([]store.Op, error) {
	data, err := wirejson.Marshal(recordBody{Program: rec.Program, ToolAnswers: rec.ToolAnswers})
	if err != nil {
		return nil, err
	}
	var ops []store.Op
	for i := 0; len(data) > 0; i++ {
		n := min(recordChunk, len(data))
		ops = append(ops, store.Put(tableBodies, bodyKey(rec.Registry, rec.ID, i), data[:n]))
		data = data[n:]
	}
	return ops, nil
}

// withBody answers the ops that write rec's body, and sets
// rec.BodyChunks; called before rec is in the registry's map, where
// flushes copy it.
func withBody(rec *Record) ([]store.Op, error) {
	ops, err := bodyOps(rec)
	rec.BodyChunks = len(ops)
	return ops, err
}

// bodyDeletes removes rec's body.
func bodyDeletes(rec *Record) []store.Op {
	ops := make([]store.Op, rec.BodyChunks)
	for i := range ops {
		ops[i] = store.Delete(tableBodies, bodyKey(rec.Registry, rec.ID, i))
	}
	return ops
}

// insertRecord writes a new record: its body, then its meta (in one
// transaction when they fit the store's limits, else the meta in the
// last), so a record is never stored without its body. ctx carries the
// deploy's bounded write (writes.go). On one machine the commit is
// journalled (store.Journalled): on disk after one fdatasync of a file
// of its own, not behind the request log's commits to bbolt
// (docs/decisions.md, "A deploy's record is journalled").
func (s *Store) insertRecord(ctx context.Context, r *Record, body []store.Op) error {
	ops := append(body, metaOp(r))
	if err := s.commitChunked(store.Journalled(ctx), r.Registry, r.Tenant, ops); err != nil {
		if errors.Is(err, errWriteDropped) {
			return err
		}
		// What was written is taken back, the meta first: a failure the
		// store answered may still have been applied (an answer lost),
		// and a deploy that failed must not appear later (retried until
		// it lands, writes.go).
		s.takeBackUntilLanded(r)
		return err
	}
	return nil
}

// takeBack deletes a record whose deploy failed or was given up on: its
// meta first, then its body, so it is never stored without its body.
func (s *Store) takeBack(r *Record) error {
	ops := append([]store.Op{store.Delete(tableHandles, key(r.Registry, r.ID))}, bodyDeletes(r)...)
	ops = append(ops, store.Delete(tableTakeBacks, key(r.Registry, r.ID))) // its mark, if any (writes.go)
	return s.commitChunked(context.Background(), r.Registry, r.Tenant, ops)
}

// updateRecord writes a changed record's meta only if it is still
// stored: a strike or a touch that races with the handle's end can never
// bring a closed handle back (end deletes the key in its own transaction).
func (s *Store) updateRecord(r *Record) error {
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	// The record as it is now, which holds r's change and any made since.
	s.mu.Lock()
	if cur := s.records[r.ID]; cur != nil {
		now := *cur
		r = &now
	}
	s.mu.Unlock()
	return s.writeMeta(r)
}

// writeMeta commits r's meta if its record is still stored (metaMu held).
func (s *Store) writeMeta(r *Record) error {
	k := key(r.Registry, r.ID)
	err := s.commit(context.Background(), r.Registry, r.Tenant, []store.Cond{store.Exists(tableHandles, k)}, []store.Op{metaOp(r)})
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	return err
}

// loadBody reads one record's body from the store (a record stored whole
// has it already).
func (s *Store) loadBody(ctx context.Context, rec *Record) error {
	if rec.BodyChunks == 0 {
		return nil
	}
	var buf bytes.Buffer
	err := s.w.Scan(ctx, tableBodies, store.Range{Prefix: append(key(rec.Registry, rec.ID), 0)}, func(k, v []byte) bool {
		buf.Write(v)
		return true
	})
	if err != nil {
		return err
	}
	var b recordBody
	if err := json.Unmarshal(buf.Bytes(), &b); err != nil {
		return fmt.Errorf("the body of record %q is corrupt: %w", rec.ID, err)
	}
	rec.Program, rec.ToolAnswers = b.Program, b.ToolAnswers
	return nil
}

// loadRecords reads every record: metas, then the bodies of those split
// from them. Records stored whole are split now, each in its own
// transactions (their meta last).
func (s *Store) loadRecords(ctx context.Context) error {
	var corrupt error
	err := s.w.Scan(ctx, tableHandles, store.Range{}, func(k, v []byte) bool {
		var r Record
		if err := json.Unmarshal(v, &r); err != nil {
			corrupt = fmt.Errorf("record %q is corrupt: %w", k, err)
			return false
		}
		s.records[r.ID] = &r
		return true
	})
	if err != nil {
		return err
	}
	if corrupt != nil {
		return corrupt
	}
	// Bodies in key order: each record's chunks are consecutive, in index
	// order. Chunks of no record (an insert that stopped half done) are
	// skipped.
	var cur *Record
	var buf bytes.Buffer
	finish := func() {
		if cur == nil {
			return
		}
		var b recordBody
		if err := json.Unmarshal(buf.Bytes(), &b); err != nil && corrupt == nil {
			corrupt = fmt.Errorf("the body of record %q is corrupt: %w", cur.ID, err)
		}
		cur.Program, cur.ToolAnswers = b.Program, b.ToolAnswers
		cur, buf = nil, bytes.Buffer{}
	}
	err = s.w.Scan(ctx, tableBodies, store.Range{}, func(k, v []byte) bool {
		i := bytes.LastIndexByte(k, 0)
		reg, id, ok := splitKey(k[:max(i, 0)])
		if i < 0 || !ok {
			return true
		}
		r := s.records[id]
		if r == nil || r.Registry != reg || r.BodyChunks == 0 {
			return true
		}
		if cur != r {
			finish()
			cur = r
		}
		buf.Write(v)
		return true
	})
	finish()
	if err != nil {
		return err
	}
	if corrupt != nil {
		return corrupt
	}
	for _, r := range s.records {
		if r.BodyChunks > 0 && r.Program.Code == "" {
			return fmt.Errorf("record %q has no program in the store", r.ID)
		}
		if r.BodyChunks == 0 {
			body, err := withBody(r)
			if err == nil {
				err = s.insertRecord(context.Background(), r, body)
			}
			if err != nil {
				return fmt.Errorf("splitting record %q: %w", r.ID, err)
			}
		}
	}
	return nil
}
