package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// DefaultTimeout bounds an exec that names no timeout when Config gives none.
const DefaultTimeout = 10 * time.Minute

// Config configures the local runtime.
type Config struct {
	// Dir is the parent directory of the sandboxes:
	// <Dir>/<tenant>/<session>/workspace. Required; created if missing.
	Dir string
	// DefaultTimeout bounds an exec that names no timeout (0: DefaultTimeout).
	DefaultTimeout time.Duration
}

// Validate returns an error naming the first invalid setting.
func (c Config) Validate() error {
	if c.Dir == "" {
		return errors.New("local runtime: dir is required")
	}
	if c.DefaultTimeout < 0 {
		return errors.New("local runtime: default timeout is negative")
	}
	return nil
}

// Runtime creates local sandboxes. It is safe for concurrent use.
type Runtime struct {
	cfg Config

	mu   sync.Mutex      // guards live
	live map[string]bool // session directories of this runtime's sandboxes
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns a local runtime, creating cfg.Dir if needed. It fails if cfg
// is invalid or the directory cannot be made.
func New(cfg Config) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.DefaultTimeout == 0 {
		cfg.DefaultTimeout = DefaultTimeout
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("local runtime: %w", err)
	}
	// Resolve symlinks once, so that host paths derived from Dir compare
	// equal to what EvalSymlinks gives for paths inside it.
	dir, err := filepath.Abs(cfg.Dir)
	if err == nil {
		dir, err = filepath.EvalSymlinks(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("local runtime: %w", err)
	}
	cfg.Dir = dir
	r := &Runtime{cfg: cfg, live: map[string]bool{}}
	// A node killed before its Close left its overlays mounted: no local
	// sandbox outlives its node, so they go now (what is under them stays
	// plain directories, for the next Create of the session to remove).
	if err := r.Close(); err != nil {
		return nil, fmt.Errorf("local runtime: overlays a former node left: %w", err)
	}
	return r, nil
}

// Name returns "local".
func (r *Runtime) Name() string { return "local" }

// WorkspaceDir returns the host directory of a session's workspace, whether
// or not it exists.
func (r *Runtime) WorkspaceDir(tenant, session string) string {
	return filepath.Join(r.cfg.Dir, tenant, session, "workspace")
}

// Create makes the sandbox's workspace directory and returns the sandbox,
// running. A tenant or session id that cannot name a single directory is
// invalid_request; a session this runtime has a sandbox of is
// already_exists; a host failure is runtime_error, with nothing left
// behind. A session directory no sandbox of this runtime holds is a
// leftover (of a process that ended: local sandboxes do not outlive their
// node; or of an earlier epoch of a session that moved away and back) and
// is replaced.
func (r *Runtime) Create(ctx context.Context, spec runtime.Spec) (runtime.Sandbox, error) {
	if err := checkComponent("tenant", spec.Tenant); err != nil {
		return nil, err
	}
	if err := checkComponent("session id", spec.SessionID); err != nil {
		return nil, err
	}
	if spec.User != "" {
		return nil, errcode.New(errcode.InvalidRequest, "the local runtime runs sandboxes as the node's user; it cannot run as %q", spec.User)
	}
	vroot := spec.WorkspaceRoot
	if vroot == "" {
		vroot = runtime.DefaultWorkspaceRoot
	}
	tenantDir := filepath.Join(r.cfg.Dir, spec.Tenant)
	if err := os.MkdirAll(tenantDir, 0o755); err != nil {
		return nil, errcode.Wrap(errcode.RuntimeError, err, "create tenant directory")
	}
	sessionDir := filepath.Join(tenantDir, spec.SessionID)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.live[sessionDir] {
		return nil, errcode.New(errcode.AlreadyExists, "session %s already has a sandbox", spec.SessionID)
	}
	err := os.Mkdir(sessionDir, 0o755)
	if errors.Is(err, fs.ErrExist) {
		if rerr := unmountLeftover(filepath.Join(sessionDir, "workspace")); rerr != nil {
			return nil, rerr
		}
		if rerr := removeTree(sessionDir); rerr != nil {
			return nil, errcode.Wrap(errcode.RuntimeError, rerr, "remove a leftover session directory")
		}
		err = os.Mkdir(sessionDir, 0o755)
	}
	if err != nil {
		return nil, errcode.Wrap(errcode.RuntimeError, err, "create session directory")
	}
	ws := filepath.Join(sessionDir, "workspace")
	root, err := openWorkspace(ws)
	if err != nil {
		_ = os.RemoveAll(sessionDir)
		return nil, err
	}
	return r.holdLocked(sessionDir, ws, vroot, spec.Env, root), nil
}

// holdLocked records sessionDir as a sandbox's and returns that sandbox,
// running, over the workspace ws opened as root. r.mu must be held.
func (r *Runtime) holdLocked(sessionDir, ws, vroot string, env map[string]string, root *os.Root) *Sandbox {
	r.live[sessionDir] = true
	return &Sandbox{
		release:    func() { r.mu.Lock(); delete(r.live, sessionDir); r.mu.Unlock() },
		sessionDir: sessionDir,
		dir:        ws,
		vroot:      vroot,
		env:        maps.Clone(env),
		timeout:    r.cfg.DefaultTimeout,
		root:       root,
		state:      stateRunning,
		procs:      make(map[*proc]struct{}),
	}
}

// Reopen returns a sandbox over the workspace an earlier Create of a
// runtime on the same directory made for spec's session (one whose node
// restarted; the runsc runtime's found sandboxes keep their workspaces
// this way), running, as Create's: its Shutdown removes the session
// directory. A session this runtime has a sandbox of is already_exists; a
// workspace that is not there is not_found; ids that cannot name a
// directory are invalid_request.
func (r *Runtime) Reopen(spec runtime.Spec) (*Sandbox, error) {
	if err := checkComponent("tenant", spec.Tenant); err != nil {
		return nil, err
	}
	if err := checkComponent("session id", spec.SessionID); err != nil {
		return nil, err
	}
	vroot := spec.WorkspaceRoot
	if vroot == "" {
		vroot = runtime.DefaultWorkspaceRoot
	}
	sessionDir := filepath.Join(r.cfg.Dir, spec.Tenant, spec.SessionID)
	ws := filepath.Join(sessionDir, "workspace")
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.live[sessionDir] {
		return nil, errcode.New(errcode.AlreadyExists, "session %s already has a sandbox", spec.SessionID)
	}
	if fi, err := os.Lstat(ws); err != nil || !fi.IsDir() {
		return nil, errcode.New(errcode.NotFound, "session %s has no workspace to reopen", spec.SessionID)
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		return nil, errcode.Wrap(errcode.RuntimeError, err, "open workspace")
	}
	return r.holdLocked(sessionDir, ws, vroot, spec.Env, root), nil
}

// checkComponent refuses a tenant or session id that is not a single,
// ordinary path component.
func checkComponent(what, s string) error {
	if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\\\x00") {
		return errcode.New(errcode.InvalidRequest, "%s %q cannot name a directory", what, s)
	}
	return nil
}

func openWorkspace(ws string) (*os.Root, error) {
	if err := os.Mkdir(ws, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// ws is a host path: it stays in the cause.
			return nil, errcode.Wrap(errcode.AlreadyExists, err, "the session's workspace already exists")
		}
		return nil, errcode.Wrap(errcode.RuntimeError, err, "create workspace")
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		return nil, errcode.Wrap(errcode.RuntimeError, err, "open workspace")
	}
	return root, nil
}

// OpenConfig describes an existing directory to serve as a sandbox's
// workspace: what the in-sandbox supervisor (package supervisor) serves
// inside a container, where the container is the boundary.
type OpenConfig struct {
	// Dir is the workspace directory; it must exist.
	Dir string
	// Root is the workspace root as workspace paths name it (default Dir).
	Root string
	// Env is every command's environment over the minimal base.
	Env map[string]string
	// DefaultTimeout bounds an exec that names none (0: DefaultTimeout).
	DefaultTimeout time.Duration
}

// Open returns a running sandbox over an existing directory. Unlike
// Create's sandboxes, its Shutdown kills its processes but keeps the
// directory. A directory that cannot be opened is runtime_error.
func Open(cfg OpenConfig) (*Sandbox, error) {
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = DefaultTimeout
	}
	if cfg.Root == "" {
		cfg.Root = cfg.Dir
	}
	root, err := os.OpenRoot(cfg.Dir)
	if err != nil {
		return nil, errcode.Wrap(errcode.RuntimeError, err, "open workspace")
	}
	return &Sandbox{
		release: func() {},
		dir:     cfg.Dir,
		vroot:   cfg.Root,
		env:     maps.Clone(cfg.Env),
		timeout: cfg.DefaultTimeout,
		root:    root,
		rootID:  dirID(root),
		state:   stateRunning,
		procs:   make(map[*proc]struct{}),
	}, nil
}
