package sqldb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ncruces/go-sqlite3"
	"github.com/ncruces/go-sqlite3/vfs"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
)

// In a cluster (docs/sql.md, "In a cluster") a database's pages live in
// the cluster's PostgreSQL, not in a file of the gateway: SQLite opens
// the database through a VFS of this package whose main file reads pages
// from there (keeping a bounded cache of them), keeps the pages a
// transaction writes in memory, and commits them all when SQLite syncs the
// file at its commit, in one PostgreSQL statement that first checks the
// database's epoch (its owner's fence). The journal is in memory
// (journal_mode=MEMORY): SQLite's atomic commit is PostgreSQL's
// transaction, and a transaction that does not commit leaves nothing
// there. A gateway that opens a database raises its epoch first, so from
// then on a commit of the owner it replaced changes nothing; a gateway
// that lost a commit to the fence (or to the store) drops its engine and
// its cache.

// Pages is where a cluster keeps its databases' pages (store.Postgres).
type Pages interface {
	// SQLOpen raises the database's epoch to epoch and answers its size
	// in bytes; ok false: a later epoch holds it.
	SQLOpen(ctx context.Context, db []byte, epoch uint64) (size int64, ok bool, err error)
	// SQLRead answers the pages numbered from..from+n-1 it holds.
	SQLRead(ctx context.Context, db []byte, from, n int64) (map[int64][]byte, error)
	// SQLCommit writes pages and the size in one transaction if the
	// database's epoch is still epoch; ok false: it changed nothing.
	SQLCommit(ctx context.Context, db []byte, epoch uint64, size, pageSize int64, pages map[int64][]byte) (ok bool, err error)
}

const (
	clusterVFS    = "retainer-cluster"
	clusterPrefix = "retainer-cluster-db-"
	// cachedPages bounds one open database's cache of clean pages (4
	// MiB), beside SQLite's own page cache.
	cachedPages = 1024
	// prefetch is how many pages one read from the store asks for.
	prefetch = 16
	// storeTimeout bounds one read or commit in the store.
	storeTimeout = 10 * time.Second
)

var (
	registerVFS sync.Once
	// opening hands a page file to the VFS's Open, by its unique name.
	opening   sync.Map
	openCount atomic.Uint64
	// dirtyAll counts the bytes of pages written and not yet committed,
	// every database's.
	dirtyAll atomic.Int64
)

// errFenced: another gateway opened the database under a later fence.
var errFenced = errors.New("sqldb: the database is served by another gateway now")

// errTooBig: a transaction changed more than budgets.SQLDirtyBytes.
var errTooBig = errors.New("sqldb: the transaction changes too much")

// commitError: the store did not answer a commit: it may have been
// applied or not.
type commitError struct{ err error }

func (e *commitError) Error() string { return e.err.Error() }

// errBusy: the transactions in flight hold budgets.SQLDirtyBytesAll.
var errBusy = errors.New("sqldb: the gateway holds as many uncommitted pages as it may")

// fencedFault is answered to a call whose database another gateway owns
// now: the visitor tries again (and reaches the owner).
func fencedFault() error {
	return fault.New(fault.Overloaded, "This gateway no longer serves this tenant's database; nothing of this call was written. Try again.")
}

// storeFault is answered when the cluster's store could not be reached.
func storeFault(err error) error {
	return fault.New(fault.Overloaded, "The cluster's store of SQL databases did not answer (%v); nothing of this call was written. Try again.", err)
}

// failureFault turns a page file's failure into the call's fault.
func failureFault(err error) error {
	switch {
	case errors.Is(err, errFenced):
		return fencedFault()
	case errors.Is(err, errTooBig):
		return sqlError(fmt.Sprintf("a transaction changes at most %d MiB of a database in a cluster; nothing of it was written", budgets.SQLDirtyBytes>>20))
	case errors.As(err, new(*commitError)):
		return fault.New(fault.Overloaded, "The cluster's store of SQL databases did not confirm the commit (%v): this call's writes may or may not have been saved. Check before trying again.", err)
	case errors.Is(err, errBusy):
		return fault.New(fault.Overloaded, "The gateway holds as many uncommitted SQL pages as it may (%d MiB); nothing of this call was written. Try again.", budgets.SQLDirtyBytesAll>>20)
	}
	return storeFault(err)
}

// pagesVFS opens the cluster's databases as page files and leaves every
// other file (an export's copy, a sort's temporary file) to the
// operating system's VFS.
type pagesVFS struct{ os vfs.VFSFilename }

func (v pagesVFS) OpenFilename(name *vfs.Filename, flags vfs.OpenFlag) (vfs.File, vfs.OpenFlag, error) {
	if name != nil && strings.HasPrefix(name.String(), clusterPrefix) {
		if flags&vfs.OPEN_MAIN_DB != 0 {
			if f, ok := opening.LoadAndDelete(name.String()); ok {
				return f.(*pageFile), flags, nil
			}
		}
		// A journal: journal_mode=MEMORY opens none.
		return nil, flags, sqlite3.CANTOPEN
	}
	return v.os.OpenFilename(name, flags)
}

func (v pagesVFS) Open(name string, flags vfs.OpenFlag) (vfs.File, vfs.OpenFlag, error) {
	return nil, flags, sqlite3.CANTOPEN // OpenFilename is called instead
}

func (v pagesVFS) Delete(name string, syncDir bool) error {
	if strings.HasPrefix(name, clusterPrefix) {
		return sqlite3.IOERR_DELETE_NOENT
	}
	return v.os.Delete(name, syncDir)
}

func (v pagesVFS) Access(name string, flags vfs.AccessFlag) (bool, error) {
	if strings.HasPrefix(name, clusterPrefix) {
		return false, nil // no journal, ever
	}
	return v.os.Access(name, flags)
}

func (v pagesVFS) FullPathname(name string) (string, error) {
	if strings.HasPrefix(name, clusterPrefix) {
		return name, nil
	}
	return v.os.FullPathname(name)
}

// pageFile is one database's main file in a cluster. SQLite calls it from
// one goroutine at a time (a database has one connection, one caller).
type pageFile struct {
	pages     Pages
	db        []byte
	epoch     uint64
	size      int64 // as SQLite sees it, with this transaction's writes
	committed int64 // in the store
	dirty     map[int64][]byte
	clean     map[int64][]byte
	// err is sticky: the file failed (fenced, the store failed, a
	// transaction too large) and its connection is dropped.
	err error
}

// openPages opens the tenant's database through the cluster's VFS, after
// raising its epoch in the store.
func (x *db) openPages(ctx context.Context) (*sqlite3.Conn, error) {
	registerVFS.Do(func() {
		vfs.Register(clusterVFS, pagesVFS{os: vfs.Find("os").(vfs.VFSFilename)})
	})
	sctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	size, ok, err := x.opts.Pages.SQLOpen(sctx, []byte(x.name), x.epoch)
	if err != nil {
		return nil, storeFault(err)
	}
	if !ok {
		return nil, fencedFault()
	}
	f := &pageFile{pages: x.opts.Pages, db: []byte(x.name), epoch: x.epoch, size: size, committed: size,
		dirty: map[int64][]byte{}, clean: map[int64][]byte{}}
	name := clusterPrefix + x.name + "-" + strconv.FormatUint(openCount.Add(1), 10)
	opening.Store(name, f)
	defer opening.Delete(name)
	c, err := sqlite3.OpenContext(ctx, "file:"+name+"?vfs="+clusterVFS)
	if err != nil {
		return nil, err
	}
	x.file = f
	return c, nil
}

func (f *pageFile) page(n int64) ([]byte, error) {
	if p, ok := f.dirty[n]; ok {
		return p, nil
	}
	if p, ok := f.clean[n]; ok {
		return p, nil
	}
	if n*pageSize >= f.committed {
		return make([]byte, pageSize), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	got, err := f.pages.SQLRead(ctx, f.db, n, prefetch)
	if err != nil {
		return nil, err
	}
	if len(f.clean)+prefetch > cachedPages {
		for k := range f.clean {
			delete(f.clean, k)
			if len(f.clean)+prefetch <= cachedPages {
				break
			}
		}
	}
	for i := n; i < n+prefetch && i*pageSize < f.committed; i++ {
		if _, ok := f.dirty[i]; ok {
			continue
		}
		p := got[i]
		if len(p) != pageSize {
			q := make([]byte, pageSize)
			copy(q, p)
			p = q
		}
		f.clean[i] = p
	}
	return f.clean[n], nil
}

func (f *pageFile) ReadAt(b []byte, off int64) (int, error) {
	if f.err != nil {
		return 0, sqlite3.IOERR_READ
	}
	n := 0
	for n < len(b) {
		at := off + int64(n)
		if at >= f.size {
			return n, io.EOF
		}
		p, err := f.page(at / pageSize)
		if err != nil {
			f.err = err
			return n, sqlite3.IOERR_READ
		}
		end := min(int64(len(p)), f.size-(at/pageSize)*pageSize)
		n += copy(b[n:], p[at%pageSize:end])
	}
	return n, nil
}

func (f *pageFile) WriteAt(b []byte, off int64) (int, error) {
	if f.err != nil {
		return 0, sqlite3.IOERR_WRITE
	}
	n := 0
	for n < len(b) {
		at := off + int64(n)
		num := at / pageSize
		p, ok := f.dirty[num]
		if !ok {
			if len(f.dirty) >= budgets.SQLDirtyBytes/pageSize {
				f.err = errTooBig
				return n, sqlite3.IOERR_WRITE
			}
			if dirtyAll.Add(pageSize) > budgets.SQLDirtyBytesAll {
				dirtyAll.Add(-pageSize)
				f.err = errBusy
				return n, sqlite3.IOERR_WRITE
			}
			p = make([]byte, pageSize)
			if at%pageSize != 0 || len(b)-n < pageSize {
				old, err := f.page(num)
				if err != nil {
					dirtyAll.Add(-pageSize)
					f.err = err
					return n, sqlite3.IOERR_WRITE
				}
				copy(p, old)
			}
			delete(f.clean, num)
			f.dirty[num] = p
		}
		n += copy(p[at%pageSize:], b[n:])
	}
	f.size = max(f.size, off+int64(len(b)))
	return n, nil
}

func (f *pageFile) Truncate(size int64) error {
	if f.err != nil {
		return sqlite3.IOERR_TRUNCATE
	}
	keep := (size + pageSize - 1) / pageSize
	for n := range f.dirty {
		if n >= keep {
			delete(f.dirty, n)
			dirtyAll.Add(-pageSize)
		}
	}
	for n := range f.clean {
		if n >= keep {
			delete(f.clean, n)
		}
	}
	if size%pageSize != 0 {
		if p, err := f.page(size / pageSize); err == nil {
			q := make([]byte, pageSize)
			copy(q, p[:size%pageSize])
			if _, ok := f.dirty[size/pageSize]; !ok {
				dirtyAll.Add(pageSize)
			}
			f.dirty[size/pageSize] = q
		}
	}
	f.size = size
	return nil
}

// Sync is SQLite's commit: every page the transaction wrote, and the
// size, in one transaction of the store under the file's epoch.
func (f *pageFile) Sync(vfs.SyncFlag) error {
	if f.err != nil {
		return sqlite3.IOERR_FSYNC
	}
	if len(f.dirty) == 0 && f.size == f.committed {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	ok, err := f.pages.SQLCommit(ctx, f.db, f.epoch, f.size, pageSize, f.dirty)
	if err != nil {
		err = &commitError{err}
	} else if !ok {
		err = errFenced
	}
	if err != nil {
		f.err = err
		return sqlite3.IOERR_FSYNC
	}
	for n, p := range f.dirty {
		if len(f.clean) < cachedPages {
			f.clean[n] = p
		}
	}
	dirtyAll.Add(-int64(len(f.dirty)) * pageSize)
	f.dirty = map[int64][]byte{}
	f.committed = f.size
	return nil
}

func (f *pageFile) Size() (int64, error) { return f.size, nil }

// The database has one connection in one gateway (its space's owner):
// locks are the fence's, in the store.
func (f *pageFile) Lock(vfs.LockLevel) error         { return nil }
func (f *pageFile) Unlock(vfs.LockLevel) error       { return nil }
func (f *pageFile) CheckReservedLock() (bool, error) { return false, nil }
func (f *pageFile) SectorSize() int                  { return pageSize }
func (f *pageFile) Close() error {
	dirtyAll.Add(-int64(len(f.dirty)) * pageSize)
	f.dirty, f.clean = nil, nil
	return nil
}
func (f *pageFile) DeviceCharacteristics() vfs.DeviceCharacteristic {
	return vfs.IOCAP_POWERSAFE_OVERWRITE | vfs.IOCAP_SUBPAGE_READ
}
