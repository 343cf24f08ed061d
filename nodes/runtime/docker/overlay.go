package docker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/overlay"
)

// A restore from a kept tree (runtime.OverlayStager) on a loopfs disk
// mounts, on the node's own mount of the disk, an overlay at the
// workspace's directory: the kept tree below, an upper directory on the
// disk above (so that what the sandbox writes counts against its limit).
// The container sees it because its workspace mount receives the host's
// mounts under it (rslave, LabelOverlay) and the disk's mount is shared.
// The upper and work directories are under <mnt>/overlay, which no
// container mount shows; a record beside the image (<dir>/overlay) says
// which tree and upper the workspace is, so that the node keeps that tree
// and Start mounts the overlay again: after the container starts, so that
// the container's workspace mount is of the disk's directory, never of an
// overlay (which would not receive the next one), and after a reboot of
// the host too.

// LabelOverlay marks a container whose workspace mount receives the
// node's mounts ("rslave"): only those take an overlay restore.
const LabelOverlay = "paddock.workspace-propagation"

// diskOverlay is the loopfs directory of the overlays' upper and work
// directories.
const diskOverlay = "overlay"

// overlayRecord is where a loopfs disk records its workspace's overlay.
func (d disk) overlayRecord() string { return filepath.Join(d.dir, "overlay") }

var _ runtime.OverlayStager = (*Sandbox)(nil)

// StageOverlay makes an upper and a work directory on the sandbox's disk
// for an overlay of a kept tree (owned by the sandbox's user, as a
// restore's files are). ok is false for a sandbox whose workspace is not
// on a mounted loopfs disk, whose container was made without
// LabelOverlay, or that runs under gVisor (whose mounts do not follow
// the host's).
func (s *Sandbox) StageOverlay(ctx context.Context) (runtime.OverlayStage, bool, error) {
	if !s.disk.overlay || s.r.cfg.GVisor != "" {
		return runtime.OverlayStage{}, false, nil
	}
	if _, ok := s.HostWorkspaceDir(); !ok {
		return runtime.OverlayStage{}, false, nil
	}
	o, err := s.owner(ctx)
	if err != nil {
		return runtime.OverlayStage{}, false, err
	}
	base := filepath.Join(s.disk.mnt(), diskOverlay)
	if err := os.Mkdir(base, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return runtime.OverlayStage{}, false, errcode.Wrap(errcode.RuntimeError, err, "overlay directory")
	}
	layer, err := overlay.NewLayer(base, o.uid, o.gid)
	if err != nil {
		return runtime.OverlayStage{}, false, err
	}
	var used atomic.Bool
	return runtime.OverlayStage{
		Chown: true, UID: o.uid, GID: o.gid,
		Mount: func(lower string) error {
			if used.Swap(true) {
				return errcode.New(errcode.Internal, "restore: the staged overlay was already mounted or given up")
			}
			err := s.mountOverlay(layer.Over(lower))
			if err != nil {
				_ = os.RemoveAll(layer.Dir)
			}
			return err
		},
		Abort: func() {
			if !used.Swap(true) {
				_ = os.RemoveAll(layer.Dir)
			}
		},
	}, true, nil
}

// mountOverlay puts the overlay rec in place of the workspace. An overlay there is unmounted first (for the moment between,
// the sandbox sees the disk's workspace directory, which an overlay
// always leaves empty) and mounted again should the new one fail. A
// plain workspace's entries are moved aside, under the new overlay, to
// the holder's old-* directories that the background sweep removes.
func (s *Sandbox) mountOverlay(rec overlay.Record) error {
	if err := s.checkNotGone("restore"); err != nil {
		return err
	}
	ws := filepath.Join(s.disk.mnt(), diskWorkspace)
	prev, hadPrev, err := overlay.ReadRecord(s.disk.overlayRecord())
	if err != nil {
		return err
	}
	if hadPrev {
		if err := overlay.Unmount(ws); err != nil {
			return err
		}
	}
	remount := func() {
		if hadPrev {
			_ = prev.Mount(ws, false)
		}
	}
	// The disk's own workspace directory, under whatever is mounted next.
	under, err := openDirAt(unix.AT_FDCWD, ws)
	if err != nil {
		remount()
		return errcode.Wrap(errcode.RuntimeError, err, "open the workspace")
	}
	defer under.Close()
	if err := overlay.WriteRecord(s.disk.overlayRecord(), rec); err != nil {
		remount()
		return err
	}
	// Synced (not volatile): the workspace outlives a reboot of the host
	// (Start mounts it again), and the disk's file system is the
	// sandbox's own, so an unmount flushes only what the sandbox wrote.
	if err := rec.Mount(ws, false); err != nil {
		if hadPrev {
			_ = overlay.WriteRecord(s.disk.overlayRecord(), prev)
		} else {
			_ = os.Remove(s.disk.overlayRecord())
		}
		remount()
		return err
	}
	if hadPrev {
		s.goBackground(func(context.Context) { _ = os.RemoveAll(filepath.Dir(prev.Upper)) })
	}
	if err := s.moveAside(under); err != nil {
		// The restore is done; what is left under the overlay only takes
		// room on the sandbox's disk until the next restore.
		return nil
	}
	s.goBackground(func(ctx context.Context) { s.removeTrees(ctx, oldPrefix) })
	return nil
}

// moveAside moves every entry of dir (the disk's workspace directory,
// now under an overlay) into a new old-* directory of the holder.
func (s *Sandbox) moveAside(dir *os.File) error {
	names, err := dir.Readdirnames(-1)
	if err != nil || len(names) == 0 {
		return err
	}
	holder, err := openDirAt(unix.AT_FDCWD, filepath.Join(s.disk.mnt(), diskHolder))
	if err != nil {
		return err
	}
	defer holder.Close()
	old := oldPrefix + rand.Text()
	if err := unix.Mkdirat(int(holder.Fd()), old, 0o700); err != nil {
		return err
	}
	to, err := openDirAt(int(holder.Fd()), old)
	if err != nil {
		return err
	}
	defer to.Close()
	for _, n := range names {
		if err := unix.Renameat2(int(dir.Fd()), n, int(to.Fd()), n, unix.RENAME_NOREPLACE); err != nil {
			return fmt.Errorf("move %q aside: %w", n, err)
		}
	}
	return nil
}

// dropOverlay unmounts the workspace's overlay, if it is one, and returns
// what puts it back (a swap that fails) and what removes its upper (a
// swap that succeeded).
func (s *Sandbox) dropOverlay() (restore, forget func(), err error) {
	rec, ok, err := overlay.ReadRecord(s.disk.overlayRecord())
	if err != nil || !ok {
		return func() {}, func() {}, err
	}
	ws := filepath.Join(s.disk.mnt(), diskWorkspace)
	if err := overlay.Unmount(ws); err != nil {
		return nil, nil, err
	}
	restore = func() { _ = rec.Mount(ws, false) }
	forget = func() {
		_ = os.Remove(s.disk.overlayRecord())
		s.goBackground(func(context.Context) { _ = os.RemoveAll(filepath.Dir(rec.Upper)) })
	}
	return restore, forget, nil
}

// liftOverlay readies a stopped container's start when its workspace is
// a recorded overlay: it unmounts the overlay (if mounted: not after a
// reboot of the host) and returns what mounts it again, to be called
// once the container started. A running container is left alone (nil).
func (s *Sandbox) liftOverlay(ctx context.Context) (func() error, error) {
	rec, ok, err := overlay.ReadRecord(s.disk.overlayRecord())
	if err != nil || !ok {
		return nil, err
	}
	if running, err := s.Running(ctx); err != nil || running {
		return nil, err
	}
	if _, err := os.Stat(rec.Lower); err != nil {
		return nil, errcode.Wrap(errcode.InvalidState, err, "the kept tree the sandbox's workspace is an overlay of is gone")
	}
	ws := filepath.Join(s.disk.mnt(), diskWorkspace)
	if err := overlay.Unmount(ws); err != nil {
		return nil, err
	}
	return func() error { return rec.Mount(ws, false) }, nil
}

// OverlayLowers returns the kept trees that the workspaces of this
// runtime's loopfs disks are recorded as overlays of: the node keeps them
// while the records stand.
func (r *Runtime) OverlayLowers() ([]string, error) {
	if r.cfg.DiskDir == "" {
		return nil, nil
	}
	recs, err := filepath.Glob(filepath.Join(r.cfg.DiskDir, "*", "overlay"))
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "list overlay records")
	}
	var out []string
	for _, p := range recs {
		rec, ok, err := overlay.ReadRecord(p)
		if err != nil {
			return nil, err // not known: nothing may go
		}
		if ok {
			out = append(out, rec.Lower)
		}
	}
	return out, nil
}
