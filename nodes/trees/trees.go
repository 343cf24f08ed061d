// Package trees is a node's cache of kept workspace trees: a manifest
// snapshot a restore wrote, kept read-only on the node's disk, per
// tenant, manifest root and owner, so that a restore of that snapshot
// again on this node mounts it as the lower layer of an overlay instead
// of writing its files (package overlay). A tree is never shared across
// tenants, never written once published, and never removed while an
// overlay uses it; past the cache's budget the least recently used trees
// that none uses go.
package trees

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/paddock-dev/paddock/errcode"
)

// Cache is the kept trees under one directory. It is safe for concurrent
// use.
type Cache struct {
	dir   string
	max   int64
	inUse func() (map[string]bool, error)
	lock  *os.File // flock'd while open

	mu    sync.Mutex
	trees map[string]*entry // by key; guarded by mu
	// building holds the builds in flight by key, each closed when done;
	// guarded by mu.
	building map[string]chan struct{}
	total    int64  // bytes of the trees in trees; guarded by mu
	clock    uint64 // guarded by mu
}

type entry struct {
	key   string
	bytes int64
	used  uint64 // the clock at the last Get or Build
	pins  int    // Trees handed out and not released
}

// Tree is a kept tree handed out by Get or Build: it is not removed until
// Release, and after that not while an overlay names it.
type Tree struct {
	c    *Cache
	e    *entry
	once sync.Once
}

// Dir returns the tree's directory: the workspace's root.
func (t *Tree) Dir() string { return filepath.Join(t.c.dir, t.e.key, "tree") }

// Release says that the caller no longer needs the tree kept for it.
func (t *Tree) Release() {
	t.once.Do(func() {
		t.c.mu.Lock()
		t.e.pins--
		t.c.mu.Unlock()
	})
}

// Open opens (making it) the cache in dir, bounded to maxBytes of file
// content. inUse returns the trees' directories that overlays use now or
// will again (mounted, or recorded to be mounted after a restart); those
// are never removed. Builds a stopped node left half done are removed.
func Open(dir string, maxBytes int64, inUse func() (map[string]bool, error)) (*Cache, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, errcode.Wrap(errcode.RuntimeError, err, "tree cache directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, errcode.Wrap(errcode.RuntimeError, err, "tree cache directory")
	}
	// One process per directory: another's Open would remove the trees
	// it is building.
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, errcode.Wrap(errcode.RuntimeError, err, "tree cache lock")
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("%w: %s: %v", ErrInUse, dir, err)
	}
	c := &Cache{dir: dir, max: maxBytes, inUse: inUse, lock: lock, trees: map[string]*entry{}, building: map[string]chan struct{}{}}
	tenants, err := os.ReadDir(dir)
	if err != nil {
		lock.Close()
		return nil, errcode.Wrap(errcode.RuntimeError, err, "tree cache directory")
	}
	for _, t := range tenants {
		if !t.IsDir() {
			continue
		}
		kept, err := os.ReadDir(filepath.Join(dir, t.Name()))
		if err != nil {
			lock.Close()
			return nil, errcode.Wrap(errcode.RuntimeError, err, "tree cache directory")
		}
		for _, k := range kept {
			key := t.Name() + "/" + k.Name()
			if strings.HasPrefix(k.Name(), ".") {
				_ = removeTree(filepath.Join(dir, key)) // a build or removal cut short
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, key, "bytes"))
			n, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil || perr != nil {
				_ = removeTree(filepath.Join(dir, key)) // not one Build published
				continue
			}
			c.trees[key] = &entry{key: key, bytes: n}
			c.total += n
		}
	}
	return c, nil
}

// ErrInUse says that another process has the tree cache's directory.
var ErrInUse = errors.New("the tree cache directory is another process's")

// Close lets the directory go to another process.
func (c *Cache) Close() error { return c.lock.Close() }

// keyOf names the tree of a tenant's manifest root owned by uid:gid.
func keyOf(tenant, root string, uid, gid int) (string, error) {
	for _, s := range []string{tenant, root} {
		if s == "" || strings.ContainsAny(s, "/\\.\x00") {
			return "", errcode.New(errcode.InvalidRequest, "tree cache: bad name %q", s)
		}
	}
	return fmt.Sprintf("%s/%s-%d-%d", tenant, root, uid, gid), nil
}

// Get returns the kept tree of tenant's manifest root owned by uid:gid,
// pinned until Release; ok is false when there is none.
func (c *Cache) Get(tenant, root string, uid, gid int) (*Tree, bool) {
	key, err := keyOf(tenant, root, uid, gid)
	if err != nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.getLocked(key)
}

// Fits reports whether a tree of n bytes may be kept at all.
func (c *Cache) Fits(n int64) bool { return n <= c.max }

// Build makes the tree of tenant's manifest root owned by uid:gid: fill
// writes it into the empty directory it is given and returns its bytes;
// the tree is published only once fill succeeded, and returned pinned.
// Builds of one tree run one at a time: a Build that finds another in
// flight waits for it and returns its tree (or, when it failed, builds
// its own). Past the budget, the least recently used trees that nobody
// pins and no overlay uses are removed.
func (c *Cache) Build(ctx context.Context, tenant, root string, uid, gid int, fill func(dir string) (int64, error)) (*Tree, error) {
	key, err := keyOf(tenant, root, uid, gid)
	if err != nil {
		return nil, err
	}
	for {
		c.mu.Lock()
		if t, ok := c.getLocked(key); ok {
			c.mu.Unlock()
			return t, nil
		}
		wait, busy := c.building[key]
		if !busy {
			done := make(chan struct{})
			c.building[key] = done
			c.mu.Unlock()
			defer func() {
				c.mu.Lock()
				delete(c.building, key)
				c.mu.Unlock()
				close(done)
			}()
			break
		}
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	tdir := filepath.Join(c.dir, tenant)
	if err := os.MkdirAll(tdir, 0o700); err != nil {
		return nil, errcode.Wrap(errcode.RuntimeError, err, "tree cache directory")
	}
	tmp := filepath.Join(tdir, ".build-"+rand.Text())
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, errcode.Wrap(errcode.RuntimeError, err, "tree cache directory")
	}
	// The tree's own directory is the workspace's root: 0755, as a
	// workspace's (the overlay's upper gives the merged root its owner).
	if err := os.Mkdir(filepath.Join(tmp, "tree"), 0o755); err != nil {
		_ = removeTree(tmp)
		return nil, errcode.Wrap(errcode.RuntimeError, err, "tree cache directory")
	}
	n, err := fill(filepath.Join(tmp, "tree"))
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(tmp, "bytes"), []byte(strconv.FormatInt(n, 10)+"\n"), 0o600)
	}
	if err != nil {
		_ = removeTree(tmp)
		return nil, err
	}
	c.mu.Lock()
	if t, ok := c.getLocked(key); ok {
		c.mu.Unlock()
		_ = removeTree(tmp)
		return t, nil
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, key)); err != nil {
		c.mu.Unlock()
		_ = removeTree(tmp)
		return nil, errcode.Wrap(errcode.RuntimeError, err, "publish a kept tree")
	}
	e := &entry{key: key, bytes: n}
	c.trees[key] = e
	c.total += n
	t, _ := c.getLocked(key)
	victims := c.victimsLocked()
	c.mu.Unlock()
	c.remove(victims)
	return t, nil
}

func (c *Cache) getLocked(key string) (*Tree, bool) {
	e, ok := c.trees[key]
	if !ok {
		return nil, false
	}
	c.clock++
	e.used = c.clock
	e.pins++
	return &Tree{c: c, e: e}, true
}

// victimsLocked takes out of the index, least recently used first, the
// trees to remove to come back under the budget: never a pinned one, nor
// one an overlay uses (when that cannot be known, none goes).
func (c *Cache) victimsLocked() []string {
	if c.total <= c.max {
		return nil
	}
	used, err := c.inUse()
	if err != nil {
		return nil
	}
	es := make([]*entry, 0, len(c.trees))
	for _, e := range c.trees {
		es = append(es, e)
	}
	sort.Slice(es, func(i, j int) bool { return es[i].used < es[j].used })
	var out []string
	for _, e := range es {
		if c.total <= c.max {
			break
		}
		if e.pins > 0 || used[filepath.Join(c.dir, e.key, "tree")] {
			continue
		}
		delete(c.trees, e.key)
		c.total -= e.bytes
		out = append(out, e.key)
	}
	return out
}

// remove deletes the trees of keys: each is renamed aside first, so that
// a removal cut short is found by Open and finished.
func (c *Cache) remove(keys []string) {
	for _, k := range keys {
		p := filepath.Join(c.dir, k)
		aside := filepath.Join(filepath.Dir(p), ".gone-"+rand.Text())
		if err := os.Rename(p, aside); err != nil {
			continue
		}
		_ = removeTree(aside)
	}
}

// Stats returns the number of kept trees and their bytes.
func (c *Cache) Stats() (trees int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.trees), c.total
}

// removeTree removes p and everything under it, making read-only
// directories writable first (a workspace may hold 0555 ones).
func removeTree(p string) error {
	err := os.RemoveAll(p)
	if err == nil {
		return nil
	}
	_ = filepath.WalkDir(p, func(q string, d fs.DirEntry, werr error) error {
		if werr == nil && d.IsDir() {
			_ = os.Chmod(q, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
