package snapshot

import (
	"container/list"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
)

// Cache is a node's local chunk cache: a directory of chunk files,
// <dir>/<tenant>/<digest[:2]>/<digest>, bounded in bytes, evicting the
// least recently used chunk first. Recency survives a restart as the
// files' mtimes (a Get touches its file). Chunks are kept per tenant, as
// the object store keeps them. It is safe for concurrent use.
type Cache struct {
	dir      string
	maxBytes int64

	mu    sync.Mutex // guards what follows
	lru   *list.List // of *cached, most recently used first
	index map[string]*list.Element
	bytes int64
}

type cached struct {
	key  string // tenant/digest
	size int64
}

// OpenCache opens (making it if needed) the cache in dir, bounded to
// maxBytes: its index is rebuilt from the files there, by mtime, left-over
// temporary files and files that are not chunks are removed, and chunks
// past the bound are evicted. maxBytes <= 0 is no cache: Put does nothing
// and Get misses. A directory that cannot be made or read is
// runtime_error.
func OpenCache(dir string, maxBytes int64) (*Cache, error) {
	c := &Cache{dir: dir, maxBytes: maxBytes, lru: list.New(), index: map[string]*list.Element{}}
	if maxBytes <= 0 {
		return c, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, errcode.Wrap(errcode.RuntimeError, err, "make chunk cache directory")
	}
	type found struct {
		key   string
		size  int64
		mtime time.Time
	}
	var all []found
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		parts := strings.Split(filepath.ToSlash(rel), "/")
		fi, ierr := d.Info()
		if len(parts) != 3 || !d.Type().IsRegular() || ierr != nil ||
			commands.CheckToken("tenant", parts[0]) != nil || !validDigest(parts[2]) || parts[1] != parts[2][:2] {
			_ = os.Remove(p) // a temporary file of a Put cut short, or not ours
			return nil
		}
		all = append(all, found{parts[0] + "/" + parts[2], fi.Size(), fi.ModTime()})
		return nil
	})
	if err != nil {
		return nil, errcode.Wrap(errcode.RuntimeError, err, "read chunk cache directory")
	}
	slices.SortFunc(all, func(a, b found) int { return a.mtime.Compare(b.mtime) })
	for _, f := range all { // oldest first, so the newest ends up in front
		c.index[f.key] = c.lru.PushFront(&cached{key: f.key, size: f.size})
		c.bytes += f.size
	}
	c.mu.Lock()
	c.evictLocked()
	c.mu.Unlock()
	return c, nil
}

// name returns the file of a chunk, or invalid_request for a tenant that
// is not a subject token or a digest that is not 64 lowercase hex digits.
func (c *Cache) name(tenant, digest string) (string, error) {
	if err := commands.CheckToken("tenant", tenant); err != nil {
		return "", err
	}
	if !validDigest(digest) {
		return "", errcode.New(errcode.InvalidRequest, "chunk digest %q is not 64 lowercase hex digits", digest)
	}
	return filepath.Join(c.dir, tenant, digest[:2], digest), nil
}

// Get returns a chunk of tenant's and true, or false when the cache does
// not hold it. The content is checked against its digest: a corrupt file
// is removed and missed. Bad names miss.
func (c *Cache) Get(tenant, digest string) ([]byte, bool) {
	if c.maxBytes <= 0 {
		return nil, false
	}
	p, err := c.name(tenant, digest)
	if err != nil {
		return nil, false
	}
	data, err := os.ReadFile(p)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			c.drop(tenant+"/"+digest, p)
		}
		return nil, false
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != digest {
		c.drop(tenant+"/"+digest, p)
		return nil, false
	}
	now := time.Now()
	_ = os.Chtimes(p, now, now)
	c.mu.Lock()
	if el, ok := c.index[tenant+"/"+digest]; ok {
		c.lru.MoveToFront(el)
	}
	c.mu.Unlock()
	return data, true
}

// Has reports whether the cache holds a chunk of tenant's (without
// reading or checking it).
func (c *Cache) Has(tenant, digest string) bool {
	if c.maxBytes <= 0 {
		return false
	}
	if _, err := c.name(tenant, digest); err != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.index[tenant+"/"+digest]
	return ok
}

// Put stores a chunk of tenant's, written to a temporary file and renamed
// into place, then evicts the least recently used chunks past the bound.
// A bad tenant or digest is invalid_request; data whose sha256 is not
// digest is internal "corrupt chunk"; a file that cannot be written is
// runtime_error. A chunk larger than the bound, or a cache with no bound,
// is not stored.
func (c *Cache) Put(tenant, digest string, data []byte) error {
	p, err := c.name(tenant, digest)
	if err != nil {
		return err
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != digest {
		return errcode.New(errcode.Internal, "corrupt chunk %s: its content has another digest", digest)
	}
	return c.put(p, tenant, digest, data)
}

// PutVerified is Put of data the caller has already checked against
// digest (the object store's GetChunk does): it is not hashed again. The
// cache's Get still checks every read.
func (c *Cache) PutVerified(tenant, digest string, data []byte) error {
	p, err := c.name(tenant, digest)
	if err != nil {
		return err
	}
	return c.put(p, tenant, digest, data)
}

// put stores data, checked, as the chunk file p.
func (c *Cache) put(p, tenant, digest string, data []byte) error {
	if c.maxBytes <= 0 || int64(len(data)) > c.maxBytes {
		return nil
	}
	key := tenant + "/" + digest
	c.mu.Lock()
	if el, ok := c.index[key]; ok {
		c.lru.MoveToFront(el)
		c.mu.Unlock()
		now := time.Now()
		_ = os.Chtimes(p, now, now)
		return nil
	}
	c.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "chunk cache")
	}
	tmp := filepath.Join(filepath.Dir(p), ".tmp-"+rand.Text())
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		_ = os.Remove(tmp)
		return errcode.Wrap(errcode.RuntimeError, err, "chunk cache")
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return errcode.Wrap(errcode.RuntimeError, err, "chunk cache")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.index[key]; ok { // a concurrent Put of the same chunk
		c.lru.MoveToFront(el)
		return nil
	}
	c.index[key] = c.lru.PushFront(&cached{key: key, size: int64(len(data))})
	c.bytes += int64(len(data))
	c.evictLocked()
	return nil
}

// evictLocked removes least recently used chunks until the cache fits.
// c.mu must be held.
func (c *Cache) evictLocked() {
	for c.bytes > c.maxBytes {
		el := c.lru.Back()
		if el == nil {
			return
		}
		ch := el.Value.(*cached)
		c.lru.Remove(el)
		delete(c.index, ch.key)
		c.bytes -= ch.size
		tenant, digest, _ := strings.Cut(ch.key, "/")
		_ = os.Remove(filepath.Join(c.dir, tenant, digest[:2], digest))
	}
}

// drop forgets a chunk and removes its file.
func (c *Cache) drop(key, p string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.index[key]; ok {
		c.lru.Remove(el)
		delete(c.index, key)
		c.bytes -= el.Value.(*cached).size
	}
	_ = os.Remove(p)
}

// Stats returns the chunks the cache holds and their bytes.
func (c *Cache) Stats() (chunks int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.index), c.bytes
}
