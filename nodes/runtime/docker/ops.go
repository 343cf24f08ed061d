package docker

import (
	"context"
	"errors"
	"io"
	"io/fs"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/supervisor"
)

// sandboxOps are the operations of a sandbox that run either through its
// supervisor or through the Docker API. The exported methods check what
// holds either way, then call the ops that Sandbox.ops picks: that choice
// is made there and nowhere else.
type sandboxOps interface {
	exec(ctx context.Context, spec runtime.ExecSpec, maxOut int) (runtime.ExecResult, error)
	readTo(ctx context.Context, p string, w io.Writer, limit int64) (int64, fs.FileMode, error)
	// writeFrom writes p, which is rel below the workspace root, with mode
	// set.
	writeFrom(ctx context.Context, p, rel string, src io.Reader, size int64, mode fs.FileMode) error
	mkdir(ctx context.Context, p string, parents bool) error
	// remove removes p, which is rel below the workspace root.
	remove(ctx context.Context, p, rel string, recursive bool) error
	list(ctx context.Context, p string) ([]commands.Entry, error)
	startProcess(ctx context.Context, spec runtime.ProcessSpec) (runtime.Process, error)
}

// ops returns how an operation as user ("" for the sandbox's) runs:
// through the supervisor when one is connected now and the operation is
// the sandbox's user's (the supervisor runs as that user and cannot
// switch), else through the Docker API. A supervisor not yet come, or
// lost until the link has it back, leaves its sandbox on the Docker API
// meanwhile.
func (s *Sandbox) ops(user string) sandboxOps {
	if user != "" && user != s.user {
		return apiOps{s}
	}
	c := s.link.current()
	if c == nil {
		return apiOps{s}
	}
	return supOps{s: s, c: supervisor.NewClient(c, s.root)}
}

// apiOps run a sandbox's operations through the Docker API.
type apiOps struct{ s *Sandbox }

var _ sandboxOps = apiOps{}

func (o apiOps) exec(ctx context.Context, spec runtime.ExecSpec, maxOut int) (runtime.ExecResult, error) {
	return o.s.apiExec(ctx, spec, maxOut, false)
}

func (o apiOps) readTo(ctx context.Context, p string, w io.Writer, limit int64) (int64, fs.FileMode, error) {
	return o.s.apiReadTo(ctx, p, w, limit)
}

func (o apiOps) writeFrom(ctx context.Context, _, rel string, src io.Reader, size int64, mode fs.FileMode) error {
	return o.s.apiWriteFrom(ctx, rel, src, size, mode)
}

func (o apiOps) mkdir(ctx context.Context, p string, parents bool) error {
	return o.s.apiMkdir(ctx, p, parents)
}

func (o apiOps) remove(ctx context.Context, _, rel string, recursive bool) error {
	return o.s.apiRemove(ctx, rel, recursive)
}

func (o apiOps) list(ctx context.Context, p string) ([]commands.Entry, error) {
	return o.s.apiList(ctx, p)
}

func (o apiOps) startProcess(ctx context.Context, spec runtime.ProcessSpec) (runtime.Process, error) {
	return o.s.apiStartProcess(ctx, spec)
}

// supOps run a sandbox's operations through its supervisor. A file
// operation the sandbox's user may not do (supervisor.ErrDenied) goes
// through the Docker API instead, whose archive endpoints act with the
// daemon's rights, as file operations always have on this runtime.
type supOps struct {
	s *Sandbox
	c *supervisor.Client
}

var _ sandboxOps = supOps{}

func (o supOps) api() apiOps { return apiOps{o.s} }

func (o supOps) exec(ctx context.Context, spec runtime.ExecSpec, maxOut int) (runtime.ExecResult, error) {
	res, err := o.c.Exec(ctx, spec, maxOut)
	if errcode.Of(err) == errcode.RuntimeError && !o.s.runningNow(ctx) {
		err = errcode.Wrap(errcode.InvalidState, err, "exec: the sandbox stopped")
	}
	return res, err
}

func (o supOps) readTo(ctx context.Context, p string, w io.Writer, limit int64) (int64, fs.FileMode, error) {
	n, mode, err := o.c.ReadTo(ctx, p, w, limit)
	if errors.Is(err, supervisor.ErrDenied) {
		return o.api().readTo(ctx, p, w, limit)
	}
	return n, mode, err
}

func (o supOps) writeFrom(ctx context.Context, p, rel string, src io.Reader, size int64, mode fs.FileMode) error {
	err := o.c.WriteFrom(ctx, p, src, size, mode)
	var d *supervisor.DeniedWrite
	if errors.As(err, &d) {
		return o.api().writeFrom(ctx, p, rel, d.Replay, size, mode)
	}
	return err
}

func (o supOps) mkdir(ctx context.Context, p string, parents bool) error {
	if err := o.c.Mkdir(ctx, p, parents); !errors.Is(err, supervisor.ErrDenied) {
		return err
	}
	return o.api().mkdir(ctx, p, parents)
}

func (o supOps) remove(ctx context.Context, p, rel string, recursive bool) error {
	if err := o.c.Remove(ctx, p, recursive); !errors.Is(err, supervisor.ErrDenied) {
		return err
	}
	return o.api().remove(ctx, p, rel, recursive)
}

func (o supOps) list(ctx context.Context, p string) ([]commands.Entry, error) {
	out, err := o.c.List(ctx, p)
	if errors.Is(err, supervisor.ErrDenied) {
		return o.api().list(ctx, p)
	}
	return out, err
}

func (o supOps) startProcess(ctx context.Context, spec runtime.ProcessSpec) (runtime.Process, error) {
	return o.c.StartProcess(ctx, spec)
}
