package docker

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// ExportWorkspace streams the workspace out of the container (the archive
// endpoint; the container may be stopped) as workspace-relative members.
func (s *Sandbox) ExportWorkspace(ctx context.Context, w io.Writer, skip archive.Skip) (archive.Stats, error) {
	if err := s.checkNotGone("export workspace"); err != nil {
		return archive.Stats{}, err
	}
	rc, _, err := s.r.cli.CopyFromContainer(ctx, s.id, s.root)
	if err != nil {
		return archive.Stats{}, s.r.wrap(err, "export workspace")
	}
	defer rc.Close()
	st, err := archive.Rebase(w, rc, skip)
	if err != nil {
		return st, errcode.Wrap(errcode.RuntimeError, err, "export workspace")
	}
	return st, nil
}

// ImportWorkspace empties the workspace (rm in the container as the
// sandbox user: the sandbox must be running) and copies in the members of
// r that pass archive's checks, owned by the sandbox user. The copy streams
// through a pipe.
func (s *Sandbox) ImportWorkspace(ctx context.Context, r io.Reader, lim archive.Limits) (archive.Stats, error) {
	o, err := s.owner(ctx)
	if err != nil {
		return archive.Stats{}, err
	}
	q := shellQuote(s.root)
	res, err := s.Exec(ctx, runtime.ExecSpec{
		Argv: []string{"/bin/sh", "-c", "rm -rf " + q + "/* " + q + "/.[!.]* " + q + "/..?*"}, Timeout: 5 * time.Minute, MaxOutput: 4 << 10,
	})
	if err != nil {
		return archive.Stats{}, err
	}
	if res.ExitCode != 0 {
		return archive.Stats{}, errcode.New(errcode.RuntimeError, "empty workspace: %s", strings.TrimSpace(string(res.Stderr)))
	}
	pr, pw := io.Pipe()
	type result struct {
		st  archive.Stats
		err error
	}
	done := make(chan result, 1)
	go func() { // ends when r is drained or the copy below stops reading
		st, err := archive.CopyAs(pw, r, lim, o.uid, o.gid)
		pw.CloseWithError(err)
		done <- result{st, err}
	}()
	cerr := s.r.cli.CopyToContainer(ctx, s.id, s.root, pr, container.CopyToContainerOptions{})
	pr.CloseWithError(cerr)
	out := <-done
	if out.err != nil {
		return out.st, out.err
	}
	if cerr != nil {
		return out.st, s.r.wrap(cerr, "import workspace")
	}
	return out.st, nil
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
