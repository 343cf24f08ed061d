package nodes

import (
	"context"
	"sync"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/nodes/runtime/changes"
	"github.com/paddock-dev/paddock/snapshot"
)

// Dirty tracking (docs/architecture.md, "Dirty tracking"): a scan of a
// workspace the node reaches on the host reads again only what changed
// since the previous scan, when an inotify watcher of the node's own (a
// changes.Watcher on the host directory, apart from the runtime's change
// attribution) vouches that its record of those changes is complete:
//
//	scan n:    Begin window n ─ scan (full, or since scan n-1) ─ base n
//	scan n+1:  Begin window n+1; EndPaths(window n)
//	           complete? ScanSince(base n, paths) : full Scan
//
// Window n opens before scan n reads anything, so a change during or after
// scan n is in it. Any doubt reads everything: no watcher or base yet, a
// window Truncated (queue overflow, a directory left unwatched, too many
// paths, a fence that did not come), the root gone or swapped, a restore
// or a new sandbox (the tracker is dropped), every FullScanEvery-th scan,
// and a file with more than one link (the scan reads it every time: see
// snapshot.ScanSince).

// tracker is the dirty tracking of one session's host workspace.
type tracker struct {
	w   *changes.Watcher
	dir string
	// tok is the window opened before base's scan began.
	tok  changes.Token
	base *snapshot.Manifest
	// scans counts the incremental scans since the last full one.
	scans int
}

// trackerSlot holds a session's tracker between scans. A scan takes it
// out and puts it back, so two scans at once never share one.
type trackerSlot struct {
	mu sync.Mutex // guards t and the counts
	t  *tracker
	// full and incremental count the scans of each kind (tests read
	// them).
	full, incremental int
}

// take removes and returns the tracker (nil when there is none).
func (ts *trackerSlot) take() *tracker {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.t
	ts.t = nil
	return t
}

// put keeps t for the next scan (closing the one kept meanwhile by a
// concurrent scan) and counts the scan that made it.
func (ts *trackerSlot) put(t *tracker, incremental bool) {
	ts.mu.Lock()
	old := ts.t
	ts.t = t
	if incremental {
		ts.incremental++
	} else {
		ts.full++
	}
	ts.mu.Unlock()
	if old != nil {
		_ = old.w.Close()
	}
}

// drop closes the tracker: the workspace is replaced (a restore, a new
// sandbox) or let go. The next scan is full.
func (ts *trackerSlot) drop() {
	if t := ts.take(); t != nil {
		_ = t.w.Close()
	}
}

// counts returns the full and incremental scans so far.
func (ts *trackerSlot) counts() (full, incremental int) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.full, ts.incremental
}

// dirtyTracking reports whether the node tracks changes between scans.
func (a *Agent) dirtyTracking() bool {
	return a.cfg.DirtyTracking == nil || *a.cfg.DirtyTracking
}

// scanWorkspace scans the session's host workspace dir with its hash
// cache: incrementally when its tracker vouches for what changed since
// the last scan, in full otherwise (and then the tracker starts again).
// Errors are snapshot.Scan's; the tracker's own failures only make the
// scan full.
func (a *Agent) scanWorkspace(ctx context.Context, s *session, dir string, skip archive.Skip) (*snapshot.Scanned, error) {
	cache := s.content.hashCache()
	if !a.dirtyTracking() {
		return snapshot.Scan(ctx, dir, skip, cache)
	}
	slot := &s.content.track
	t := slot.take()
	var since *snapshot.Since
	if t != nil && t.dir == dir && !t.w.Stale() && (a.cfg.FullScanEvery < 0 || t.scans+1 < a.cfg.FullScanEvery) {
		next := t.w.Begin()
		paths, complete := t.w.EndPaths(ctx, t.tok)
		t.tok = next
		if complete {
			since = &snapshot.Since{Manifest: t.base, Changed: paths}
		}
	} else if t != nil {
		_ = t.w.Close()
		t = nil
	}
	if t == nil {
		w, err := changes.Start(changes.Config{Root: dir})
		if err != nil {
			a.logger.Debug("dirty tracking: no watcher; every scan is full", "session", s.id, "err", err)
		} else {
			t = &tracker{w: w, dir: dir, tok: w.Begin()}
		}
	}
	sc, err := snapshot.ScanSince(ctx, dir, skip, cache, since)
	if err != nil {
		if t != nil {
			_ = t.w.Close()
		}
		return nil, err
	}
	if t == nil {
		return sc, nil
	}
	t.base = sc.Manifest
	if sc.Incremental {
		t.scans++
	} else {
		t.scans = 0
	}
	slot.put(t, sc.Incremental)
	return sc, nil
}
