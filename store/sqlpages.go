package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// The tenants' SQL databases in a cluster (docs/sql.md, "In a cluster")
// keep their pages in the cluster's PostgreSQL, in two tables beside the
// receipts':
//
//	retainer_sql_dbs(db, epoch, size)      each database's fence and size in bytes
//	retainer_sql_pages(db, pgno, data)     its pages, by number from 0
//
// A database's epoch is its owner's fence (the owner key's revision in
// etcd, which only grows): the owner raises it when it opens the database,
// and every commit names it, so once a new owner has opened a database
// the old owner's commits change nothing. A page (4 KiB) is kept in its
// row as it is (STORAGE PLAIN): neither compressed nor moved out to TOAST,
// which cost a commit of three pages about a third more (measured with
// fsync on).
const sqlPagesSchema = `
CREATE TABLE IF NOT EXISTS retainer_sql_dbs (db bytea PRIMARY KEY, epoch bigint NOT NULL, size bigint NOT NULL);
CREATE TABLE IF NOT EXISTS retainer_sql_pages (db bytea NOT NULL, pgno bigint NOT NULL, data bytea NOT NULL, PRIMARY KEY (db, pgno));
DO $$ BEGIN
	IF (SELECT attstorage FROM pg_attribute WHERE attrelid = 'retainer_sql_pages'::regclass AND attname = 'data') <> 'p' THEN
		ALTER TABLE retainer_sql_pages ALTER COLUMN data SET STORAGE PLAIN;
	END IF;
END $$;
`

// SQLOpen raises the database's epoch to epoch and answers its size; ok
// is false (and nothing changed) when a later epoch holds it: another
// gateway has opened it since. A commit of an earlier epoch in flight is
// waited for (it holds the row), so what it wrote is read after this.
func (p *Postgres) SQLOpen(ctx context.Context, db []byte, epoch uint64) (size int64, ok bool, err error) {
	err = p.pool.QueryRow(ctx, `INSERT INTO retainer_sql_dbs (db, epoch, size) VALUES ($1, $2, 0)
		ON CONFLICT (db) DO UPDATE SET epoch = EXCLUDED.epoch WHERE retainer_sql_dbs.epoch <= EXCLUDED.epoch
		RETURNING size`, db, int64(epoch)).Scan(&size)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return size, err == nil, err
}

// SQLRead answers the database's pages numbered from..from+n-1 that it
// holds (a page it does not hold is zeros to SQLite).
func (p *Postgres) SQLRead(ctx context.Context, db []byte, from, n int64) (map[int64][]byte, error) {
	rows, err := p.pool.Query(ctx, `SELECT pgno, data FROM retainer_sql_pages WHERE db = $1 AND pgno >= $2 AND pgno < $3`, db, from, from+n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64][]byte{}
	for rows.Next() {
		var pgno int64
		var data []byte
		if err := rows.Scan(&pgno, &data); err != nil {
			return nil, err
		}
		out[pgno] = data
	}
	return out, rows.Err()
}

// SQLCommit writes the database's changed pages and its size (pages
// numbered past the size are deleted) in one statement, so in one
// transaction, if the database's epoch is still epoch; ok is false, and
// nothing changed, when it is not.
func (p *Postgres) SQLCommit(ctx context.Context, db []byte, epoch uint64, size int64, pageSize int64, pages map[int64][]byte) (ok bool, err error) {
	nums := make([]int64, 0, len(pages))
	data := make([][]byte, 0, len(pages))
	keep := (size + pageSize - 1) / pageSize
	for n, d := range pages {
		if n >= keep {
			continue // past the end: deleted below, and one statement may not touch a row twice
		}
		nums = append(nums, n)
		data = append(data, d)
	}
	var n int
	err = p.pool.QueryRow(ctx, `WITH f AS (
			UPDATE retainer_sql_dbs SET size = $3 WHERE db = $1 AND epoch = $2 RETURNING db
		), w AS (
			INSERT INTO retainer_sql_pages (db, pgno, data)
			SELECT f.db, u.pgno, u.data FROM f, unnest($4::bigint[], $5::bytea[]) AS u(pgno, data)
			ON CONFLICT (db, pgno) DO UPDATE SET data = EXCLUDED.data
			RETURNING 1
		), d AS (
			DELETE FROM retainer_sql_pages WHERE db IN (SELECT db FROM f) AND pgno >= ($3 + $6 - 1) / $6
			RETURNING 1
		)
		SELECT count(*) FROM f`, db, int64(epoch), size, nums, data, pageSize).Scan(&n)
	if err != nil {
		return false, err
	}
	return n == 1, nil
}
