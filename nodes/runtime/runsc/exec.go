package runsc

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// execShell runs the argv ($@) the way a shell does, so that a program not
// found or not runnable exits 127 or 126 with the shell's reason, as on
// every runtime.
const execShell = `exec "$@"`

// Exec runs a command in the sandbox with `runsc exec` as the sandbox's
// user (or spec.User, numeric) and waits for it. A timeout or a cancelled
// ctx kills the command by its pid in the sandbox and is exec_timeout;
// what the command left in the background lives on (that is how a
// long-running process is started on this runtime). A stopped sandbox is
// invalid_state.
func (s *Sandbox) Exec(ctx context.Context, spec runtime.ExecSpec) (runtime.ExecResult, error) {
	if len(spec.Argv) == 0 {
		return runtime.ExecResult{}, errcode.New(errcode.InvalidRequest, "exec: argv is empty")
	}
	uid, gid := s.uid, s.gid
	if spec.User != "" {
		var err error
		if uid, gid, err = parseUser(spec.User); err != nil {
			return runtime.ExecResult{}, err
		}
	}
	// The cwd is resolved on the host, by the workspace's rules (the
	// sandbox's kernel resolves it again, inside its own mount of the
	// workspace, so a swap in between reaches no further than that).
	rel, err := s.ws.ResolveDir(spec.Cwd)
	if err != nil {
		return runtime.ExecResult{}, err
	}
	cwd := path.Join(s.vroot, rel)
	maxOut := spec.MaxOutput
	if maxOut <= 0 {
		maxOut = commands.MaxOutputBytes
	}
	if err := s.beginExec(); err != nil {
		return runtime.ExecResult{}, err
	}
	defer s.endExec()

	pidFile := filepath.Join(s.dir, "exec-"+strconv.FormatInt(time.Now().UnixNano(), 36)+".pid")
	defer os.Remove(pidFile)
	args := []string{"exec", "--user", strconv.Itoa(uid) + ":" + strconv.Itoa(gid), "--cwd", cwd,
		"--internal-pid-file", pidFile}
	for _, kv := range s.environ(spec.Env) {
		args = append(args, "--env", kv)
	}
	args = append(args, s.id, "/bin/sh", "-c", execShell, "sh")
	args = append(args, spec.Argv...)

	rctx := ctx
	if spec.Timeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, spec.Timeout)
		defer cancel()
	}
	// The runsc client lives while the command does; cancelling it must
	// kill the command in the sandbox, which runsc exec does not do by
	// itself. Not derived from rctx, which is what ended.
	cmd := s.rt.command(context.WithoutCancel(ctx), s.root(), args...)
	out := &runtime.CappedBuffer{Max: maxOut}
	errb := &runtime.CappedBuffer{Max: maxOut}
	cmd.Stdout = runtime.TeeOf(out, false, spec.Output)
	cmd.Stderr = runtime.TeeOf(errb, true, spec.Output)
	if err := cmd.Start(); err != nil {
		return runtime.ExecResult{}, errcode.Wrap(errcode.RuntimeError, err, "exec: start runsc")
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var werr error
	timedOut := false
	select {
	case werr = <-done:
	case <-rctx.Done():
		timedOut = true
		s.killExec(context.WithoutCancel(ctx), pidFile)
		werr = <-done
	}
	res := runtime.ExecResult{
		Stdout: out.Bytes(), Stderr: errb.Bytes(),
		StdoutBytes: out.Total(), StderrBytes: errb.Total(),
		StdoutTruncated: out.Truncated(), StderrTruncated: errb.Truncated(),
	}
	if timedOut {
		res.ExitCode = -1
		return res, errcode.New(errcode.ExecTimeout, "exec: the command did not finish in time and was killed")
	}
	var ee *exec.ExitError
	switch {
	case werr == nil:
	case errors.As(werr, &ee):
		res.ExitCode = ee.ExitCode()
	default:
		return res, errcode.Wrap(errcode.RuntimeError, werr, "exec: runsc")
	}
	if res.ExitCode == 128 && !s.containerRuns(context.WithoutCancel(ctx)) {
		// runsc's own failure, not the command's exit.
		return res, errcode.New(errcode.InvalidState, "exec: the sandbox stopped")
	}
	return res, nil
}

// killExec kills the command whose pid in the sandbox pidFile holds (it
// waits for runsc to write it, up to a second; a command that never got
// a pid is ended by the runsc client's kill).
func (s *Sandbox) killExec(ctx context.Context, pidFile string) {
	deadline := time.Now().Add(time.Second)
	for {
		data, err := os.ReadFile(pidFile)
		if pid := strings.TrimSpace(string(data)); err == nil && pid != "" {
			_, _ = s.rt.runsc(ctx, s.root(), "kill", "--pid", pid, s.id, "KILL")
			return
		}
		if time.Now().After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// beginExec counts an exec in flight; a sandbox not running is
// invalid_state.
func (s *Sandbox) beginExec() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shut {
		return errcode.New(errcode.InvalidState, "sandbox is shut down")
	}
	if !s.running {
		return errcode.New(errcode.InvalidState, "sandbox is stopped")
	}
	s.execs++
	return nil
}

func (s *Sandbox) endExec() {
	s.mu.Lock()
	s.execs--
	s.mu.Unlock()
}

// containerRuns asks runsc whether the container runs.
func (s *Sandbox) containerRuns(ctx context.Context) bool {
	out, err := s.rt.runsc(ctx, s.root(), "state", s.id)
	return err == nil && strings.Contains(string(out), `"status": "running"`)
}

// environ is a command's environment: the base, the sandbox's, then the
// command's own, sorted by name.
func (s *Sandbox) environ(extra map[string]string) []string {
	m := map[string]string{
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME": s.vroot,
	}
	for k, v := range s.env {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k+"="+m[k])
	}
	return out
}
