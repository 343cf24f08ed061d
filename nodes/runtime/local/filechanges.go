package local

import (
	"context"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

var _ runtime.FileChanges = (*Sandbox)(nil)

// WriteFileChanges is WriteFileFrom that says what it changed: the
// parent directories it made and the file, created or modified (as an
// Lstat found it just before), with size bytes written.
func (s *Sandbox) WriteFileChanges(ctx context.Context, p string, r io.Reader, size int64, mode fs.FileMode) (*commands.Changes, error) {
	root, rel, err := s.resolve(p)
	if err != nil {
		return nil, err
	}
	var made []string
	existed := false
	if rel != "." {
		_, lerr := root.Lstat(rel)
		existed = lerr == nil
		made = missingDirs(root, path.Dir(rel))
	}
	if err := s.WriteFileFrom(ctx, p, r, size, mode); err != nil {
		return nil, err
	}
	var l runtime.ChangeList
	for _, d := range made {
		l.Add(d, "created")
	}
	if existed {
		l.Add(rel, "modified")
	} else {
		l.Add(rel, "created")
	}
	return l.Changes(size), nil
}

// MkdirChanges is Mkdir that says which directories it made (those
// missing just before).
func (s *Sandbox) MkdirChanges(ctx context.Context, p string, parents bool) (*commands.Changes, error) {
	root, rel, err := s.resolve(p)
	if err != nil {
		return nil, err
	}
	made := []string{rel}
	if parents {
		made = missingDirs(root, rel)
	}
	if err := s.Mkdir(ctx, p, parents); err != nil {
		return nil, err
	}
	var l runtime.ChangeList
	for _, d := range made {
		l.Add(d, "created")
	}
	return l.Changes(0), nil
}

// RemoveChanges is Remove that says what it removed: the path, and for a
// recursive removal every path below it, as a walk (which follows no
// symlink) found them just before the removal.
func (s *Sandbox) RemoveChanges(ctx context.Context, p string, recursive bool) (*commands.Changes, error) {
	root, rel, err := s.resolve(p)
	if err != nil {
		return nil, err
	}
	var l runtime.ChangeList
	if recursive && rel != "." {
		werr := fs.WalkDir(root.FS(), rel, func(q string, d fs.DirEntry, err error) error {
			if err != nil {
				if q != rel {
					l.MarkTruncated()
				}
				return nil
			}
			l.Add(q, "removed")
			return nil
		})
		if werr != nil {
			l.MarkTruncated()
		}
	} else {
		l.Add(rel, "removed")
	}
	if err := s.Remove(ctx, p, recursive); err != nil {
		return nil, err
	}
	return l.Changes(0), nil
}

// missingDirs returns dir and those of its parents that do not exist,
// outermost first.
func missingDirs(root *os.Root, dir string) []string {
	var out []string
	for d := dir; d != "." && d != "/" && d != ""; d = path.Dir(d) {
		if _, err := root.Lstat(d); err == nil {
			break
		}
		out = append(out, d)
	}
	slices.Reverse(out)
	return out
}
