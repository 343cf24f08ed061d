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

var _ runtime.FileChanges = (*Sandbox)(nil)

// WriteFileChanges is WriteFileFrom that says what it changed, as the
// supervisor reports it (it stats the file before writing). Through the
// Docker API (no supervisor, or one the file system refused) the record
// is nil.
func (s *Sandbox) WriteFileChanges(ctx context.Context, p string, src io.Reader, size int64, mode fs.FileMode) (*commands.Changes, error) {
	rel, err := runtime.Rel(s.root, p)
	if err != nil {
		return nil, err
	}
	if rel == "." {
		return nil, errcode.New(errcode.InvalidPath, "write: the workspace root is not a file")
	}
	if mode == 0 {
		mode = 0o644
	}
	o, ok := s.ops("").(supOps)
	if !ok {
		return nil, s.ops("").writeFrom(ctx, p, rel, src, size, mode)
	}
	c, err := o.c.WriteFromChanges(ctx, p, src, size, mode, true)
	var d *supervisor.DeniedWrite
	if errors.As(err, &d) {
		return nil, o.api().writeFrom(ctx, p, rel, d.Replay, size, mode)
	}
	return c, err
}

// MkdirChanges is Mkdir that says which directories it made, as the
// supervisor reports them (nil through the Docker API).
func (s *Sandbox) MkdirChanges(ctx context.Context, p string, parents bool) (*commands.Changes, error) {
	o, ok := s.ops("").(supOps)
	if !ok {
		return nil, s.ops("").mkdir(ctx, p, parents)
	}
	c, err := o.c.MkdirChanges(ctx, p, parents)
	if errors.Is(err, supervisor.ErrDenied) {
		return nil, o.api().mkdir(ctx, p, parents)
	}
	return c, err
}

// RemoveChanges is Remove that says what it removed, as the supervisor
// reports it (nil through the Docker API).
func (s *Sandbox) RemoveChanges(ctx context.Context, p string, recursive bool) (*commands.Changes, error) {
	rel, err := runtime.Rel(s.root, p)
	if err != nil {
		return nil, err
	}
	if rel == "." {
		return nil, errcode.New(errcode.InvalidPath, "rm: the workspace root cannot be removed")
	}
	o, ok := s.ops("").(supOps)
	if !ok {
		return nil, s.ops("").remove(ctx, p, rel, recursive)
	}
	c, err := o.c.RemoveChanges(ctx, p, recursive)
	if errors.Is(err, supervisor.ErrDenied) {
		return nil, o.api().remove(ctx, p, rel, recursive)
	}
	return c, err
}
