package nodes

import (
	"context"
	"io"
	"io/fs"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// Change attribution (docs/architecture.md, "What every op changed"): exec
// and processes ask their runtime to watch the workspace
// (runtime.ExecSpec.Changes, ProcessSpec.Changes); write, rm and mkdir
// ask it for an exact record of what they did (runtime.FileChanges). A
// runtime that cannot say leaves the record nil, and the finish event has
// none.

// attribution reports whether the node records what ops changed.
func (a *Agent) attribution() bool {
	return a.cfg.ChangeAttribution == nil || *a.cfg.ChangeAttribution
}

// writeFile writes a file and returns what the write changed (nil when
// attribution is off or the runtime cannot say).
func (a *Agent) writeFile(ctx context.Context, s *session, p string, r io.Reader, size int64, mode fs.FileMode) (*commands.Changes, error) {
	sb := s.sandbox()
	if fc, ok := sb.(runtime.FileChanges); ok && a.attribution() {
		return fc.WriteFileChanges(ctx, p, r, size, mode)
	}
	return nil, sb.WriteFileFrom(ctx, p, r, size, mode)
}

// remove removes a path and returns what it removed.
func (a *Agent) remove(ctx context.Context, s *session, p string, recursive bool) (*commands.Changes, error) {
	sb := s.sandbox()
	if fc, ok := sb.(runtime.FileChanges); ok && a.attribution() {
		return fc.RemoveChanges(ctx, p, recursive)
	}
	return nil, sb.Remove(ctx, p, recursive)
}

// mkdir makes a directory and returns the directories it made.
func (a *Agent) mkdir(ctx context.Context, s *session, p string, parents bool) (*commands.Changes, error) {
	sb := s.sandbox()
	if fc, ok := sb.(runtime.FileChanges); ok && a.attribution() {
		return fc.MkdirChanges(ctx, p, parents)
	}
	return nil, sb.Mkdir(ctx, p, parents)
}
