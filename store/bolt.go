package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// The bbolt file: one bucket per table, the meta bucket naming the file's
// application and schema, the owners bucket holding each space's epoch.
// Files written before this package existed have the same layout.
const schemaVersion = "1"

var (
	bucketMeta   = []byte("meta")
	bucketOwners = []byte("owners")
	keySchema    = []byte("schema")
	keyApp       = []byte("app")
	appName      = []byte("retainer")
)

// boltLimits: etcd's 128 operations a transaction, so that what passes on
// one machine passes on a cluster; bytes are bbolt's to hold (a handle's
// record carries its program and recorded tool answers, which may be past
// a megabyte).
var boltLimits = Limits{Ops: 128, Bytes: 32 << 20}

// Bolt is the one-machine backend: one bbolt file.
type Bolt struct {
	db   *bolt.DB
	path string

	// The group commit (group.go): commits waiting for the one under
	// way, and whether one is.
	gmu     sync.Mutex
	waiting []*boltWrite
	busy    bool
	// claimed are the epochs claimed and not yet written (claims.go).
	cmu     sync.Mutex
	claimed map[string]uint64

	// The journal (journal.go): the file; the number of the last entry
	// written into bbolt; journalled writes failed there, to go first;
	// those queued (jcond: their count fell); per table, those a read
	// waits for (pcond: one was written).
	j       *journal
	replay  Replay
	applied atomic.Uint64
	stuck   []*boltWrite
	jqueued int
	jcond   *sync.Cond
	pmu     sync.Mutex
	pend    map[string]int
	pendN   atomic.Int64
	pcond   *sync.Cond
}

// OpenBolt opens (or creates) the store at path, waiting at most
// openTimeout for another process's lock. A file that is not a Retainer
// store, or of another schema, is refused with an error that says so.
func OpenBolt(path string, openTimeout time.Duration) (*Bolt, error) {
	if openTimeout <= 0 {
		openTimeout = 5 * time.Second
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating the store's directory: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: openTimeout, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("opening store %s: %w: %w", path, ErrLocked, err)
		}
		return nil, fmt.Errorf("opening store %s: not a Retainer store (%w)", path, err)
	}
	if err := initSchema(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	j, last, rep, err := openJournal(path, db)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	b := &Bolt{db: db, path: path, j: j, replay: rep, pend: map[string]int{}}
	b.applied.Store(last)
	b.jcond = sync.NewCond(&b.gmu)
	b.pcond = sync.NewCond(&b.pmu)
	return b, nil
}

func initSchema(db *bolt.DB) error {
	return db.Update(func(tx *bolt.Tx) error {
		if err := checkSchema(tx); err != nil {
			return err
		}
		if tx.Bucket(bucketMeta) == nil {
			meta, err := tx.CreateBucket(bucketMeta)
			if err != nil {
				return err
			}
			meta.Put(keyApp, appName)
			meta.Put(keySchema, []byte(schemaVersion))
		}
		_, err := tx.CreateBucketIfNotExists(bucketOwners)
		return err
	})
}

// checkSchema refuses a file of another application or schema; a new
// file (no buckets at all) passes.
func checkSchema(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		// A new file has no buckets at all; one with other buckets
		// belongs to someone else.
		foreign := false
		tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			foreign = true
			return nil
		})
		if foreign {
			return errors.New("the file is a bbolt database of another application")
		}
		return nil
	}
	if string(meta.Get(keyApp)) != string(appName) {
		return errors.New("the file is a bbolt database of another application")
	}
	if v := string(meta.Get(keySchema)); v != schemaVersion {
		return fmt.Errorf("the store has schema version %q; this build reads %q", v, schemaVersion)
	}
	return nil
}

// ErrLocked is OpenBolt's and CheckBolt's answer for a store another
// holder has open for writing: bbolt's lock (flock(2), which ends with
// the process that holds it, however it ends).
var ErrLocked = errors.New("another process holds its lock")

// CheckBolt answers the error OpenBolt would refuse the store at path
// with: not a Retainer store, another schema, a journal that lost
// entries answered (ErrJournalDamaged), and ErrLocked, at once, when
// another holder has it open for writing (OpenBolt would wait for it,
// then refuse), with the holder's pid where /proc/locks shows it. It
// changes nothing and never waits for the file's lock: nil when there is
// no file yet, or when it cannot be read now (OpenBolt decides then). The gateway calls it while it provisions, so that such
// a start is refused before any listener serves (caddymodule/app.go).
func CheckBolt(path string) error {
	if st, err := os.Stat(path); err != nil {
		return checkDir(path)
	} else if st.Size() == 0 {
		return nil
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Nanosecond})
	if err != nil {
		if errors.Is(err, berrors.ErrInvalid) || errors.Is(err, berrors.ErrVersionMismatch) || errors.Is(err, berrors.ErrChecksum) {
			return fmt.Errorf("opening store %s: not a Retainer store (%w)", path, err)
		}
		if errors.Is(err, berrors.ErrTimeout) {
			if pid := lockHolder(path); pid > 0 {
				return fmt.Errorf("opening store %s: %w (pid %d)", path, ErrLocked, pid)
			}
			return fmt.Errorf("opening store %s: %w", path, ErrLocked)
		}
		return nil
	}
	defer db.Close()
	if err := db.View(checkSchema); err != nil {
		return fmt.Errorf("opening store %s: %w", path, err)
	}
	if err := checkJournal(path, db); err != nil {
		return fmt.Errorf("opening store %s: %w", path, err)
	}
	return nil
}

// checkDir is CheckBolt's part for a store not made yet: the error
// OpenBolt's MkdirAll would answer for a path under a file (the nearest
// ancestor that exists is not a directory), which the gateway answered
// from its app's Start, after a reload's listeners took connections
// (docs/decisions.md, "One gateway a store and a port"). Any other
// failure is OpenBolt's to tell.
func checkDir(path string) error {
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err == nil {
			if !st.IsDir() {
				return fmt.Errorf("creating the store's directory: %w", &fs.PathError{Op: "mkdir", Path: d, Err: syscall.ENOTDIR})
			}
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return nil
		}
		if filepath.Dir(d) == d {
			return nil
		}
	}
}

// Replayed is what OpenBolt replayed from the journal, and found and did
// not replay (journal.go), for the caller to log.
func (b *Bolt) Replayed() Replay { return b.replay }

// Path is the store's file.
func (b *Bolt) Path() string { return b.path }

// Size is the file's size in bytes.
func (b *Bolt) Size() int64 {
	var n int64
	b.db.View(func(tx *bolt.Tx) error {
		n = tx.Size()
		return nil
	})
	return n
}

// Limits implements Store.
func (b *Bolt) Limits() Limits { return boltLimits }

// Close implements Store.
func (b *Bolt) Close() error {
	jerr := b.drainJournal()
	err := b.writeClaimsLeft()
	if err == nil {
		err = jerr
	}
	if cerr := b.db.Close(); err == nil {
		err = cerr
	}
	if cerr := b.j.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Get implements Store.
func (b *Bolt) Get(_ context.Context, table string, key []byte) ([]byte, error) {
	b.awaitJournal(table)
	var v []byte
	err := b.db.View(func(tx *bolt.Tx) error {
		if bk := tx.Bucket([]byte(table)); bk != nil {
			v = Copy(bk.Get(key))
		}
		return nil
	})
	return v, err
}

// Scan implements Store.
func (b *Bolt) Scan(_ context.Context, table string, r Range, fn func(k, v []byte) bool) error {
	b.awaitJournal(table)
	lo, hi := bounds(r)
	return b.db.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket([]byte(table))
		if bk == nil {
			return nil
		}
		c := bk.Cursor()
		var k, v []byte
		if r.Reverse {
			if hi == nil {
				k, v = c.Last()
			} else if k, v = c.Seek(hi); k == nil {
				k, v = c.Last()
			} else {
				k, v = c.Prev()
			}
		} else {
			k, v = c.Seek(lo)
		}
		for n := 0; k != nil; n++ {
			if bytes.Compare(k, lo) < 0 || (hi != nil && bytes.Compare(k, hi) >= 0) {
				break
			}
			if r.KeysOnly {
				v = nil
			}
			if (r.Limit > 0 && n >= r.Limit) || !fn(k, v) {
				break
			}
			if r.Reverse {
				k, v = c.Prev()
			} else {
				k, v = c.Next()
			}
		}
		return nil
	})
}

// Commit implements Store. Commits that arrive while another is being
// written are written together after it, in one transaction (group.go).
func (b *Bolt) Commit(ctx context.Context, txn Txn) error {
	if err := checkSize(txn, boltLimits); err != nil {
		return err
	}
	if journalled(ctx) && journalFits(&txn) {
		if err := b.commitJournalled(&txn); !errors.Is(err, errJournalOff) {
			return err
		}
	}
	return b.write(&boltWrite{txn: &txn})
}

// apply applies txn in tx: its fences and conditions are checked before
// anything is written, so one that fails them (ErrFenced, ErrConflict)
// has written nothing.
func apply(tx *bolt.Tx, txn *Txn) error {
	for _, f := range txn.Fences {
		if f.Epoch == 0 || epochOf(tx, f.Space) != f.Epoch {
			return ErrFenced
		}
	}
	for _, c := range txn.If {
		var v []byte
		if bk := tx.Bucket([]byte(c.Table)); bk != nil {
			v = bk.Get(c.Key)
		}
		if c.Exists && v == nil || !c.Exists && ((c.Value == nil) != (v == nil) || !bytes.Equal(c.Value, v)) {
			return ErrConflict
		}
	}
	buckets := map[string]*bolt.Bucket{}
	for _, o := range txn.Then {
		bk := buckets[o.Table]
		if bk == nil {
			var err error
			if o.Delete {
				if bk = tx.Bucket([]byte(o.Table)); bk == nil {
					continue // nothing to delete
				}
			} else if bk, err = tx.CreateBucketIfNotExists([]byte(o.Table)); err != nil {
				return err
			}
			buckets[o.Table] = bk
		}
		var err error
		if o.Delete {
			err = bk.Delete(o.Key)
		} else {
			err = bk.Put(o.Key, o.Value)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Claim implements Store. The new epoch is written with the next
// transaction (claims.go).
func (b *Bolt) Claim(_ context.Context, space string) (Fence, error) {
	if space == "" {
		return Fence{}, errors.New("store: a claim names a space")
	}
	b.cmu.Lock()
	defer b.cmu.Unlock()
	epoch, err := b.epochNow(space)
	if err != nil {
		return Fence{}, err
	}
	epoch++
	if b.claimed == nil {
		b.claimed = map[string]uint64{}
	}
	b.claimed[space] = epoch
	return Fence{Space: space, Epoch: epoch}, nil
}

// epochNow is space's epoch as claimed now: the last claim not yet
// written, else bbolt's. cmu is held.
func (b *Bolt) epochNow(space string) (uint64, error) {
	if epoch, ok := b.claimed[space]; ok {
		return epoch, nil
	}
	var epoch uint64
	err := b.db.View(func(tx *bolt.Tx) error {
		epoch = epochOf(tx, space)
		return nil
	})
	return epoch, err
}

func epochOf(tx *bolt.Tx, space string) uint64 {
	if v := tx.Bucket(bucketOwners).Get([]byte(space)); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// bounds is the range's lowest key and the first key past it (nil: none).
func bounds(r Range) (lo, hi []byte) {
	lo, hi = r.From, r.To
	if r.Prefix != nil {
		if bytes.Compare(r.Prefix, lo) > 0 {
			lo = r.Prefix
		}
		if end := PrefixEnd(r.Prefix); end != nil && (hi == nil || bytes.Compare(end, hi) < 0) {
			hi = end
		}
	}
	if lo == nil {
		lo = []byte{}
	}
	return lo, hi
}

// PrefixEnd is the first key after every key that begins with p (nil when
// there is none: p is all 0xff).
func PrefixEnd(p []byte) []byte {
	end := append([]byte{}, p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
