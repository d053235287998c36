package sandbox

// #include <stdlib.h>
import "C"

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"sort"
	"sync"
	"unsafe"

	v8 "rogchap.com/v8go"
)

// Startup is what a process's first engine makes before any program runs,
// and what every other process of the same binary and V8 flags would make
// the same: the runtime's startup snapshot (snapshot.go) and the runtime
// modules' code caches (codecache.go). Making them was about half of a
// worker's start (~20 ms of the snapshot, ~15 ms of compiling and
// training the modules, of 40-60 ms of CPU), so a pool has its first
// worker make them, before it serves anything, and hands them to the
// workers it starts later (docs/decisions.md, "Workers start from the
// first one's snapshot").
type Startup struct {
	Snapshot []byte            `json:"snapshot,omitempty"`
	Modules  map[string][]byte `json:"modules,omitempty"`
	// Sum is the SHA-256 of the snapshot and the caches (digest), taken
	// by the process that made them: V8 reads a snapshot without a
	// checksum of its own, and aborts on one it cannot.
	Sum []byte `json:"sum,omitempty"`
}

// digest is the SHA-256 of the snapshot, then each module's name and
// cache in the names' order, each length-prefixed.
func (s Startup) digest() []byte {
	h := sha256.New()
	put := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	put(s.Snapshot)
	names := make([]string, 0, len(s.Modules))
	for name := range s.Modules {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		put([]byte(name))
		put(s.Modules[name])
	}
	return h.Sum(nil)
}

var (
	startupMu sync.Mutex
	given     *Startup         // UseStartup's, until the first engine takes it
	inUse     *runtimeSnapshot // the process's snapshot, once in use
	fromGiven bool             // it is the one given
)

// UseStartup has this process start from s instead of making its own
// snapshot and module caches. Called before the first engine (later, it
// changes nothing). What V8 would not read is not used: a startup whose
// bytes are not those its maker summed is ignored whole; a snapshot that
// another V8 made, or that cannot be rehashed, is refused (check) and the
// process makes its own; a code cache V8 rejects (another version or
// flags) is ignored and the module compiled from its source. It answers
// whether the startup was taken.
func UseStartup(s Startup) bool {
	if len(s.Sum) == 0 || !bytes.Equal(s.digest(), s.Sum) {
		return false
	}
	startupMu.Lock()
	defer startupMu.Unlock()
	given = &s
	lazyCacheMu.Lock()
	defer lazyCacheMu.Unlock()
	for name, b := range s.Modules {
		if _, ok := lazyModules[name]; ok && len(b) > 0 && lazyCache[name] == nil {
			lazyCache[name] = &v8.CompilerCachedData{Bytes: append([]byte(nil), b...)}
		}
	}
	return true
}

// givenSnapshot is the snapshot UseStartup gave, copied to C memory for
// V8 (it reads it for the life of the process), or nil.
func givenSnapshot() *runtimeSnapshot {
	startupMu.Lock()
	defer startupMu.Unlock()
	if given == nil || len(given.Snapshot) == 0 {
		return nil
	}
	b := given.Snapshot
	given = nil
	s := &runtimeSnapshot{blob: unsafe.Slice((*byte)(C.CBytes(b)), len(b))}
	s.sum = sha256.Sum256(s.blob)
	return s
}

// snapshotInUse records the process's snapshot once it is in use.
func snapshotInUse(s *runtimeSnapshot, wasGiven bool) {
	startupMu.Lock()
	defer startupMu.Unlock()
	inUse, fromGiven = s, wasGiven
}

// MadeStartup answers this process's snapshot and module caches, for
// other processes to start from; ok is false until both are made (the
// first engine's first isolate trains the modules) or when isolates here
// do not start from a snapshot.
func MadeStartup() (s Startup, ok bool) {
	startupMu.Lock()
	snap := inUse
	startupMu.Unlock()
	if snap == nil || sha256.Sum256(snap.blob) != snap.sum {
		return Startup{}, false
	}
	s = Startup{Snapshot: append([]byte(nil), snap.blob...), Modules: map[string][]byte{}}
	lazyCacheMu.Lock()
	defer lazyCacheMu.Unlock()
	for name := range lazyModules {
		c := lazyCache[name]
		if c == nil {
			return Startup{}, false
		}
		s.Modules[name] = append([]byte(nil), c.Bytes...)
	}
	s.Sum = s.digest()
	return s, true
}

// StartedFromGiven reports whether this process's isolates start from
// the snapshot UseStartup gave.
func StartedFromGiven() bool {
	startupMu.Lock()
	defer startupMu.Unlock()
	return inUse != nil && fromGiven
}
