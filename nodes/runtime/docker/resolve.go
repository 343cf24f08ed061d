package docker

import (
	"archive/tar"
	"context"
	"errors"
	"io/fs"
	"path"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/errdefs"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// Paths are resolved here, not by the daemon. ContainerStatPath reports a
// symlink's target fully resolved in the container's root file system (on
// Docker 20.10 a link "rel -> data" and a link "abs -> /workspace/data"
// both report "/workspace/data"), so it cannot tell a relative target from
// an absolute one. The rule every runtime shares is that of os.Root and the
// archive checks: a symlink is followed only when its target is relative
// and, resolved step by step from the link's directory, never leaves the
// workspace; an absolute target is invalid_path even when it names a path
// inside the workspace. So resolve stats one component at a time (the
// daemon does not follow the last component of a stat) and reads a link's
// own text from the archive of the link itself (its tar header's
// Linkname), then follows it itself.

// maxLinkHops bounds symlink resolution, as the kernel's ELOOP does.
const maxLinkHops = 40

// resolved is a workspace path resolved inside the container.
type resolved struct {
	rel string // the path relative to the workspace root, clean
	// abs is the container path of the deepest existing component, every
	// symlink on the way resolved; it lies inside the workspace root. When
	// the last component is a symlink that was not followed, abs is the
	// link's own path. When missing is empty it stands for the whole path.
	abs string
	// stat is abs's stat; a symlink that was not followed stays a symlink.
	// It is unset when unresolvable is.
	stat container.PathStat
	// missing holds the components below abs that do not exist.
	missing string
	// unresolvable is set when the last component, not followed, is a
	// symlink the daemon cannot stat because it cannot resolve its target
	// (a loop of links): it exists, and is a symlink, but stat is unset.
	unresolvable bool
}

// resolve confines p to the workspace: lexically first (runtime.Rel), then
// component by component inside the container, following a symlink only
// when its target is relative and stays inside the workspace. followLast
// says whether a symlink as the last component is followed (read, mkdir,
// exec's cwd) or left as it is (ls, write, rm).
//
// Errors: invalid_path for a path or symlink that leaves the workspace, an
// absolute symlink target, a loop of links (more than maxLinkHops, or one
// the daemon cannot resolve) or a name or path too long; not_found for a
// dangling symlink on the way; invalid_request when a component on the way
// is not a directory; invalid_state after Shutdown or when the container is
// gone; runtime_error (unavailable when ctx ends) when the engine fails.
func (s *Sandbox) resolve(ctx context.Context, p string, followLast bool) (resolved, error) {
	rel, err := runtime.Rel(s.root, p)
	if err != nil {
		return resolved{}, err
	}
	if err := s.checkNotGone("file operation"); err != nil {
		return resolved{}, err
	}
	r := resolved{rel: rel, abs: s.root}
	if r.stat, err = s.stat(ctx, s.root, rel); err != nil {
		return resolved{}, err
	}
	if rel == "." {
		return r, nil
	}
	todo := strings.Split(rel, "/")
	own := len(todo) // the tail of todo that is rel's own; link targets go in front
	hops := 0
	for len(todo) > 0 {
		c := todo[0]
		fromLink := len(todo) > own
		todo = todo[1:]
		if !fromLink {
			own--
		}
		switch c {
		case "", ".":
			continue
		case "..": // only a link target holds one: rel is clean
			if r.abs == s.root {
				return resolved{}, errcode.New(errcode.InvalidPath, "%s leads outside the workspace through a symbolic link", rel)
			}
			r.abs = path.Dir(r.abs)
			if r.stat, err = s.stat(ctx, r.abs, rel); err != nil {
				return resolved{}, err
			}
			continue
		}
		if !r.stat.Mode.IsDir() {
			return resolved{}, errcode.New(errcode.InvalidRequest, "a parent of %s is not a directory", rel)
		}
		last := len(todo) == 0
		cand := path.Join(r.abs, c)
		st, err := s.statEntry(ctx, cand, r.abs, rel)
		var ue *unresolvableError
		switch {
		case errcode.Of(err) == errcode.NotFound && fromLink:
			return resolved{}, errcode.New(errcode.NotFound, "%s: a symbolic link on the way is dangling", rel)
		case errcode.Of(err) == errcode.NotFound:
			r.missing = strings.Join(append([]string{c}, todo...), "/")
			return r, s.checkLength(r)
		case errors.As(err, &ue) && last && !followLast:
			r.abs, r.stat, r.unresolvable = cand, container.PathStat{}, true
			return r, nil
		case err != nil:
			return resolved{}, err
		}
		if st.Mode&fs.ModeSymlink != 0 && (!last || followLast) {
			if hops++; hops > maxLinkHops {
				return resolved{}, errcode.New(errcode.InvalidPath, "%s: too many levels of symbolic links", rel)
			}
			target, err := s.readLink(ctx, cand, rel)
			if err != nil {
				return resolved{}, err
			}
			if path.IsAbs(target) {
				return resolved{}, errcode.New(errcode.InvalidPath, "%s: a symbolic link on the way has an absolute target; only relative targets inside the workspace are followed", rel)
			}
			for _, t := range strings.Split(target, "/") {
				if len(t) > runtime.MaxNameBytes {
					return resolved{}, errcode.New(errcode.InvalidPath, "%s: a symbolic link on the way has a target with a name over %d bytes", rel, runtime.MaxNameBytes)
				}
			}
			todo = append(strings.Split(target, "/"), todo...)
			continue
		}
		r.abs, r.stat = cand, st
	}
	return r, s.checkLength(r)
}

// checkLength refuses a resolved path longer than the kernel allows (links
// can make it longer than the path the client gave).
func (s *Sandbox) checkLength(r resolved) error {
	p := r.abs
	if r.missing != "" {
		p += "/" + r.missing
	}
	if len(p) > runtime.MaxPathBytes {
		return errcode.New(errcode.InvalidPath, "%s: the path its symbolic links lead to is longer than %d bytes", r.rel, runtime.MaxPathBytes)
	}
	return nil
}

// stat is ContainerStatPath of the container path abs, with errors mapped
// and messages naming rel, the workspace path being resolved.
func (s *Sandbox) stat(ctx context.Context, abs, rel string) (container.PathStat, error) {
	st, err := s.r.cli.ContainerStatPath(ctx, s.id, abs)
	return st, s.statErr(ctx, err, rel)
}

// statErr maps a ContainerStatPath error.
func (s *Sandbox) statErr(ctx context.Context, err error, rel string) error {
	switch {
	case err == nil:
		return nil
	case errdefs.IsNotFound(err) && s.containerGone(ctx):
		return errcode.New(errcode.InvalidState, "the sandbox's container is gone")
	case errdefs.IsNotFound(err):
		return errcode.Wrap(errcode.NotFound, err, rel+" does not exist")
	}
	return s.r.wrap(err, "stat "+rel)
}

// unresolvableError is the cause of the invalid_path statEntry returns for
// an entry the daemon cannot stat while it can stat its directory.
type unresolvableError struct{ err error }

func (e *unresolvableError) Error() string { return e.err.Error() }
func (e *unresolvableError) Unwrap() error { return e.err }

// statEntry stats cand, an entry of the directory dir (already resolved).
// The daemon stats a symlink by resolving its target and answers a link it
// cannot resolve (a loop: a -> b, b -> a) with a bare 500 whose text names
// host paths. Such an error while dir still stats fine can only come from
// the entry itself, so it is invalid_path, with an *unresolvableError as its
// cause (the daemon's text stays in the cause, off the wire).
func (s *Sandbox) statEntry(ctx context.Context, cand, dir, rel string) (container.PathStat, error) {
	st, err := s.r.cli.ContainerStatPath(ctx, s.id, cand)
	if err == nil || !errdefs.IsSystem(err) || ctx.Err() != nil {
		return st, s.statErr(ctx, err, rel)
	}
	if _, derr := s.r.cli.ContainerStatPath(ctx, s.id, dir); derr != nil {
		return st, s.statErr(ctx, err, rel)
	}
	return st, errcode.Wrap(errcode.InvalidPath, &unresolvableError{err},
		rel+": a symbolic link on the way cannot be resolved (a loop of links, or a path too long)")
}

// readLink returns the target of the symlink at the container path abs as
// it is written, from the link's own archive (the daemon does not follow
// the last component of an archive path).
func (s *Sandbox) readLink(ctx context.Context, abs, rel string) (string, error) {
	rc, _, err := s.r.cli.CopyFromContainer(ctx, s.id, abs)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return "", errcode.Wrap(errcode.NotFound, err, rel+": a symbolic link on the way vanished")
		}
		return "", s.r.wrap(err, "read a symbolic link of "+rel)
	}
	defer rc.Close()
	hdr, err := tar.NewReader(rc).Next()
	if err != nil {
		return "", s.r.wrap(err, "read a symbolic link of "+rel)
	}
	if hdr.Typeflag != tar.TypeSymlink {
		return "", errcode.New(errcode.InvalidRequest, "%s: a symbolic link on the way changed while it was resolved", rel)
	}
	return hdr.Linkname, nil
}

func (s *Sandbox) containerGone(ctx context.Context) bool {
	_, err := s.r.cli.ContainerInspect(ctx, s.id)
	return errdefs.IsNotFound(err)
}
