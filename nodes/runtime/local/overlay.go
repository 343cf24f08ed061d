package local

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/overlay"
)

var _ runtime.OverlayStager = (*Sandbox)(nil)

// StageOverlay makes an empty upper and work directory in the sandbox's
// directory for an overlay that replaces the workspace (the local runtime
// has no disk of its own, so nothing bounds what the upper holds but the
// host's disk, as for any of its workspaces). Mount swaps it in: the
// current workspace (an overlay is unmounted first) is moved aside and
// removed in the background, and the overlay mounted at the workspace's
// path. ok is false for a sandbox of Open's, whose directory is not its
// own. Mounting needs the right to mount (root): otherwise Mount's error
// wraps overlay.ErrUnsupported.
func (s *Sandbox) StageOverlay(ctx context.Context) (runtime.OverlayStage, bool, error) {
	if s.sessionDir == "" {
		return runtime.OverlayStage{}, false, nil
	}
	if _, err := s.fsRoot(); err != nil {
		return runtime.OverlayStage{}, false, err
	}
	layer, err := overlay.NewLayer(s.sessionDir, -1, -1)
	if err != nil {
		return runtime.OverlayStage{}, false, err
	}
	var used atomic.Bool
	abort := func() {
		if !used.Swap(true) {
			_ = removeTree(layer.Dir)
		}
	}
	mount := func(lower string) error {
		if used.Swap(true) {
			return errcode.New(errcode.Internal, "restore: the staged overlay was already mounted or given up")
		}
		err := s.mountOverlay(layer.Over(lower))
		if err != nil {
			_ = removeTree(layer.Dir)
		}
		return err
	}
	return runtime.OverlayStage{Mount: mount, Abort: abort}, true, nil
}

// mountOverlay puts the overlay rec in place of the workspace, all or
// nothing.
func (s *Sandbox) mountOverlay(rec overlay.Record) error {
	s.closeWatcher() // it watches the workspace being replaced
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == stateShutDown {
		return errcode.New(errcode.InvalidState, "sandbox is shut down")
	}
	prev := s.overlay
	if prev != (overlay.Record{}) {
		if err := overlay.Unmount(s.dir); err != nil {
			return err
		}
	}
	remount := func() {
		if prev != (overlay.Record{}) {
			_ = prev.Mount(s.dir, true)
		}
	}
	old := filepath.Join(s.sessionDir, ".old-"+rand.Text())
	if err := os.Rename(s.dir, old); err != nil {
		remount()
		return errcode.Wrap(errcode.RuntimeError, err, "swap workspace")
	}
	undo := func() { // the former workspace back, as it was
		_ = os.Remove(s.dir)
		_ = os.Rename(old, s.dir)
		remount()
	}
	if err := os.Mkdir(s.dir, 0o755); err != nil {
		undo()
		return errcode.Wrap(errcode.RuntimeError, err, "swap workspace")
	}
	// Volatile: a local sandbox's workspace is never brought back after a
	// crash of the host (a new sandbox replaces what is left), and the
	// unmount of a synced overlay would flush all the dirty data of the
	// host's file system, a just-written tree's included.
	if err := rec.Mount(s.dir, true); err != nil {
		undo()
		return err
	}
	newRoot, err := os.OpenRoot(s.dir)
	if err != nil {
		_ = overlay.Unmount(s.dir)
		undo()
		return errcode.Wrap(errcode.RuntimeError, err, "open the swapped workspace")
	}
	oldRoot := s.root
	s.root = newRoot
	s.overlay = rec
	oldRoot.Close()
	// What was replaced goes off the restore's path; Shutdown waits.
	s.cleanups.Add(1)
	go func() {
		defer s.cleanups.Done()
		_ = removeTree(old)
		if prev != (overlay.Record{}) {
			_ = removeTree(filepath.Dir(prev.Upper))
		}
	}()
	return nil
}

// dropOverlayLocked unmounts the workspace's overlay, if it is one, so that
// what is under the sandbox's directory can be removed or swapped as
// plain directories (the upper stays, for whoever removes the directory).
// s.mu must be held.
func (s *Sandbox) dropOverlayLocked() error {
	if s.overlay == (overlay.Record{}) {
		return nil
	}
	if err := overlay.Unmount(s.dir); err != nil {
		return err
	}
	s.overlay = overlay.Record{}
	return nil
}

// unmountLeftover unmounts an overlay a former sandbox left at ws (the
// node stopped before shutting it down), so that its directory can be
// removed without reaching through it.
func unmountLeftover(ws string) error {
	if !overlay.Mounted(ws) {
		return nil
	}
	if err := overlay.Unmount(ws); err != nil {
		return errors.Join(err, errcode.New(errcode.RuntimeError, "a leftover overlay is mounted at %s", ws))
	}
	return nil
}

// Close unmounts the overlays of this runtime's workspaces (restores from
// kept trees). A local sandbox does not outlive its node (its processes
// end with it, and a sandbox made again for the session removes what is
// left), so what it leaves is plain directories, never mounts.
func (r *Runtime) Close() error {
	targets, err := overlay.MountedUnder(r.cfg.Dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range targets {
		errs = append(errs, overlay.Unmount(t))
	}
	return errors.Join(errs...)
}
