package runsc

import (
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
)

// Sandbox is one sandbox run by runsc. Its methods are safe for concurrent
// use.
//
//	prepare ─► created ──startContainer──► running ──Stop──► stopped
//	                                         ▲  │              │
//	                      restore (leave) ───┘  └─Checkpoint─► stopped
//	                                         ▲                 │
//	                                         └──────Start──────┘
//	any ──Shutdown──► gone (final)
//
// Start after a Stop or a Checkpoint starts the sandbox afresh (the keep-
// alive only): its processes come back only through Restore.
type Sandbox struct {
	rt       *Runtime
	ws       *local.Sandbox // the workspace's host directory and its file operations
	dir      string         // bundle (config.json), runsc root (root/), restore copy (ckpt/)
	id       string         // the container's id under the runsc root
	image    string
	uid, gid int
	vroot    string
	env      map[string]string

	mu      sync.Mutex // guards the fields below; held through start, stop and checkpoint
	running bool
	exists  bool // the runsc root holds the container (running or stopped)
	shut    bool
	execs   int // execs in flight
}

var (
	_ runtime.Sandbox       = (*Sandbox)(nil)
	_ runtime.Checkpointer  = (*Sandbox)(nil)
	_ runtime.HostWorkspace = (*Sandbox)(nil)
)

func (s *Sandbox) root() string { return filepath.Join(s.dir, "root") }

// ContainerID returns the sandbox's runsc container id.
func (s *Sandbox) ContainerID() string { return s.id }

// startContainer creates and starts the container from the bundle.
// s.mu must not be held by another call of it.
func (s *Sandbox) startContainer(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startLocked(ctx)
}

func (s *Sandbox) startLocked(ctx context.Context) error {
	if s.shut {
		return errcode.New(errcode.InvalidState, "sandbox is shut down")
	}
	if s.running {
		return nil
	}
	if err := s.deleteLocked(ctx); err != nil {
		return err
	}
	// A create that fails may still have started the sandbox's
	// processes: the delete below must try.
	s.exists = true
	if _, err := s.rt.runsc(ctx, s.root(), "create", "--bundle", s.dir, s.id); err != nil {
		_ = s.deleteLocked(context.WithoutCancel(ctx))
		return errcode.Wrap(errcode.RuntimeError, err, "create the sandbox")
	}
	if _, err := s.rt.runsc(ctx, s.root(), "start", s.id); err != nil {
		_ = s.deleteLocked(context.WithoutCancel(ctx))
		return errcode.Wrap(errcode.RuntimeError, err, "start the sandbox")
	}
	s.running = true
	return nil
}

// deleteLocked kills and removes the container, if there is one.
func (s *Sandbox) deleteLocked(ctx context.Context) error {
	if !s.exists {
		return nil
	}
	if _, err := s.rt.runsc(ctx, s.root(), "delete", "--force", s.id); err != nil {
		// A container runsc does not know (a create or restore that
		// failed before it recorded one) is gone already.
		if _, serr := s.rt.runsc(ctx, s.root(), "state", s.id); serr == nil {
			return errcode.Wrap(errcode.RuntimeError, err, "remove the sandbox's container")
		}
	}
	s.exists, s.running = false, false
	return nil
}

// cgroupName is the sandbox's cgroup below cgroupParent.
func (s *Sandbox) cgroupName() string { return s.id + "-" + filepath.Base(s.dir) }

// removeCgroups removes the sandbox's cgroups that runsc left (a create
// or restore that failed half way leaves them), best effort: an empty
// cgroup is removed with rmdir, a busy one stays.
func removeCgroups(name string) {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", cgroupParent, name))
	dirs = append(dirs, filepath.Join("/sys/fs/cgroup", cgroupParent, name))
	for _, d := range dirs {
		_ = os.Remove(d)
	}
}

// Start starts a stopped sandbox afresh; a running one is left as it is.
// After Shutdown it is invalid_state.
func (s *Sandbox) Start(ctx context.Context) error { return s.startContainer(ctx) }

// Stop kills the sandbox's processes (the container is removed; the
// bundle and workspace stay). Stopping a stopped sandbox is a no-op.
func (s *Sandbox) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shut {
		return errcode.New(errcode.InvalidState, "sandbox is shut down")
	}
	return s.deleteLocked(ctx)
}

// Shutdown removes the container, the bundle, the runsc root and the
// workspace. It is idempotent.
func (s *Sandbox) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shut {
		return nil
	}
	derr := s.deleteLocked(ctx)
	if derr != nil {
		return derr
	}
	s.shut = true
	removeCgroups(s.cgroupName())
	werr := s.ws.Shutdown(ctx)
	if err := os.RemoveAll(s.dir); err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "remove the sandbox's directory")
	}
	s.rt.release(s)
	return werr
}

// Running reports whether the sandbox's container runs. It asks runsc,
// so a sandbox whose processes all ended (its keep-alive killed) reads
// stopped.
func (s *Sandbox) Running(ctx context.Context) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return false, nil
	}
	return s.containerRuns(ctx), nil
}

// HostWorkspaceDir returns the workspace's host directory.
func (s *Sandbox) HostWorkspaceDir() (string, bool) { return s.ws.HostWorkspaceDir() }

// ReadFile reads a workspace file on the host (see local.Sandbox).
func (s *Sandbox) ReadFile(ctx context.Context, p string, limit int64) ([]byte, fs.FileMode, error) {
	return s.ws.ReadFile(ctx, p, limit)
}

// ReadFileTo streams a workspace file (see local.Sandbox).
func (s *Sandbox) ReadFileTo(ctx context.Context, p string, w io.Writer, limit int64) (int64, fs.FileMode, error) {
	return s.ws.ReadFileTo(ctx, p, w, limit)
}

// WriteFile writes a workspace file, then gives it to the sandbox's user.
func (s *Sandbox) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	if err := s.ws.WriteFile(ctx, p, data, mode); err != nil {
		return err
	}
	return s.own(p)
}

// WriteFileFrom is WriteFile with the content streamed from r.
func (s *Sandbox) WriteFileFrom(ctx context.Context, p string, r io.Reader, size int64, mode fs.FileMode) error {
	if err := s.ws.WriteFileFrom(ctx, p, r, size, mode); err != nil {
		return err
	}
	return s.own(p)
}

// List lists a workspace directory (see local.Sandbox).
func (s *Sandbox) List(ctx context.Context, p string) ([]commands.Entry, error) {
	return s.ws.List(ctx, p)
}

// Remove removes a workspace path (see local.Sandbox).
func (s *Sandbox) Remove(ctx context.Context, p string, recursive bool) error {
	return s.ws.Remove(ctx, p, recursive)
}

// Mkdir makes a workspace directory and gives it (and the parents it made)
// to the sandbox's user.
func (s *Sandbox) Mkdir(ctx context.Context, p string, parents bool) error {
	if err := s.ws.Mkdir(ctx, p, parents); err != nil {
		return err
	}
	return s.ownTree()
}

// ExportWorkspace writes the workspace as a tar (see local.Sandbox).
func (s *Sandbox) ExportWorkspace(ctx context.Context, w io.Writer, skip archive.Skip) (archive.Stats, error) {
	return s.ws.ExportWorkspace(ctx, w, skip)
}

// ImportWorkspace replaces the workspace's contents. The container's bind
// mount holds the directory it was started with and the import swaps in
// another, so a running sandbox is restarted around it (its processes
// start afresh, as after Stop and Start).
func (s *Sandbox) ImportWorkspace(ctx context.Context, r io.Reader, lim archive.Limits) (archive.Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shut {
		return archive.Stats{}, errcode.New(errcode.InvalidState, "sandbox is shut down")
	}
	if s.execs > 0 {
		return archive.Stats{}, errcode.New(errcode.InvalidState, "import: %d commands are running", s.execs)
	}
	was := s.running
	if err := s.deleteLocked(ctx); err != nil {
		return archive.Stats{}, err
	}
	st, err := s.ws.ImportWorkspace(ctx, r, lim)
	if oerr := s.ownTree(); err == nil {
		err = oerr
	}
	if was {
		if serr := s.startLocked(ctx); err == nil {
			err = serr
		}
	}
	return st, err
}

// own gives the file p (not following a symlink) to the sandbox's user.
func (s *Sandbox) own(p string) error {
	rel, err := runtime.Rel(s.vroot, p)
	if err != nil {
		return err
	}
	dir, ok := s.ws.HostWorkspaceDir()
	if !ok {
		return errcode.New(errcode.InvalidState, "sandbox is shut down")
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "open workspace")
	}
	defer root.Close()
	if err := root.Lchown(rel, s.uid, s.gid); err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "give a file to the sandbox's user")
	}
	return nil
}

// ownTree gives the whole workspace (the root included, never following
// a symlink) to the sandbox's user.
func (s *Sandbox) ownTree() error {
	dir, ok := s.ws.HostWorkspaceDir()
	if !ok {
		return errcode.New(errcode.InvalidState, "sandbox is shut down")
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "open workspace")
	}
	defer root.Close()
	err = fs.WalkDir(root.FS(), ".", func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return root.Lchown(p, s.uid, s.gid)
	})
	if err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "give the workspace to the sandbox's user")
	}
	return nil
}
