package local

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/changes"
	"github.com/paddock-dev/paddock/nodes/runtime/overlay"
)

type state int

const (
	stateRunning state = iota
	stateStopped
	stateShutDown
)

// Sandbox is one local sandbox. Its methods are safe for concurrent use.
type Sandbox struct {
	release    func()            // tells the runtime the session directory is free
	sessionDir string            // <Dir>/<tenant>/<session>, removed by Shutdown
	dir        string            // host path of the workspace
	vroot      string            // the workspace root as absolute workspace paths name it
	env        map[string]string // every process's environment, over the base
	timeout    time.Duration     // for an exec that names none

	mu    sync.Mutex // guards the fields below
	root  *os.Root   // nil after Shutdown
	state state
	procs map[*proc]struct{} // running commands
	// overlay is the overlay mounted as the workspace (StageOverlay), or
	// zero when the workspace is a plain directory.
	overlay overlay.Record
	// rootID is the identity of root's directory (sandboxes of Open's
	// follow their workspace's path: followLocked).
	rootID fileID

	watchMu sync.Mutex       // guards watch
	watch   *changes.Watcher // the workspace's change watcher, started at the first exec that asks

	// cleanups tracks the removals of replaced workspaces that run after a
	// hydrate has answered; Shutdown waits for them.
	cleanups sync.WaitGroup
}

// proc is one running command: its process group and a channel closed once
// the command has been reaped and its output drained.
type proc struct {
	pgid int
	done chan struct{}
}

var _ runtime.Sandbox = (*Sandbox)(nil)

// Dir returns the workspace's host directory.
func (s *Sandbox) Dir() string { return s.dir }

// Start makes a stopped sandbox running; a running one is left as it is.
// After Shutdown it is invalid_state.
func (s *Sandbox) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == stateShutDown {
		return errcode.New(errcode.InvalidState, "sandbox is shut down")
	}
	s.state = stateRunning
	return nil
}

// Stop kills the sandbox's processes and waits for them (or for ctx),
// keeping the workspace. Stopping a stopped sandbox is a no-op; after
// Shutdown it is invalid_state.
func (s *Sandbox) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.state == stateShutDown {
		s.mu.Unlock()
		return errcode.New(errcode.InvalidState, "sandbox is shut down")
	}
	s.state = stateStopped
	procs := s.killLocked()
	s.mu.Unlock()
	err := waitProcs(ctx, procs)
	s.closeWatcher()
	return err
}

// Shutdown kills the sandbox's processes, waits for them (or for ctx) and
// removes the session's directory. It is idempotent; a directory that
// cannot be removed is runtime_error.
func (s *Sandbox) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.state == stateShutDown {
		s.mu.Unlock()
		return nil
	}
	s.state = stateShutDown
	procs := s.killLocked()
	root := s.root
	s.root = nil
	// Removing the directory through a mounted overlay would leave the
	// overlay's mount point behind (its lower tree is never touched).
	oerr := s.dropOverlayLocked()
	s.mu.Unlock()

	werr := waitProcs(ctx, procs)
	s.closeWatcher()
	_ = root.Close()
	s.cleanups.Wait()
	if s.sessionDir == "" {
		return werr // Open's: the directory is not the sandbox's to remove
	}
	if err := removeTree(s.sessionDir); err != nil {
		return errcode.Wrap(errcode.RuntimeError, errors.Join(err, oerr), "remove sandbox directory")
	}
	s.release()
	return werr
}

// Running reports whether the sandbox is running; it never fails.
func (s *Sandbox) Running(ctx context.Context) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == stateRunning, nil
}

// killLocked sends SIGKILL to every running command's process group and
// returns the commands to wait for. s.mu must be held.
func (s *Sandbox) killLocked() []*proc {
	procs := make([]*proc, 0, len(s.procs))
	for p := range s.procs {
		_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
		procs = append(procs, p)
	}
	return procs
}

// waitProcs waits until every command in procs is done, or ctx ends.
func waitProcs(ctx context.Context, procs []*proc) error {
	for _, p := range procs {
		select {
		case <-p.done:
		case <-ctx.Done():
			return errcode.Wrap(errcode.RuntimeError, ctx.Err(), "wait for killed processes")
		}
	}
	return nil
}

// removeTree removes dir and everything in it. A command may have left
// directories without write or search permission; they are opened up and
// the removal retried.
func removeTree(dir string) error {
	err := os.RemoveAll(dir)
	if err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, werr error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// fsRoot returns the workspace's os.Root, or invalid_state after Shutdown.
func (s *Sandbox) fsRoot() (*os.Root, error) {
	s.mu.Lock()
	if s.state == stateShutDown {
		s.mu.Unlock()
		return nil, errcode.New(errcode.InvalidState, "sandbox is shut down")
	}
	moved := s.followLocked()
	root := s.root
	s.mu.Unlock()
	if moved {
		s.closeWatcher() // it watches the directory that was replaced
	}
	return root, nil
}

// followLocked opens the workspace again when its path now names another
// directory than the one opened: in a sandbox of Open's (the supervisor
// in a container), the node mounted an overlay on the workspace (a
// restore from a kept tree), and an os.Root opened before reads the
// directory under it. It reports whether it did. s.mu must be held.
func (s *Sandbox) followLocked() bool {
	if s.sessionDir != "" || s.root == nil {
		return false // Create's: the runtime replaces the workspace itself
	}
	var st unix.Stat_t
	if unix.Stat(s.dir, &st) != nil || (st.Dev == s.rootID.dev && st.Ino == s.rootID.ino) {
		return false
	}
	root, err := os.OpenRoot(s.dir)
	if err != nil {
		return false
	}
	s.root.Close()
	s.root = root
	s.rootID = dirID(root)
	return true
}

// fileID identifies a directory: its device and inode.
type fileID struct{ dev, ino uint64 }

// dirID returns the identity of root's directory (zero when unknown).
func dirID(root *os.Root) fileID {
	fi, err := root.Stat(".")
	if err != nil {
		return fileID{}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}
}
