package snapshot

import (
	"context"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/paddock-dev/paddock/archive"
)

// Since is what an incremental scan (ScanSince) takes from an earlier
// scan of the same directory: that scan's manifest, and every path that
// may have changed since the moment it began (a watcher's record of the
// tree, such as the paths of changes.Watcher.EndPaths). Changed must be
// complete: a change it does not name is not seen, which is why only a
// record that its watcher vouches for as complete may be used, and
// anything less calls for a full Scan.
type Since struct {
	// Manifest is the earlier scan's manifest, made with the same skip.
	Manifest *Manifest
	// Changed lists the paths (relative to the directory, as the
	// manifest names them) that may have changed since the earlier scan
	// began: created, modified, their attributes changed, removed, or
	// renamed from or to.
	Changed []string
}

// ScanSince is Scan that reads again only what may have changed since an
// earlier scan: the paths since.Changed names, whole below a changed
// directory (a directory renamed into place, or replaced, has contents no
// event names), and the directories above them, which it lists to find
// what was made or removed there. Every other entry is the earlier
// manifest's, unread. Files whose earlier digests the hash cache does not
// vouch for (not in it, or racily clean) are read again too. A file with
// more than one link (which a write through another name would change
// without naming it) makes the scan full, as do a nil since and one with
// no manifest. The result is the
// manifest a full Scan would make when since.Changed is complete; errors
// are Scan's.
func ScanSince(ctx context.Context, dir string, skip archive.Skip, cache *HashCache, since *Since) (*Scanned, error) {
	if since == nil || since.Manifest == nil {
		since = nil
	}
	return scanFrom(ctx, dir, skip, cache, time.Now(), nil, since)
}

// reuse is what an incremental scan takes from the earlier one.
type reuse struct {
	prev []Entry // sorted by path
	// dirty holds the changed paths, and the files the cache does not
	// vouch for; above holds the directories above them ("" is the
	// root). Both are read-only during the scan.
	dirty map[string]bool
	above map[string]bool
	// old is the hash cache's records before the scan: reused files keep
	// theirs.
	old map[string]cachedFile
}

// newReuse returns the reuse of since for a scan with cache, or nil for
// a full scan.
func newReuse(since *Since, cache *HashCache) *reuse {
	if since == nil || cache == nil {
		return nil
	}
	cache.mu.Lock()
	old := cache.files
	cache.mu.Unlock()
	r := &reuse{prev: since.Manifest.Entries, dirty: map[string]bool{}, above: map[string]bool{}, old: old}
	if !slices.IsSortedFunc(r.prev, cmpEntry) {
		return nil // not a manifest a scan made: read everything
	}
	mark := func(p string) {
		r.dirty[p] = true
		for d := path.Dir(p); ; d = path.Dir(d) {
			if d == "." || d == "/" {
				d = ""
			}
			if r.above[d] {
				return
			}
			r.above[d] = true
			if d == "" {
				return
			}
		}
	}
	for _, p := range since.Changed {
		mark(path.Clean(p))
	}
	for _, e := range r.prev {
		if e.Kind != KindFile {
			continue
		}
		f, ok := old[e.Path]
		if ok && f.key.nlink != 1 {
			return nil // a file with another link: read everything
		}
		if !ok || !f.trusted || !slices.Equal(f.chunks, e.Chunks) {
			mark(e.Path)
		}
	}
	return r
}

// span returns the index range of the earlier entries at rel and below.
func (r *reuse) span(rel string) (lo, hi int) {
	lo, ok := slices.BinarySearchFunc(r.prev, rel, func(e Entry, p string) int { return strings.Compare(e.Path, p) })
	if !ok {
		return lo, lo
	}
	hi = lo + 1
	if r.prev[lo].Kind == KindDir {
		prefix := rel + "/"
		for hi < len(r.prev) && strings.HasPrefix(r.prev[hi].Path, prefix) {
			hi++
		}
	}
	return lo, hi
}

// take records rel from the earlier scan when nothing at or below it
// changed (reused), and otherwise says whether rel must be read whole
// (fresh: it changed, or the earlier scan did not have it) or, a
// directory above changed paths, listed with its other members reused.
func (r *reuse) take(s *scanner, rel string) (fresh, reused bool) {
	lo, hi := r.span(rel)
	if lo == hi || r.dirty[rel] {
		return true, false
	}
	if r.above[rel] {
		return false, false
	}
	var skipped string // an entry skip excludes, whose subtree goes too
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range r.prev[lo:hi] {
		if skipped != "" && strings.HasPrefix(e.Path, skipped+"/") {
			continue
		}
		if s.skip != nil && s.skip(e.Path) {
			skipped = e.Path
			continue
		}
		s.reused = append(s.reused, e)
		if e.Kind == KindFile {
			s.files[e.Path] = r.old[e.Path]
		}
	}
	return false, true
}
