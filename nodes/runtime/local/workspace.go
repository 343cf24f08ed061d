package local

import (
	"context"
	"io"
	"io/fs"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/errcode"
)

// ExportWorkspace writes the workspace directory as a tar of
// workspace-relative members, through the sandbox's os.Root.
func (s *Sandbox) ExportWorkspace(ctx context.Context, w io.Writer, skip archive.Skip) (archive.Stats, error) {
	root, err := s.fsRoot()
	if err != nil {
		return archive.Stats{}, err
	}
	st, err := archive.WriteDir(w, root, skip)
	if err != nil {
		return st, errcode.Wrap(errcode.RuntimeError, err, "export workspace")
	}
	return st, nil
}

// ImportWorkspace empties the workspace and extracts the archive r into it
// through the sandbox's os.Root, member by member as archive checks them.
func (s *Sandbox) ImportWorkspace(ctx context.Context, r io.Reader, lim archive.Limits) (archive.Stats, error) {
	root, err := s.fsRoot()
	if err != nil {
		return archive.Stats{}, err
	}
	des, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return archive.Stats{}, errcode.Wrap(errcode.RuntimeError, err, "read workspace")
	}
	for _, de := range des {
		if err := root.RemoveAll(de.Name()); err != nil {
			return archive.Stats{}, errcode.Wrap(errcode.RuntimeError, err, "empty workspace")
		}
	}
	return archive.Extract(root, r, lim)
}
