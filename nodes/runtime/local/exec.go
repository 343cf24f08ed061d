package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// basePath is the PATH of every command unless the sandbox or exec env
// sets one.
const basePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// drainDelay bounds how long output is still read once a command and its
// process group are dead: a descendant that left the group (setsid) may
// hold the pipes open for ever.
const drainDelay = 2 * time.Second

// Exec runs a command in the workspace, in its own process group, with a
// minimal environment (PATH, HOME as the workspace, PWD), the sandbox's
// env and spec.Env over it; the node's environment is not inherited, and
// stdin is empty. When the command exits, whatever it left running in its
// process group is killed.
//
// A non-zero exit is a result, not an error; a command killed by a signal
// exits 128+signal; a program that is not found exits 127 and one that
// cannot be executed 126, as in a shell. Errors: invalid_state unless
// running (or if the sandbox is stopped meanwhile), invalid_path for a cwd
// outside the workspace, not_found for a missing cwd, invalid_request for a
// cwd that is not a directory, exec_timeout when the timeout killed the
// process group, and ctx's error (coded unavailable) when ctx ended first.
func (s *Sandbox) Exec(ctx context.Context, spec runtime.ExecSpec) (runtime.ExecResult, error) {
	if len(spec.Argv) == 0 {
		return runtime.ExecResult{}, errcode.New(errcode.InvalidRequest, "exec: empty argv")
	}
	if spec.User != "" {
		return runtime.ExecResult{}, errcode.New(errcode.InvalidRequest, "the local runtime runs commands as the node's user; it cannot run as %q", spec.User)
	}
	if err := s.checkRunning(); err != nil {
		return runtime.ExecResult{}, err
	}
	cwd, err := s.cwd(spec.Cwd)
	if err != nil {
		return runtime.ExecResult{}, err
	}
	env := s.environ(spec.Env, cwd)
	prog, ok := lookPath(spec.Argv[0], env)
	if !ok {
		return notRunnable(spec.Argv[0], 127, "command not found"), nil
	}

	timeout := spec.Timeout
	if timeout <= 0 {
		timeout = s.timeout
	}
	maxOut := spec.MaxOutput
	if maxOut <= 0 {
		maxOut = commands.MaxOutputBytes
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// The command writes straight into pipes this function reads, rather
	// than into exec's own copying goroutines: Wait then returns as soon as
	// the command exits, and its leftovers can be killed before draining.
	outR, outW, err := os.Pipe()
	if err != nil {
		return runtime.ExecResult{}, errcode.Wrap(errcode.RuntimeError, err, "exec: pipe")
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return runtime.ExecResult{}, errcode.Wrap(errcode.RuntimeError, err, "exec: pipe")
	}
	defer errR.Close()

	var killed atomic.Bool
	cmd := exec.CommandContext(tctx, prog, spec.Argv[1:]...)
	cmd.Args[0] = spec.Argv[0]
	cmd.Err = nil // exec looked in the node's PATH; lookPath used the sandbox's
	cmd.Dir = cwd
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		killed.Store(true)
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = drainDelay // backstop should the group kill fail

	endChanges := s.beginChanges(spec.Changes)
	p, err := s.start(cmd)
	outW.Close()
	errW.Close()
	if err != nil {
		endChanges(ctx)
		var se *errcode.Error
		if errors.As(err, &se) {
			return runtime.ExecResult{}, err
		}
		// The cwd vanished or changed after it was checked; the error
		// names its host path, which stays in the cause.
		var pe *fs.PathError
		if errors.As(err, &pe) && pe.Op == "chdir" {
			return runtime.ExecResult{}, errcode.Wrap(errcode.NotFound, err, fmt.Sprintf("exec: cwd %q cannot be entered", spec.Cwd))
		}
		if errors.Is(err, fs.ErrNotExist) {
			return notRunnable(spec.Argv[0], 127, "command not found"), nil
		}
		return notRunnable(spec.Argv[0], 126, err.Error()), nil
	}

	stdout := &runtime.CappedBuffer{Max: maxOut}
	stderr := &runtime.CappedBuffer{Max: maxOut}
	var drain sync.WaitGroup
	drain.Go(func() { _, _ = io.Copy(runtime.TeeOf(stdout, false, spec.Output), outR) })
	drain.Go(func() { _, _ = io.Copy(runtime.TeeOf(stderr, true, spec.Output), errR) })

	werr := cmd.Wait()
	// Background children would hold the sandbox and the pipes: kill the
	// group whatever happened, then drain what is left, within a bound.
	_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
	deadline := time.Now().Add(drainDelay)
	_ = outR.SetReadDeadline(deadline)
	_ = errR.SetReadDeadline(deadline)
	drain.Wait()
	stopped := s.finish(p)
	changed := endChanges(ctx)

	res := runtime.ExecResult{
		ExitCode:        exitCode(cmd.ProcessState),
		Stdout:          stdout.Bytes(),
		Stderr:          stderr.Bytes(),
		StdoutBytes:     stdout.Total(),
		StderrBytes:     stderr.Total(),
		StdoutTruncated: stdout.Truncated(),
		StderrTruncated: stderr.Truncated(),
		Changes:         changed,
	}
	switch {
	case killed.Load() && ctx.Err() == nil && errors.Is(tctx.Err(), context.DeadlineExceeded):
		return res, errcode.New(errcode.ExecTimeout, "command killed after its timeout of %s", timeout)
	case killed.Load() && ctx.Err() != nil:
		return res, errcode.Wrap(errcode.Unavailable, ctx.Err(), "exec cancelled")
	case stopped:
		return res, errcode.New(errcode.InvalidState, "exec: the sandbox stopped while the command ran")
	}
	var exitErr *exec.ExitError
	if werr != nil && !errors.As(werr, &exitErr) && !errors.Is(werr, exec.ErrWaitDelay) {
		return res, errcode.Wrap(errcode.RuntimeError, werr, "exec")
	}
	return res, nil
}

// checkRunning returns invalid_state unless the sandbox is running.
func (s *Sandbox) checkRunning() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateRunning {
		return errcode.New(errcode.InvalidState, "exec: the sandbox is not running")
	}
	return nil
}

// start starts cmd if the sandbox is running and tracks it, so that Stop
// and Shutdown can kill it. The check and the start are one step under
// s.mu, so a command cannot start after Stop has collected the others.
func (s *Sandbox) start(cmd *exec.Cmd) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateRunning {
		return nil, errcode.New(errcode.InvalidState, "exec: the sandbox is not running")
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{pgid: cmd.Process.Pid, done: make(chan struct{})}
	s.procs[p] = struct{}{}
	return p, nil
}

// finish forgets a command that is done and reports whether the sandbox
// left the running state while it ran.
func (s *Sandbox) finish(p *proc) (stopped bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.procs, p)
	close(p.done)
	return s.state != stateRunning
}

// ResolveDir resolves a workspace path as an exec's cwd is resolved (the
// symlink rule; a missing directory not_found, an escape invalid_path, a
// file invalid_request) and returns it relative to the workspace, free of
// symlinks: for a runtime that runs commands elsewhere over this
// workspace (the runsc runtime's bind mount of it).
func (s *Sandbox) ResolveDir(p string) (string, error) {
	dir, err := s.cwd(p)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(s.dir, dir)
	if err != nil {
		return "", errcode.Wrap(errcode.Internal, err, "resolve a directory")
	}
	return filepath.ToSlash(rel), nil
}

// cwd resolves a workspace path to the host directory a command runs in.
func (s *Sandbox) cwd(p string) (string, error) {
	root, rel, err := s.resolve(p)
	if err != nil {
		return "", err
	}
	fi, err := root.Stat(rel) // follows symlinks, refusing any that escape
	if err != nil {
		return "", s.fsErr(err, rel, "exec cwd")
	}
	if !fi.IsDir() {
		return "", errcode.New(errcode.InvalidRequest, "exec: cwd %s is not a directory", rel)
	}
	// The kernel resolves the directory again when the command starts; use
	// the resolved path, and refuse it should it have moved outside since.
	dir, err := filepath.EvalSymlinks(filepath.Join(s.dir, filepath.FromSlash(rel)))
	if err != nil {
		return "", s.fsErr(err, rel, "exec cwd")
	}
	if r, err := filepath.Rel(s.dir, dir); err != nil || !filepath.IsLocal(r) {
		return "", errcode.New(errcode.InvalidPath, "exec: cwd %s leads outside the workspace", rel)
	}
	return dir, nil
}

// environ is a command's environment: the base, the sandbox's env, then
// the command's own, sorted by name.
func (s *Sandbox) environ(extra map[string]string, cwd string) []string {
	env := map[string]string{"PATH": basePath, "HOME": s.dir, "PWD": cwd}
	for k, v := range s.env {
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// lookPath resolves a bare program name in the command's PATH (not the
// node's). A name with a slash is used as it is, relative to the cwd.
func lookPath(name string, env []string) (string, bool) {
	if filepath.Base(name) != name {
		return name, true
	}
	pathVar := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	for _, dir := range filepath.SplitList(pathVar) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue // a relative PATH entry would depend on the cwd
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}

// notRunnable is the result of a command that could not start, as a shell
// reports it.
func notRunnable(name string, code int, why string) runtime.ExecResult {
	msg := fmt.Sprintf("%s: %s\n", name, why)
	return runtime.ExecResult{ExitCode: code, Stderr: []byte(msg), StderrBytes: int64(len(msg))}
}

// exitCode is the command's exit status, or 128+signal when a signal
// killed it.
func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
