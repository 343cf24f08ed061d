package local

import (
	"context"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/overlay"
)

// ExportWorkspace writes the workspace directory as a tar of
// workspace-relative members, through the sandbox's os.Root.
func (s *Sandbox) ExportWorkspace(ctx context.Context, w io.Writer, skip archive.Skip) (archive.Stats, error) {
	root, err := s.fsRoot()
	if err != nil {
		return archive.Stats{}, err
	}
	st, err := archive.WriteDir(w, root, skip)
	if err != nil {
		return st, errcode.Wrap(errcode.RuntimeError, err, "export workspace")
	}
	return st, nil
}

// ImportWorkspace replaces the workspace's contents with the archive r:
// StageWorkspace, then its commit, so that a bad archive or a tree that
// cannot be emptied leaves the workspace as it was.
func (s *Sandbox) ImportWorkspace(ctx context.Context, r io.Reader, lim archive.Limits) (archive.Stats, error) {
	return runtime.ImportStaged(ctx, s.StageWorkspace, r, lim)
}

// StageWorkspace extracts the archive r, member by member as archive
// checks them, into a staging directory beside the workspace, so that it
// can run while the archive is still arriving. commit swaps the staging
// directory in place of the workspace (the old one is removed); abort
// removes it. Either may be called once, and only one of them. On an error nothing is left and the workspace is untouched.
// The replaced workspace is removed in the background (directories without
// write permission made writable first); Shutdown waits.
func (s *Sandbox) StageWorkspace(ctx context.Context, r io.Reader, lim archive.Limits) (archive.Stats, func() error, func(), error) {
	stg, err := s.stage()
	if err != nil {
		return archive.Stats{}, nil, nil, err
	}
	st, err := archive.Extract(stg.Root, r, lim)
	if err != nil {
		stg.Abort()
		return st, nil, nil, err
	}
	return st, stg.Commit, stg.Abort, nil
}

var _ runtime.HostStager = (*Sandbox)(nil)

// StageHost makes an empty staging directory beside the workspace for the
// node to write; its commit and abort are StageWorkspace's. ok is always
// true (an error once the sandbox is shut down).
func (s *Sandbox) StageHost(ctx context.Context) (runtime.HostStage, bool, error) {
	stg, err := s.stage()
	return stg, err == nil, err
}

// stage makes a staging directory beside the workspace, opened as an
// os.Root, with the commit that swaps it in place of the workspace (the
// old one is removed in the background; Shutdown waits) and the abort
// that removes it. Commit's and Abort's Root is closed by them.
func (s *Sandbox) stage() (runtime.HostStage, error) {
	if _, err := s.fsRoot(); err != nil {
		return runtime.HostStage{}, err
	}
	staging := filepath.Join(s.sessionDir, ".staging-"+rand.Text())
	if err := os.Mkdir(staging, 0o755); err != nil {
		return runtime.HostStage{}, errcode.Wrap(errcode.RuntimeError, err, "staging directory")
	}
	remove := func() { _ = removeTree(staging) }
	root, err := os.OpenRoot(staging)
	if err != nil {
		remove()
		return runtime.HostStage{}, errcode.Wrap(errcode.RuntimeError, err, "staging directory")
	}
	abort := func() { root.Close(); remove() }
	var used atomic.Bool // commit or abort, once
	commit := func() error {
		if used.Swap(true) {
			return errcode.New(errcode.Internal, "hydrate: the staged workspace was already committed or aborted")
		}
		root.Close()
		s.mu.Lock()
		if s.state == stateShutDown {
			s.mu.Unlock()
			remove()
			return errcode.New(errcode.InvalidState, "sandbox is shut down")
		}
		// An overlay (StageOverlay) is unmounted first: its mount point
		// cannot be renamed.
		prev := s.overlay
		if err := s.dropOverlayLocked(); err != nil {
			s.mu.Unlock()
			remove()
			return err
		}
		remount := func() {
			if prev != (overlay.Record{}) && prev.Mount(s.dir, true) == nil {
				s.overlay = prev
			}
		}
		old := filepath.Join(s.sessionDir, ".old-"+rand.Text())
		if err := os.Rename(s.dir, old); err != nil {
			remount()
			s.mu.Unlock()
			remove()
			return errcode.Wrap(errcode.RuntimeError, err, "swap workspace")
		}
		if err := os.Rename(staging, s.dir); err != nil {
			_ = os.Rename(old, s.dir) // put the old one back
			remount()
			s.mu.Unlock()
			remove()
			return errcode.Wrap(errcode.RuntimeError, err, "swap workspace")
		}
		newRoot, err := os.OpenRoot(s.dir)
		if err != nil {
			s.mu.Unlock()
			return errcode.Wrap(errcode.RuntimeError, err, "open swapped workspace")
		}
		oldRoot := s.root
		s.root = newRoot
		// The replaced tree is removed off the hydrate's path; Shutdown
		// waits for it.
		s.cleanups.Add(1)
		s.mu.Unlock()
		oldRoot.Close()
		go func() {
			defer s.cleanups.Done()
			_ = removeTree(old) // makes 0555 directories writable if it must
			if prev != (overlay.Record{}) {
				_ = removeTree(filepath.Dir(prev.Upper))
			}
		}()
		return nil
	}
	return runtime.HostStage{Root: root, Commit: commit, Abort: func() {
		if !used.Swap(true) {
			abort()
		}
	}}, nil
}

var _ runtime.HostWorkspace = (*Sandbox)(nil)

// HostWorkspaceDir returns the workspace's host directory; ok is false
// once the sandbox is shut down.
func (s *Sandbox) HostWorkspaceDir() (string, bool) {
	if _, err := s.fsRoot(); err != nil {
		return "", false
	}
	return s.dir, true
}
