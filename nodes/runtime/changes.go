package runtime

import (
	"context"
	"io"
	"io/fs"

	"github.com/paddock-dev/paddock/commands"
)

// FileChanges is a sandbox whose file operations can say exactly what
// they changed in the workspace (commands.Changes with Observed
// "exact"): the write, rm and mkdir of the node's change attribution.
// Each is its plain operation (Sandbox's WriteFileFrom, Remove, Mkdir)
// with the same errors; the record is nil when the runtime could not
// tell (the Docker runtime when its supervisor is absent or refused).
type FileChanges interface {
	// WriteFileChanges records the file created (with the parents it
	// made) or modified, and size as BytesWritten.
	WriteFileChanges(ctx context.Context, path string, r io.Reader, size int64, mode fs.FileMode) (*commands.Changes, error)
	// RemoveChanges records every path removed.
	RemoveChanges(ctx context.Context, path string, recursive bool) (*commands.Changes, error)
	// MkdirChanges records every directory made.
	MkdirChanges(ctx context.Context, path string, parents bool) (*commands.Changes, error)
}

// ChangeList builds an exact commands.Changes path by path.
type ChangeList struct{ c commands.Changes }

// Add records path as changed ("created", "modified" or "removed").
func (l *ChangeList) Add(path, change string) {
	switch change {
	case "created":
		l.c.Created++
	case "modified":
		l.c.Modified++
	case "removed":
		l.c.Removed++
	}
	if len(l.c.Paths) < commands.MaxChangedPaths {
		l.c.Paths = append(l.c.Paths, commands.ChangedPath{Path: path, Change: change})
	} else {
		l.c.Truncated = true
	}
}

// Changes returns the record, with bytes written and Observed exact.
func (l *ChangeList) Changes(bytesWritten int64) *commands.Changes {
	c := l.c
	c.BytesWritten = bytesWritten
	c.Observed = commands.ObservedExact
	return &c
}

// MarkTruncated says the record is a floor (a walk that failed part of
// the way).
func (l *ChangeList) MarkTruncated() { l.c.Truncated = true }
