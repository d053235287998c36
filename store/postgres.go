package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The Postgres layout (docs/cluster.md): three tables in the database the
// DSN names (its search_path picks the schema).
//
//	retainer_meta(k, v)             whose store this is
//	retainer_rows(tbl, k, v)        the tables; k and v bytea, so keys sort byte by byte as in bbolt
//	retainer_owners(space, epoch)   each space's epoch, raised by every claim
//
// and the SQL databases' pages in a cluster (sqlpages.go).
//
// A transaction runs SERIALIZABLE and is tried again when Postgres
// aborts it for a conflict with another (SQLSTATE 40001, 40P01): the
// conditions and fences it read are then read again.
const postgresSchema = `
CREATE TABLE IF NOT EXISTS retainer_meta (k text PRIMARY KEY, v text NOT NULL);
CREATE TABLE IF NOT EXISTS retainer_rows (tbl text NOT NULL, k bytea NOT NULL, v bytea NOT NULL, PRIMARY KEY (tbl, k));
CREATE TABLE IF NOT EXISTS retainer_owners (space bytea PRIMARY KEY, epoch bigint NOT NULL);
`

// PostgresCallBound is the longest one commit or claim in PostgreSQL may
// take (reads: PostgresReadBound). A server cut off
// without a reset (packets dropped, the host or the process stopped)
// answers nothing, and the kernel's retransmissions would hold a call for
// many minutes; past the bound the call fails, the connection is closed,
// and the caller answers 503 OVERLOADED (docs/cluster.md, "Failures").
const PostgresCallBound = 5 * time.Second

// PostgresReadBound is the longest a read waits for PostgreSQL (a Get; a
// scan's wait for its next row), a connection made for it included: a
// request that reads a receipt, a listing or a page of logs is answered
// 503 OVERLOADED within 2 s when PostgreSQL does not answer. A commit
// keeps PostgresCallBound: what it writes (a batch of receipts, of logs)
// may take longer to send, and what waits for it is retried.
const PostgresReadBound = 1500 * time.Millisecond

// bounded is ctx within PostgresCallBound.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, PostgresCallBound)
}

// postgresLimits: Postgres holds far more in one transaction; the
// operations match the other backends' so that what passes on one passes
// on all.
var postgresLimits = Limits{Ops: 128, Bytes: 32 << 20}

// Postgres is a backend in one PostgreSQL database: the cluster's
// receipts (docs/cluster.md), or any table.
type Postgres struct {
	pool *pgxpool.Pool
	addr string
}

// OpenPostgres connects to the database dsn names, creates the tables if
// they are not there, and checks they are a Retainer store this build
// reads. Errors name host:port, never the password.
func OpenPostgres(ctx context.Context, dsn string) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, errors.New("store postgres: the DSN does not parse (postgres://user:password@host:port/database)")
	}
	addr := fmt.Sprintf("%s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port)
	// A connection is made within the bound (the DSN's connect_timeout,
	// when shorter, wins), and the kernel probes an idle one every 10 s.
	if cfg.ConnConfig.ConnectTimeout <= 0 || cfg.ConnConfig.ConnectTimeout > PostgresCallBound {
		cfg.ConnConfig.ConnectTimeout = PostgresCallBound
	}
	cfg.ConnConfig.DialFunc = (&net.Dialer{KeepAlive: 10 * time.Second}).DialContext
	fail := func(err error) error {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return fmt.Errorf("store postgres %s: %s (SQLSTATE %s)", addr, pe.Message, pe.Code)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("store postgres %s: no answer in time", addr)
		}
		return fmt.Errorf("store postgres %s: cannot connect", addr)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(cctx, cfg)
	if err != nil {
		return nil, fail(err)
	}
	p := &Postgres{pool: pool, addr: addr}
	if err := p.initSchema(cctx); err != nil {
		pool.Close()
		var pe *pgconn.PgError
		if errors.As(err, &pe) || errors.Is(err, context.DeadlineExceeded) || isConnect(err) {
			return nil, fail(err)
		}
		return nil, fmt.Errorf("store postgres %s: %w", addr, err)
	}
	return p, nil
}

func isConnect(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}

func (p *Postgres) initSchema(ctx context.Context) error {
	// Gateways starting together create the tables one at a time.
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7346110)`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, postgresSchema+sqlPagesSchema); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO retainer_meta (k, v) VALUES ('app', $1), ('schema', $2) ON CONFLICT (k) DO NOTHING`, string(appName), schemaVersion)
		return err
	})
	if err != nil {
		return err
	}
	got := map[string]string{}
	rows, err := p.pool.Query(ctx, `SELECT k, v FROM retainer_meta`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return err
		}
		got[k] = v
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if got["app"] != string(appName) {
		return errors.New("the database's retainer tables belong to another application")
	}
	if got["schema"] != schemaVersion {
		return fmt.Errorf("the store has schema version %q; this build reads %q", got["schema"], schemaVersion)
	}
	return nil
}

// Limits implements Store.
func (p *Postgres) Limits() Limits { return postgresLimits }

// Close implements Store.
func (p *Postgres) Close() error {
	p.pool.Close()
	return nil
}

// Get implements Store.
func (p *Postgres) Get(ctx context.Context, table string, key []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, PostgresReadBound)
	defer cancel()
	var v []byte
	err := p.pool.QueryRow(ctx, `SELECT v FROM retainer_rows WHERE tbl = $1 AND k = $2`, table, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if v == nil {
		v = []byte{}
	}
	return v, nil
}

// Scan implements Store: one query, its rows read as fn asks for them.
func (p *Postgres) Scan(ctx context.Context, table string, r Range, fn func(k, v []byte) bool) error {
	lo, hi := bounds(r)
	q := `SELECT k, v FROM retainer_rows WHERE tbl = $1 AND k >= $2`
	if r.KeysOnly {
		q = `SELECT k, NULL::bytea FROM retainer_rows WHERE tbl = $1 AND k >= $2`
	}
	args := []any{table, lo}
	if hi != nil {
		q += ` AND k < $3`
		args = append(args, hi)
	}
	if r.Reverse {
		q += ` ORDER BY k DESC`
	} else {
		q += ` ORDER BY k`
	}
	if r.Limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, r.Limit)
	}
	// The bound is on each row's wait: a long scan that keeps coming is
	// not cut, one that stops is.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := time.AfterFunc(PostgresReadBound, cancel)
	defer idle.Stop()
	rows, err := p.pool.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		idle.Stop()
		raw := rows.RawValues()
		if !fn(raw[0], raw[1]) {
			return nil
		}
		idle.Reset(PostgresReadBound)
	}
	return rows.Err()
}

// Commit implements Store.
func (p *Postgres) Commit(ctx context.Context, txn Txn) error {
	if err := checkSize(txn, postgresLimits); err != nil {
		return err
	}
	for _, f := range txn.Fences {
		if f.Epoch == 0 {
			return ErrFenced
		}
	}
	for try := 0; ; try++ {
		tctx, cancel := bounded(ctx)
		err := pgx.BeginTxFunc(tctx, p.pool, pgx.TxOptions{IsoLevel: pgx.Serializable}, func(tx pgx.Tx) error {
			return p.apply(tctx, tx, txn)
		})
		cancel()
		var pe *pgconn.PgError
		if try < 20 && errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01" || pe.Code == "23505") {
			continue
		}
		return err
	}
}

// apply checks the fences and conditions in one round trip, then applies
// the operations in another.
func (p *Postgres) apply(ctx context.Context, tx pgx.Tx, txn Txn) error {
	if len(txn.Fences)+len(txn.If) > 0 {
		b := &pgx.Batch{}
		for _, f := range txn.Fences {
			b.Queue(`SELECT epoch FROM retainer_owners WHERE space = $1`, []byte(f.Space))
		}
		for _, c := range txn.If {
			b.Queue(`SELECT v FROM retainer_rows WHERE tbl = $1 AND k = $2`, c.Table, c.Key)
		}
		res := tx.SendBatch(ctx, b)
		var failed error
		for _, f := range txn.Fences {
			var epoch int64
			err := res.QueryRow().Scan(&epoch)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				res.Close()
				return err
			}
			if failed == nil && uint64(epoch) != f.Epoch {
				failed = ErrFenced
			}
		}
		for _, c := range txn.If {
			var v []byte
			err := res.QueryRow().Scan(&v)
			found := err == nil
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				res.Close()
				return err
			}
			if found && v == nil {
				v = []byte{}
			}
			if failed == nil && (c.Exists && !found || !c.Exists && ((c.Value == nil) == found || found && string(c.Value) != string(v))) {
				failed = ErrConflict
			}
		}
		if err := res.Close(); err != nil {
			return err
		}
		if failed != nil {
			return failed
		}
	}
	if len(txn.Then) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, o := range txn.Then {
		if o.Delete {
			b.Queue(`DELETE FROM retainer_rows WHERE tbl = $1 AND k = $2`, o.Table, o.Key)
		} else {
			v := o.Value
			if v == nil {
				v = []byte{}
			}
			b.Queue(`INSERT INTO retainer_rows (tbl, k, v) VALUES ($1, $2, $3) ON CONFLICT (tbl, k) DO UPDATE SET v = EXCLUDED.v`, o.Table, o.Key, v)
		}
	}
	return tx.SendBatch(ctx, b).Close()
}

// Claim implements Store: the space's epoch is raised by one.
func (p *Postgres) Claim(ctx context.Context, space string) (Fence, error) {
	if space == "" {
		return Fence{}, errors.New("store: a claim names a space")
	}
	ctx, cancel := bounded(ctx)
	defer cancel()
	var epoch int64
	err := p.pool.QueryRow(ctx, `INSERT INTO retainer_owners (space, epoch) VALUES ($1, 1)
		ON CONFLICT (space) DO UPDATE SET epoch = retainer_owners.epoch + 1 RETURNING epoch`, []byte(space)).Scan(&epoch)
	if err != nil {
		return Fence{}, err
	}
	return Fence{Space: space, Epoch: uint64(epoch)}, nil
}
