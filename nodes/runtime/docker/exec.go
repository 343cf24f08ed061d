package docker

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/errdefs"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// markerVar marks every process of one exec, so that a timeout can kill
// the command's whole tree.
const markerVar = "PADDOCK_EXEC"

// Exec runs a command in the container to completion. A non-zero exit is
// not an error; a timeout kills the command's processes and is
// exec_timeout.
func (s *Sandbox) Exec(ctx context.Context, spec runtime.ExecSpec) (runtime.ExecResult, error) {
	if len(spec.Argv) == 0 {
		return runtime.ExecResult{}, errcode.New(errcode.InvalidRequest, "exec: empty argv")
	}
	if err := s.checkNotGone("exec"); err != nil {
		return runtime.ExecResult{}, err
	}
	cwd := s.root
	if spec.Cwd != "" {
		r, err := s.resolve(ctx, spec.Cwd)
		if err != nil {
			return runtime.ExecResult{}, err
		}
		if r.missing != "" {
			return runtime.ExecResult{}, errcode.New(errcode.NotFound, "exec: cwd %s does not exist", spec.Cwd)
		}
		if !r.stat.Mode.IsDir() {
			return runtime.ExecResult{}, errcode.New(errcode.InvalidRequest, "exec: cwd %s is not a directory", spec.Cwd)
		}
		cwd = r.abs
	}
	marker := uuid.NewString()
	env := make([]string, 0, len(spec.Env)+1)
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		env = append(env, k+"="+spec.Env[k])
	}
	env = append(env, markerVar+"="+marker)
	user := spec.User
	if user == "" {
		user = s.user
	}
	created, err := s.r.cli.ContainerExecCreate(ctx, s.id, container.ExecOptions{
		User: user, AttachStdout: true, AttachStderr: true, Env: env, WorkingDir: cwd, Cmd: spec.Argv,
	})
	if err != nil {
		return runtime.ExecResult{}, s.execErr(err)
	}
	att, err := s.r.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return runtime.ExecResult{}, s.execErr(err)
	}
	defer att.Close()

	maxOut := spec.MaxOutput
	if maxOut <= 0 {
		maxOut = commands.MaxOutputBytes
	}
	stdout := &runtime.CappedBuffer{Max: maxOut}
	stderr := &runtime.CappedBuffer{Max: maxOut}
	copied := make(chan error, 1)
	go func() { // ends when the stream ends or att is closed below
		_, err := stdcopy.StdCopy(stdout, stderr, att.Reader)
		copied <- err
	}()
	tctx, cancel := ctx, context.CancelFunc(func() {})
	if spec.Timeout > 0 {
		tctx, cancel = context.WithTimeout(ctx, spec.Timeout)
	}
	defer cancel()
	select {
	case <-copied:
	case <-tctx.Done():
		s.kill(user, marker)
		att.Close()
		<-copied
		if ctx.Err() != nil {
			return runtime.ExecResult{}, errcode.Wrap(errcode.Unavailable, ctx.Err(), "exec cancelled; its processes were killed")
		}
		return runtime.ExecResult{}, errcode.New(errcode.ExecTimeout, "command killed after its timeout of %s", spec.Timeout)
	}
	ins, err := s.r.cli.ContainerExecInspect(ctx, created.ID)
	if err != nil {
		return runtime.ExecResult{}, s.r.wrap(err, "inspect exec")
	}
	res := runtime.ExecResult{
		ExitCode:        ins.ExitCode,
		Stdout:          stdout.Bytes(),
		Stderr:          stderr.Bytes(),
		StdoutBytes:     stdout.Total(),
		StderrBytes:     stderr.Total(),
		StdoutTruncated: stdout.Truncated(),
		StderrTruncated: stderr.Truncated(),
	}
	if res.ExitCode == 126 || res.ExitCode == 127 {
		// runc reports a missing program as 126 with its own message; say
		// what a shell says, with a shell's code.
		if m := string(res.Stdout) + string(res.Stderr); strings.Contains(m, "executable file not found") || strings.Contains(m, "no such file or directory") && strings.Contains(m, "OCI runtime exec failed") {
			res.ExitCode = 127
			res.Stdout, res.StdoutBytes = nil, 0
			msg := fmt.Sprintf("%s: not found\n", spec.Argv[0])
			res.Stderr, res.StderrBytes = []byte(msg), int64(len(msg))
		}
	}
	return res, nil
}

// execErr maps an exec create/attach failure.
func (s *Sandbox) execErr(err error) error {
	if errdefs.IsConflict(err) || errdefs.IsNotFound(err) {
		return errcode.New(errcode.InvalidState, "exec: sandbox is not running")
	}
	return s.r.wrap(err, "exec")
}

// killScript kills, as the command's own user, every process whose
// environment carries the marker, in rounds until none is left (a tree can
// fork while it is being killed).
const killScript = `m="$1"; for round in 1 2 3 4 5; do
  found=
  for d in /proc/[0-9]*; do
    if tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qx "$m"; then
      kill -9 "${d#/proc/}" 2>/dev/null; found=1
    fi
  done
  [ -z "$found" ] && exit 0
done`

// kill kills the processes of the exec marked with marker. It runs under
// its own bound: the exec's context may be done.
func (s *Sandbox) kill(user, marker string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	created, err := s.r.cli.ContainerExecCreate(ctx, s.id, container.ExecOptions{
		User: user, Cmd: []string{"/bin/sh", "-c", killScript, "paddock-kill", markerVar + "=" + marker},
	})
	if err != nil {
		return // the container is gone or stopped: so are its processes
	}
	att, err := s.r.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return
	}
	defer att.Close()
	// Wait for the killer to finish: its stream ends when it exits.
	_, _ = io.Copy(io.Discard, att.Reader)
}
