package docker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/errdefs"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// killWait bounds how long a timed-out exec waits for its wrapper to
// report its pid, and how long the kill itself may take.
const killWait = 20 * time.Second

// Exec runs a command in the container to completion, through the
// wrapper (see wrapper.go): the command runs in a session of its own,
// whatever it leaves running in that session when it exits is killed, and
// a timeout or a cancelled ctx kills the whole tree.
//
// A non-zero exit is a result, not an error; a program that is not found
// exits 127 and one that cannot be executed 126, as the shell reports them.
// Errors: invalid_request for an empty argv or a bad env name, invalid_path
// for a cwd outside the workspace, not_found for a missing cwd,
// invalid_request for a cwd that is not a directory or a user the image
// does not know, invalid_state unless the container runs (or when it
// stopped while the command ran), exec_timeout after the timeout killed
// the tree (with the output captured so far), unavailable (wrapping ctx's
// error) when ctx ended first, runtime_error when the engine fails.
func (s *Sandbox) Exec(ctx context.Context, spec runtime.ExecSpec) (runtime.ExecResult, error) {
	return s.exec(ctx, spec, false)
}

// exec is Exec; held says that the caller holds s.life, else exec holds it
// shared while it creates and starts the command, so that the command never
// starts in a container that Remove started only for itself.
func (s *Sandbox) exec(ctx context.Context, spec runtime.ExecSpec, held bool) (runtime.ExecResult, error) {
	if len(spec.Argv) == 0 {
		return runtime.ExecResult{}, errcode.New(errcode.InvalidRequest, "exec: empty argv")
	}
	if err := checkEnv(spec.Env); err != nil {
		return runtime.ExecResult{}, err
	}
	if err := s.checkNotGone("exec"); err != nil {
		return runtime.ExecResult{}, err
	}
	maxOut := spec.MaxOutput
	if maxOut <= 0 {
		maxOut = commands.MaxOutputBytes
	}
	if held {
		// The caller holds s.life around Docker API calls of its own
		// (rmStopped): the command goes the same way.
		return s.apiExec(ctx, spec, maxOut, true)
	}
	return s.ops(spec.User).exec(ctx, spec, maxOut)
}

// apiExec is exec through the Docker API (see exec for held).
func (s *Sandbox) apiExec(ctx context.Context, spec runtime.ExecSpec, maxOut int, held bool) (runtime.ExecResult, error) {
	cwd, err := s.cwd(ctx, spec.Cwd)
	if err != nil {
		return runtime.ExecResult{}, err
	}
	env := s.execEnv(spec.Env)
	user := spec.User
	if user == "" {
		user = s.user
	}
	if !held {
		s.life.RLock()
	}
	created, err := s.r.cli.ContainerExecCreate(ctx, s.id, container.ExecOptions{
		User: user, AttachStdout: true, AttachStderr: true, Env: env, WorkingDir: cwd,
		Cmd: append([]string{"/bin/sh", "-c", wrapperScript, "paddock-exec"}, spec.Argv...),
	})
	var att types.HijackedResponse
	if err == nil {
		att, err = s.r.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{}) // starts it
	}
	if !held {
		s.life.RUnlock()
	}
	if err != nil {
		return runtime.ExecResult{}, s.execErr(err)
	}
	defer att.Close()

	stdout := &runtime.CappedBuffer{Max: maxOut}
	stderr := &runtime.CappedBuffer{Max: maxOut}
	hdr := newPidHeader(runtime.TeeOf(stdout, false, spec.Output))
	copied := make(chan struct{})
	go func() { // ends when the stream ends or att is closed below
		defer close(copied)
		_, _ = stdcopy.StdCopy(hdr, runtime.TeeOf(stderr, true, spec.Output), att.Reader)
		hdr.end()
	}()
	tctx, cancel := ctx, context.CancelFunc(func() {})
	if spec.Timeout > 0 {
		tctx, cancel = context.WithTimeout(ctx, spec.Timeout)
	}
	defer cancel()

	interrupted := false
	var killErr error
	select {
	case <-copied:
	case <-tctx.Done():
		interrupted = true
		killErr = s.stopTree(user, hdr)
		att.Close()
		<-copied
	}
	res := runtime.ExecResult{
		Stdout: stdout.Bytes(), Stderr: stderr.Bytes(),
		StdoutBytes: stdout.Total(), StderrBytes: stderr.Total(),
		StdoutTruncated: stdout.Truncated(), StderrTruncated: stderr.Truncated(),
	}
	if interrupted {
		// Why a kill failed (the engine's text) stays in the cause.
		killed, cause := "its processes were killed", error(nil)
		if killErr != nil {
			killed, cause = "its processes could not all be killed", killErr
		}
		if ctx.Err() != nil {
			return res, errcode.Wrap(errcode.Unavailable, errors.Join(ctx.Err(), cause), "exec cancelled; "+killed)
		}
		return res, errcode.Wrap(errcode.ExecTimeout, cause, fmt.Sprintf("command ran past its timeout of %s; %s", spec.Timeout, killed))
	}
	if hdr.pid() == 0 {
		return res, s.notStarted(ctx, spec.User, res)
	}
	code, err := s.exitCode(ctx, created.ID)
	if err != nil {
		return res, err
	}
	res.ExitCode = code
	if code != 0 && !s.runningNow(ctx) {
		return res, errcode.New(errcode.InvalidState, "exec: the sandbox stopped while the command ran")
	}
	return res, nil
}

// cwd resolves an exec's working directory inside the workspace. As on the
// local runtime, a stopped sandbox is invalid_state before a bad cwd is
// anything else (checked only when the cwd is bad: it costs an inspect).
func (s *Sandbox) cwd(ctx context.Context, p string) (string, error) {
	if p == "" {
		return s.root, nil
	}
	r, err := s.resolve(ctx, p, true)
	switch {
	case err == nil && r.missing != "":
		err = errcode.New(errcode.NotFound, "exec: cwd %s does not exist", r.rel)
	case err == nil && !r.stat.Mode.IsDir():
		err = errcode.New(errcode.InvalidRequest, "exec: cwd %s is not a directory", r.rel)
	case err == nil:
		return r.abs, nil
	}
	if c := errcode.Of(err); c != errcode.InvalidState && c != errcode.Unavailable && !s.runningNow(ctx) {
		return "", errcode.New(errcode.InvalidState, "exec: the sandbox is not running")
	}
	return "", err
}

// checkEnv refuses variable names Docker would misread or echo back in an
// error with their value (values may be secret: they never go into one).
func checkEnv(env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			// What follows a '=' in a name may be a value put there by
			// mistake: only the part before it is named.
			name, _, _ := strings.Cut(k, "=")
			name, _, _ = strings.Cut(name, "\x00")
			return errcode.New(errcode.InvalidRequest, "env: variable %q... has an empty or malformed name (=, NUL), or a NUL byte in its value", name)
		}
	}
	return nil
}

// exitCode returns an exec's exit code. The stream can end a moment before
// the engine records the exit, so a still-running exec is asked again,
// within a bound.
func (s *Sandbox) exitCode(ctx context.Context, execID string) (int, error) {
	deadline := time.Now().Add(5 * time.Second)
	for wait := time.Millisecond; ; wait *= 2 {
		ins, err := s.r.cli.ContainerExecInspect(ctx, execID)
		if errdefs.IsNotFound(err) || errdefs.IsConflict(err) {
			return 0, errcode.New(errcode.InvalidState, "exec: the sandbox was removed while the command ran")
		}
		if err != nil {
			return 0, s.r.wrap(err, "inspect exec")
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		if time.Now().After(deadline) {
			return 0, errcode.New(errcode.RuntimeError, "exec: the engine still reports the command running after its output ended")
		}
		select {
		case <-ctx.Done():
			return 0, errcode.Wrap(errcode.Unavailable, ctx.Err(), "exec cancelled")
		case <-time.After(wait): // backoff of a poll, not synchronisation
		}
	}
}

// runningNow reports whether the container runs (false when it cannot
// tell).
func (s *Sandbox) runningNow(ctx context.Context) bool {
	ok, err := s.Running(ctx)
	return err == nil && ok
}

// notStarted explains an exec whose wrapper never reported its pid: the
// engine could not start /bin/sh (a user the image does not know, no
// /bin/sh in the image, no pid left under the limit) or the container
// stopped first. The engine's message (never the env) goes into the
// error's cause, for logs; the message names only the user asked for.
func (s *Sandbox) notStarted(ctx context.Context, user string, res runtime.ExecResult) error {
	if !s.runningNow(ctx) {
		return errcode.New(errcode.InvalidState, "exec: the sandbox is not running")
	}
	msg := strings.TrimSpace(string(res.Stdout) + string(res.Stderr))
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	cause := errors.New(msg)
	if user != "" && (strings.Contains(msg, "unable to find user") || strings.Contains(msg, "unable to find group")) {
		return errcode.Wrap(errcode.InvalidRequest, cause, fmt.Sprintf("exec: the image does not know user %q", user))
	}
	return errcode.Wrap(errcode.RuntimeError, cause, "exec: the container could not start /bin/sh")
}

// execErr maps an exec create/attach failure.
func (s *Sandbox) execErr(err error) error {
	if errdefs.IsConflict(err) || errdefs.IsNotFound(err) {
		return errcode.New(errcode.InvalidState, "exec: the sandbox is not running")
	}
	return s.r.wrap(err, "exec")
}

// stopTree kills the process tree of a timed-out or cancelled exec, as the
// exec's own user (the wrapper's session, see killScript), and returns nil
// once it is dead. It waits (within killWait) for the wrapper to report its
// pid if it has not yet. A kill that cannot start (the pids limit is
// exhausted) is tried again until killWait; the last failure is returned.
func (s *Sandbox) stopTree(user string, hdr *pidHeader) error {
	// The exec's ctx is done: the kill runs under its own bound.
	ctx, cancel := context.WithTimeout(context.Background(), killWait)
	defer cancel()
	select {
	case <-hdr.known:
	case <-ctx.Done():
	}
	pid := hdr.pid()
	if pid == 0 {
		return nil // the wrapper never started: nothing to kill
	}
	var last error
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		last = s.killSession(ctx, user, pid)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(wait): // backoff before the next attempt
		}
	}
}

// killSession runs killScript for the session of pid in the container.
func (s *Sandbox) killSession(ctx context.Context, user string, pid int) error {
	return s.runHelper(ctx, user, "killed", killScript, "paddock-kill", strconv.Itoa(pid))
}

// runHelper runs one of the wrapper's shell scripts in the container as
// user (sh -c script args...) and returns nil when it printed done. A
// container that stopped or is gone has nothing left to act on: nil too.
func (s *Sandbox) runHelper(ctx context.Context, user, done, script string, args ...string) error {
	created, err := s.r.cli.ContainerExecCreate(ctx, s.id, container.ExecOptions{
		User: user, AttachStdout: true, AttachStderr: true,
		Cmd: append([]string{"/bin/sh", "-c", script}, args...),
	})
	if errdefs.IsConflict(err) || errdefs.IsNotFound(err) {
		return nil // the container stopped or is gone: so are its processes
	}
	if err != nil {
		return err
	}
	att, err := s.r.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return err
	}
	defer att.Close()
	out := &runtime.CappedBuffer{Max: 512}
	_, _ = stdcopy.StdCopy(out, out, att.Reader)
	if got := strings.TrimSpace(string(out.Bytes())); got != done {
		return errors.New(args[0] + " did not run: " + got)
	}
	return nil
}

// execEnv is the environment an exec through the Docker API adds to the
// container's: a claimed pool container's session variables (its
// container was made without them), then the exec's own.
func (s *Sandbox) execEnv(extra map[string]string) []string {
	all := extra
	if len(s.env) > 0 {
		all = maps.Clone(s.env)
		maps.Copy(all, extra)
	}
	env := make([]string, 0, len(all)+1)
	for _, k := range slices.Sorted(maps.Keys(all)) {
		env = append(env, k+"="+all[k])
	}
	return env
}
