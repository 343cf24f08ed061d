package nodes

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/overlay"
	"github.com/paddock-dev/paddock/snapshot"
)

// overlayRecorder is a runtime that records, beside its sandboxes, the
// kept trees their workspaces are overlays of (so that they are mounted
// again after the host restarts): those trees must be kept meanwhile.
type overlayRecorder interface {
	OverlayLowers() ([]string, error)
}

// overlayLowers returns the kept trees overlays use: mounted now, or
// recorded by a runtime to be mounted again.
func (a *Agent) overlayLowers() (map[string]bool, error) {
	used, err := overlay.Lowers()
	if err != nil {
		return nil, err
	}
	for _, rt := range a.runtimes {
		if r, ok := rt.(overlayRecorder); ok {
			ls, err := r.OverlayLowers()
			if err != nil {
				return nil, err
			}
			for _, l := range ls {
				used[l] = true
			}
		}
	}
	return used, nil
}

// restoreKept restores m into sb as an overlay of the tree this node
// keeps of it (tenant, root and the sandbox's owner), building the tree
// first when there is none: the first restore of a snapshot on a node
// writes its files once, into the tree; the next ones write none. done is
// false (and nothing changed) when this path does not apply: no tree
// cache, a sandbox that cannot mount an overlay, a tree past the cache's
// budget, or a host where overlays cannot be mounted (then never tried
// again).
func (a *Agent) restoreKept(ctx context.Context, s *session, sb runtime.Sandbox, m *snapshot.Manifest,
	get func(context.Context, string) ([]byte, error)) (st archive.Stats, kept, done bool, err error) {
	ovs, ok := sb.(runtime.OverlayStager)
	if a.trees == nil || !ok || a.overlayOff.Load() || a.keptOff.Load() {
		return st, false, false, nil
	}
	_, entries, bytes := m.Stats()
	if !a.trees.Fits(bytes) {
		return st, false, false, nil
	}
	stg, ok, err := ovs.StageOverlay(ctx)
	if err != nil || !ok {
		return st, false, false, err
	}
	uid, gid := -1, -1
	if stg.Chown {
		uid, gid = stg.UID, stg.GID
	}
	t, kept := a.trees.Get(s.tenant, m.Root(), uid, gid)
	if !kept {
		t, err = a.trees.Build(ctx, s.tenant, m.Root(), uid, gid, func(dir string) (int64, error) {
			root, err := os.OpenRoot(dir)
			if err != nil {
				return 0, errcode.Wrap(errcode.RuntimeError, err, "open a tree being kept")
			}
			defer root.Close()
			w, err := snapshot.WriteDir(ctx, root, m, get, snapshot.WriteOptions{
				Parallel: writeParallel, Chown: stg.Chown, UID: stg.UID, GID: stg.GID,
				Verified: true, Limits: a.cfg.ArchiveLimits,
			})
			return w.Bytes, err
		})
		if err != nil {
			stg.Abort()
			return st, false, true, err
		}
	}
	defer t.Release()
	if err := stg.Mount(t.Dir()); err != nil {
		if errors.Is(err, overlay.ErrUnsupported) {
			a.overlayOff.Store(true)
			a.logger.Info("overlays cannot be mounted here: restores write files", "err", err)
			return st, false, false, nil
		}
		return st, false, true, err
	}
	// The tree's files are m's and nobody writes them: the next scan
	// (a hydrate's changes, a persist) stats them instead of hashing them.
	if dir, ok := hostDir(sb); ok {
		if err := s.content.hashCache().Seed(dir, m, time.Now()); err != nil {
			a.logger.Debug("hash cache not seeded after a restore from a kept tree", "err", err)
		}
	}
	return archive.Stats{Members: entries, Bytes: bytes}, kept, true, nil
}
