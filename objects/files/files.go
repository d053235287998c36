// Package files is the objects backend on one machine (docs/objects.md):
// each object one file under a folder per space, below Caddy's data
// directory, its metadata at the file's end, so that one rename replaces
// bytes and metadata together.
//
// A put streams to a temporary file in the space's folder, syncs it,
// renames it over the object's name and syncs the folder: a reader sees
// the old file or the whole new one, and a put that returned survives a
// crash. A put whose body fails, or whose context ends, removes its
// temporary file and leaves the old object. A reader keeps the file it
// opened: a put or delete meanwhile does not change what it reads.
//
// Keys are named on disk by their SHA-256 (a key is up to 1,024 bytes of
// any UTF-8, a file name at most 255 bytes), in 256 folders by its first
// byte. The keys of a space are kept in memory in byte order, read from
// the files' metadata when the space is first used, so List pages without
// walking the folders.
//
// It knows nothing of tenants, grants or HTTP: the bucket's rules (keys,
// conditionals, quota) are package objects'.
package files

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/retainer-gw/retainer/objects"
)

// footer is the metadata's length, then this magic, at a file's end.
var magic = [8]byte{'r', 't', 'n', 'o', 'b', 'j', '0', '1'}

const footerSize = 16

// Files is the backend. Safe for concurrent use.
type Files struct {
	root string
	mu   sync.Mutex // guards spaces
	// spaces are the key indexes loaded so far.
	spaces map[string]*space
}

// space is one space's keys in byte order; mu guards keys and orders a
// put's or delete's rename with its index update.
type space struct {
	mu     sync.Mutex
	dir    string
	keys   []string
	loaded bool
}

// Open opens (creating) the backend rooted at dir.
func Open(dir string) (*Files, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("objects: %w", err)
	}
	return &Files{root: dir, spaces: map[string]*space{}}, nil
}

var _ objects.Backend = (*Files)(nil)

// folderOf is a space's folder name: the name itself when it is a plain
// one (letters, digits, '-', '_' and '.', not starting with '.'; the
// bucket's spaces are hex), else '~' and its SHA-256, so no space name
// reaches outside the root or another space's folder.
func folderOf(s string) string {
	plain := s != "" && len(s) <= 200 && s[0] != '.'
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			plain = false
			break
		}
	}
	if plain {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "~" + hex.EncodeToString(sum[:])
}

// space answers name's index, read from its files on first use.
func (f *Files) space(name string) (*space, error) {
	name = folderOf(name)
	f.mu.Lock()
	sp := f.spaces[name]
	if sp == nil {
		sp = &space{dir: filepath.Join(f.root, name)}
		f.spaces[name] = sp
	}
	f.mu.Unlock()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.loaded {
		return sp, nil
	}
	// Temporary files of puts a crash interrupted are not objects.
	os.RemoveAll(filepath.Join(sp.dir, "tmp"))
	fans, err := os.ReadDir(sp.dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("objects: %w", err)
	}
	for _, fan := range fans {
		if !fan.IsDir() || len(fan.Name()) != 2 {
			continue
		}
		names, err := os.ReadDir(filepath.Join(sp.dir, fan.Name()))
		if err != nil {
			return nil, fmt.Errorf("objects: %w", err)
		}
		for _, n := range names {
			fh, err := os.Open(filepath.Join(sp.dir, fan.Name(), n.Name()))
			if err != nil {
				continue
			}
			info, err := readFooter(fh)
			fh.Close()
			if err == nil {
				sp.keys = append(sp.keys, info.Key)
			}
		}
	}
	sort.Strings(sp.keys)
	sp.loaded = true
	return sp, nil
}

func (sp *space) path(key string) (dir, file string) {
	sum := sha256.Sum256([]byte(key))
	h := hex.EncodeToString(sum[:])
	return filepath.Join(sp.dir, h[:2]), filepath.Join(sp.dir, h[:2], h[2:])
}

// insert and remove keep keys in order. sp.mu is held.
func (sp *space) insert(key string) {
	i := sort.SearchStrings(sp.keys, key)
	if i < len(sp.keys) && sp.keys[i] == key {
		return
	}
	sp.keys = append(sp.keys, "")
	copy(sp.keys[i+1:], sp.keys[i:])
	sp.keys[i] = key
}

func (sp *space) remove(key string) {
	i := sort.SearchStrings(sp.keys, key)
	if i < len(sp.keys) && sp.keys[i] == key {
		sp.keys = append(sp.keys[:i], sp.keys[i+1:]...)
	}
}

// stored is the metadata as a file keeps it.
type stored struct {
	Key            string            `json:"key"`
	Size           int64             `json:"size"`
	ETag           string            `json:"etag"`
	Uploaded       time.Time         `json:"uploaded"`
	Version        string            `json:"version"`
	HTTPMetadata   map[string]string `json:"http,omitempty"`
	CustomMetadata map[string]string `json:"custom,omitempty"`
}

func readFooter(fh *os.File) (objects.Info, error) {
	st, err := fh.Stat()
	if err != nil {
		return objects.Info{}, err
	}
	if st.Size() < footerSize {
		return objects.Info{}, errors.New("objects: short file")
	}
	var foot [footerSize]byte
	if _, err := fh.ReadAt(foot[:], st.Size()-footerSize); err != nil {
		return objects.Info{}, err
	}
	if !bytes.Equal(foot[8:], magic[:]) {
		return objects.Info{}, errors.New("objects: not an object file")
	}
	n := int64(binary.BigEndian.Uint64(foot[:8]))
	if n < 0 || n > st.Size()-footerSize {
		return objects.Info{}, errors.New("objects: bad metadata length")
	}
	buf := make([]byte, n)
	if _, err := fh.ReadAt(buf, st.Size()-footerSize-n); err != nil {
		return objects.Info{}, err
	}
	var s stored
	if err := json.Unmarshal(buf, &s); err != nil {
		return objects.Info{}, err
	}
	if s.Size != st.Size()-footerSize-n {
		return objects.Info{}, errors.New("objects: size does not match")
	}
	return objects.Info{Key: s.Key, Size: s.Size, ETag: s.ETag, Uploaded: s.Uploaded, Version: s.Version, HTTPMetadata: s.HTTPMetadata, CustomMetadata: s.CustomMetadata}, nil
}

// ctxReader fails a read once ctx has ended: a put whose caller gave up
// stops at its next read.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Put streams body to a temporary file, then renames it over key's file.
// It sets the answer's Size, ETag (the MD5 of the bytes, computed as they
// pass) and Uploaded (when the rename is made).
func (f *Files) Put(ctx context.Context, spaceName, key string, body io.Reader, meta objects.Info) (objects.Info, error) {
	sp, err := f.space(spaceName)
	if err != nil {
		return objects.Info{}, err
	}
	tmpDir := filepath.Join(sp.dir, "tmp")
	if err := os.MkdirAll(tmpDir, 0o700); err != nil {
		return objects.Info{}, fmt.Errorf("objects: %w", err)
	}
	var rnd [12]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(tmpDir, hex.EncodeToString(rnd[:]))
	fh, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return objects.Info{}, fmt.Errorf("objects: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			fh.Close()
			os.Remove(tmp)
		}
	}()
	n, etag, err := copyHashed(fh, ctxReader{ctx, body})
	if err != nil {
		return objects.Info{}, err
	}
	meta.Key = key
	meta.Size = n
	if meta.Version == "" {
		rand.Read(rnd[:])
		meta.Version = hex.EncodeToString(rnd[:])
	}
	meta.ETag = etag
	meta.Uploaded = time.Now().UTC().Truncate(time.Millisecond)
	js, _ := json.Marshal(stored{Key: key, Size: n, ETag: meta.ETag, Uploaded: meta.Uploaded, Version: meta.Version, HTTPMetadata: meta.HTTPMetadata, CustomMetadata: meta.CustomMetadata})
	var foot [footerSize]byte
	binary.BigEndian.PutUint64(foot[:8], uint64(len(js)))
	copy(foot[8:], magic[:])
	if _, err := fh.Write(append(js, foot[:]...)); err != nil {
		return objects.Info{}, fmt.Errorf("objects: %w", err)
	}
	if err := fh.Sync(); err != nil {
		return objects.Info{}, fmt.Errorf("objects: %w", err)
	}
	if err := fh.Close(); err != nil {
		return objects.Info{}, fmt.Errorf("objects: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return objects.Info{}, err
	}
	dir, file := sp.path(key)
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if _, err := os.Stat(dir); err != nil {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return objects.Info{}, fmt.Errorf("objects: %w", err)
		}
		if err := syncDir(sp.dir); err != nil {
			return objects.Info{}, err
		}
	}
	if err := os.Rename(tmp, file); err != nil {
		return objects.Info{}, fmt.Errorf("objects: %w", err)
	}
	committed = true
	sp.insert(key)
	if err := syncDir(dir); err != nil {
		return objects.Info{}, err
	}
	return meta, nil
}

// copyHashed copies r to w and answers the hex MD5 of what it copied. The
// MD5 runs on its own goroutine, a buffer behind the copy: on two cores an
// upload then costs the slower of the two instead of both (MD5 is most of
// a put's CPU).
func copyHashed(w io.Writer, r io.Reader) (int64, string, error) {
	// Two buffers of 64 KiB a put: many small puts at once hold little
	// (200 in flight, 25 MiB), a large one goes as fast as with larger.
	const size = 64 << 10
	free := make(chan []byte, 2)
	free <- make([]byte, size)
	free <- make([]byte, size)
	full := make(chan []byte, 2)
	sum := make(chan string, 1)
	go func() {
		h := md5.New()
		for b := range full {
			h.Write(b)
			free <- b[:size]
		}
		sum <- hex.EncodeToString(h.Sum(nil))
	}()
	var total int64
	var err error
	for {
		buf := <-free
		// Fill the buffer (the hash goroutine wakes once a buffer);
		// rerr is the reader's own error: io.EOF is the only clean end.
		n := 0
		var rerr error
		for n < len(buf) && rerr == nil {
			var m int
			m, rerr = r.Read(buf[n:])
			n += m
		}
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				err = werr
				free <- buf
				break
			}
			total += int64(n)
			full <- buf[:n]
		} else {
			free <- buf
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			err = rerr
			break
		}
	}
	close(full)
	etag := <-sum
	return total, etag, err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("objects: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("objects: %w", err)
	}
	return nil
}

func (f *Files) open(spaceName, key string) (*os.File, objects.Info, error) {
	sp, err := f.space(spaceName)
	if err != nil {
		return nil, objects.Info{}, err
	}
	_, file := sp.path(key)
	fh, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, objects.Info{}, objects.ErrNotFound
	}
	if err != nil {
		return nil, objects.Info{}, fmt.Errorf("objects: %w", err)
	}
	info, err := readFooter(fh)
	if err != nil {
		fh.Close()
		return nil, objects.Info{}, fmt.Errorf("objects: %s: %w", key, err)
	}
	if info.Key != key {
		// Two keys with one SHA-256: not expected in this universe.
		fh.Close()
		return nil, objects.Info{}, objects.ErrNotFound
	}
	return fh, info, nil
}

// Get answers key's metadata and its bytes in r (nil: all of them).
func (f *Files) Get(ctx context.Context, spaceName, key string, r *objects.Range) (objects.Info, io.ReadCloser, error) {
	fh, info, err := f.open(spaceName, key)
	if err != nil {
		return objects.Info{}, nil, err
	}
	off, n := r.Resolve(info.Size)
	return info, &section{SectionReader: io.NewSectionReader(fh, off, n), fh: fh}, nil
}

type section struct {
	*io.SectionReader
	fh *os.File
}

func (s *section) Close() error { return s.fh.Close() }

// Head answers key's metadata.
func (f *Files) Head(ctx context.Context, spaceName, key string) (objects.Info, error) {
	fh, info, err := f.open(spaceName, key)
	if err != nil {
		return objects.Info{}, err
	}
	fh.Close()
	return info, nil
}

// Delete removes keys; a key that is not there is not an error.
func (f *Files) Delete(ctx context.Context, spaceName string, keys ...string) error {
	sp, err := f.space(spaceName)
	if err != nil {
		return err
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	dirs := map[string]bool{}
	for _, key := range keys {
		dir, file := sp.path(key)
		if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("objects: %w", err)
		} else if err == nil {
			dirs[dir] = true
		}
		sp.remove(key)
	}
	for dir := range dirs {
		if err := syncDir(dir); err != nil {
			return err
		}
	}
	return nil
}

// List answers one page of the space's keys in byte order. The cursor is
// the last key the page covered (a delimited prefix covers its keys).
func (f *Files) List(ctx context.Context, spaceName string, o objects.ListOptions) (objects.ListPage, error) {
	sp, err := f.space(spaceName)
	if err != nil {
		return objects.ListPage{}, err
	}
	limit, after, err := o.Page()
	if err != nil {
		return objects.ListPage{}, err
	}
	// The page's keys are chosen under the lock, their metadata read
	// after it (a key deleted meanwhile is left out).
	type entry struct {
		key    string
		prefix bool
	}
	var page []entry
	var last string
	truncated := false
	sp.mu.Lock()
	i := sort.SearchStrings(sp.keys, o.Prefix)
	if after != "" && after >= o.Prefix {
		i = sort.Search(len(sp.keys), func(j int) bool { return sp.keys[j] > after })
	}
	for i < len(sp.keys) {
		k := sp.keys[i]
		if !strings.HasPrefix(k, o.Prefix) {
			break
		}
		if len(page) == limit {
			truncated = true
			break
		}
		if o.Delimiter != "" {
			if j := strings.Index(k[len(o.Prefix):], o.Delimiter); j >= 0 {
				p := k[:len(o.Prefix)+j+len(o.Delimiter)]
				page = append(page, entry{p, true})
				// Past every key under p.
				end := i + sort.Search(len(sp.keys)-i, func(j int) bool { return !strings.HasPrefix(sp.keys[i+j], p) })
				last = sp.keys[end-1]
				i = end
				continue
			}
		}
		page = append(page, entry{k, false})
		last = k
		i++
	}
	sp.mu.Unlock()
	var out objects.ListPage
	for _, e := range page {
		if e.prefix {
			out.DelimitedPrefixes = append(out.DelimitedPrefixes, e.key)
			continue
		}
		info, err := f.Head(ctx, spaceName, e.key)
		if errors.Is(err, objects.ErrNotFound) {
			continue
		}
		if err != nil {
			return objects.ListPage{}, err
		}
		out.Objects = append(out.Objects, info)
	}
	if truncated {
		out.Truncated = true
		out.Cursor = objects.PageCursor(last)
	}
	return out, nil
}
