package runtime

import (
	"context"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/commands"
)

// Runtime creates sandboxes of one kind.
type Runtime interface {
	// Name is the runtime's name as create specs and node records give it
	// ("local", "docker", "gvisor").
	Name() string
	// Create provisions and starts a sandbox for spec. On error nothing the
	// call made is left behind.
	Create(ctx context.Context, spec Spec) (Sandbox, error)
}

// Spec is what a runtime needs to create a sandbox.
type Spec struct {
	Tenant    string
	SessionID string
	Node      string
	Epoch     uint64
	Image     string
	// Env holds every variable the sandbox's processes get, secret ones
	// included; the runtime never logs it.
	Env         map[string]string
	Labels      map[string]string
	CPUs        float64
	MemoryBytes int64
	// WorkspaceRoot is the workspace directory as the sandbox sees it.
	WorkspaceRoot string
	// Network gives the sandbox a network; without it it has none.
	Network bool
	// User is the user the sandbox's processes run as; empty means the
	// runtime's non-root default.
	User string
	// PidsLimit caps the sandbox's processes; 0 means the runtime's default.
	PidsLimit int64
	// DiskBytes bounds what the sandbox can write (workspace, /tmp and
	// every other writable place); 0 means the runtime's default. A
	// runtime that cannot bound it says so (DiskLimiter).
	DiskBytes int64
}

// The mechanisms a runtime bounds a sandbox's disk with, as DiskLimit
// reports them.
const (
	// DiskStorageOpt is Docker's per-container storage quota (--storage-opt
	// size=; overlay2 on xfs with pquota, btrfs, zfs, devicemapper).
	DiskStorageOpt = "storage-opt"
	// DiskLoopFS is a file system image of the sandbox's own, loop-mounted
	// by the node, holding every writable place of a read-only root.
	DiskLoopFS = "loopfs"
	// DiskNone is no bound at all.
	DiskNone = "none"
)

// DiskLimiter is a sandbox that can say how its disk is bounded: the
// bytes it may write and the mechanism (DiskStorageOpt, DiskLoopFS or
// DiskNone, with bytes 0). A sandbox that does not implement it has no
// bound.
type DiskLimiter interface {
	DiskLimit() (bytes int64, mechanism string)
}

// HostWorkspace is a sandbox whose workspace the node can read as a
// directory of its own host: the local runtime's workspace, a Docker
// sandbox's loopfs mount. A snapshot then scans the directory (never
// following a symlink) instead of exporting a tar of it. ok is false when
// the workspace is not on the host (inside a container's own layer) or not
// reachable now (shut down, a disk not mounted): the caller exports it.
type HostWorkspace interface {
	HostWorkspaceDir() (dir string, ok bool)
}

// HostStager is a sandbox that can stage a new workspace as an empty
// directory of the node's own host, for the node to write (a restore of a
// manifest snapshot writes it there file by file instead of building a
// tar for StageWorkspace): the local runtime; a Docker sandbox on a
// mounted loopfs disk. ok is false (and the caller stages a tar) when the
// workspace is not on the host now.
type HostStager interface {
	StageHost(ctx context.Context) (stage HostStage, ok bool, err error)
}

// HostStage is a staging directory beside the workspace, on its file
// system. The sandbox may reach it (a Docker sandbox's user owns it):
// write through Root only, which never leaves it. Commit swaps what it
// holds in place of the workspace's contents, all or nothing, as a
// StageWorkspace commit does; Abort removes it. Either may be called
// once, and only one of them.
type HostStage struct {
	Root *os.Root
	// Chown: what is written must belong to UID and GID (the sandbox's
	// user), as the runtime's own extraction would make it.
	Chown    bool
	UID, GID int
	Commit   func() error
	Abort    func()
}

// OverlayStager is a sandbox whose workspace can be replaced by an
// overlay of a read-only tree the node keeps (a snapshot restored before)
// over an empty upper directory on the sandbox's own disk, so that a
// restore of that snapshot writes no file (package overlay): the local
// runtime when it may mount; a Docker sandbox on a mounted loopfs disk
// whose workspace mount receives the host's mounts. ok is false (and the
// caller restores another way) when the sandbox cannot.
type OverlayStager interface {
	StageOverlay(ctx context.Context) (stage OverlayStage, ok bool, err error)
}

// OverlayStage is an overlay about to replace a workspace. The tree
// mounted must belong to UID and GID when Chown is set (as a restore's
// files would). Mount replaces the workspace's contents with the overlay
// of lower, all or nothing (an error leaves the workspace as it was and
// one wrapping overlay.ErrUnsupported says that no overlay can be
// mounted here); Abort gives the stage up. Either may be called once,
// and only one of them.
type OverlayStage struct {
	Chown    bool
	UID, GID int
	Mount    func(lower string) error
	Abort    func()
}

// Sandbox is one running (or stopped) sandbox. Its methods are safe for
// concurrent use. Every path argument is a workspace path: relative to the
// workspace root, or absolute under it (see Rel).
type Sandbox interface {
	// Start starts a stopped sandbox; starting a running one is a no-op.
	Start(ctx context.Context) error
	// Stop stops the sandbox's processes and keeps its workspace.
	Stop(ctx context.Context) error
	// Shutdown removes every resource the sandbox holds, its workspace
	// included. It is idempotent.
	Shutdown(ctx context.Context) error
	// Running reports whether the sandbox can execute commands now.
	Running(ctx context.Context) (bool, error)
	// Exec runs a command to completion. A non-zero exit is not an error;
	// a timeout is exec_timeout, after the whole process tree is killed.
	Exec(ctx context.Context, spec ExecSpec) (ExecResult, error)
	// ReadFile returns a regular file's content and permission bits. A file
	// larger than limit is payload_too_large.
	ReadFile(ctx context.Context, path string, limit int64) ([]byte, fs.FileMode, error)
	// ReadFileTo streams a regular file's content to w and returns its
	// size and permission bits; a file over limit is payload_too_large
	// before anything is written.
	ReadFileTo(ctx context.Context, path string, w io.Writer, limit int64) (int64, fs.FileMode, error)
	// WriteFile replaces a file's content (atomically where the runtime
	// can: local renames; Docker's archive copy replaces in place),
	// creating missing parent directories.
	WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error
	// WriteFileFrom is WriteFile with the content streamed from r, which
	// holds exactly size bytes.
	WriteFileFrom(ctx context.Context, path string, r io.Reader, size int64, mode fs.FileMode) error
	// List returns a directory's entries sorted by name (a file lists itself).
	List(ctx context.Context, path string) ([]commands.Entry, error)
	// Remove removes a file or an empty directory, or a whole tree when
	// recursive is set. The workspace root itself cannot be removed.
	Remove(ctx context.Context, path string, recursive bool) error
	// Mkdir makes a directory; with parents it makes missing parents and
	// accepts an existing directory.
	Mkdir(ctx context.Context, path string, parents bool) error
	// ExportWorkspace writes the workspace to w as a tar of
	// workspace-relative members, leaving out what skip names. It streams.
	ExportWorkspace(ctx context.Context, w io.Writer, skip archive.Skip) (archive.Stats, error)
	// ImportWorkspace replaces the workspace's contents with the archive r,
	// extracting only members that pass archive's checks within lim.
	ImportWorkspace(ctx context.Context, r io.Reader, lim archive.Limits) (archive.Stats, error)
}

// ExecSpec is one command to run.
type ExecSpec struct {
	// Argv is the program and its arguments; Argv[0] is looked up in PATH.
	Argv []string
	// Env is added to the sandbox's environment for this command only.
	Env map[string]string
	// Cwd is a workspace path; empty means the workspace root.
	Cwd string
	// User runs the command as another user than the sandbox's; empty
	// means the sandbox's user. Runtimes that cannot switch users refuse a
	// non-empty User with invalid_request.
	User string
	// Timeout bounds the command; zero means no bound beyond ctx.
	Timeout time.Duration
	// MaxOutput caps the bytes kept of stdout and of stderr each (0 or
	// less: commands.MaxOutputBytes).
	MaxOutput int
	// Output, when set, gets all the output as it comes, each piece once,
	// in order per stream (before the cap). It may block: the command's
	// output waits for it.
	Output func(stderr bool, p []byte)
	// Changes asks the runtime to watch what the command changes in the
	// workspace (ExecResult.Changes); a runtime that cannot leaves it nil.
	Changes bool
}

// Tee is a writer that gives what it gets to w and to out.
type Tee struct {
	W      io.Writer
	Stderr bool
	Out    func(stderr bool, p []byte)
}

// Write writes p to W and gives it to Out.
func (t Tee) Write(p []byte) (int, error) {
	if t.Out != nil && len(p) > 0 {
		t.Out(t.Stderr, p)
	}
	return t.W.Write(p)
}

// TeeOf returns w, or a Tee of it when out is set.
func TeeOf(w io.Writer, stderr bool, out func(stderr bool, p []byte)) io.Writer {
	if out == nil {
		return w
	}
	return Tee{W: w, Stderr: stderr, Out: out}
}

// ExecResult is the outcome of a command that ran.
type ExecResult struct {
	ExitCode        int
	Stdout          []byte
	Stderr          []byte
	StdoutBytes     int64
	StderrBytes     int64
	StdoutTruncated bool
	StderrTruncated bool
	// Changes is what the command changed in the workspace, as a watch
	// saw it (ExecSpec.Changes); nil when it was not asked for or the
	// runtime could not watch (the Docker runtime without its supervisor).
	Changes *commands.Changes
}

// Found is a sandbox a runtime made before the node agent restarted, as
// FindSandboxes reports it.
type Found struct {
	Tenant    string
	SessionID string
	Epoch     uint64
	// Created is when the runtime made the sandbox.
	Created time.Time
	// Running reports whether its processes run now.
	Running bool
	// Env is the sandbox's environment (secret values included), so that the
	// node can rebuild its redaction of secret values.
	Env map[string]string
	// Sandbox drives it, exactly as the one Create returned did.
	Sandbox Sandbox
}

// StageFunc extracts an archive beside a sandbox's workspace and returns
// what it holds, the commit that swaps it in and the abort that drops it
// (the StageWorkspace method of both built-in runtimes).
type StageFunc func(ctx context.Context, r io.Reader, lim archive.Limits) (archive.Stats, func() error, func(), error)

// ImportStaged is ImportWorkspace through a runtime's staging: stage,
// then commit, so a bad archive or a tree that cannot be emptied leaves
// the workspace as it was.
func ImportStaged(ctx context.Context, stage StageFunc, r io.Reader, lim archive.Limits) (archive.Stats, error) {
	st, commit, _, err := stage(ctx, r, lim)
	if err != nil {
		return st, err
	}
	if err := commit(); err != nil {
		return archive.Stats{}, err
	}
	return st, nil
}
