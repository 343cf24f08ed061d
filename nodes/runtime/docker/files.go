package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/errdefs"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// maxLinkHops bounds symlink resolution, as the kernel's ELOOP does.
const maxLinkHops = 40

// resolved is a workspace path resolved inside the container.
type resolved struct {
	rel string // the path relative to the workspace root, clean
	// abs is the container path of the deepest existing component, with
	// every symlink resolved; it lies inside the workspace root. When
	// missing is empty it is the whole path.
	abs string
	// stat is abs's stat (symlinks followed); final is the last component's
	// own stat (a symlink stays a symlink). Both are set when missing is
	// empty.
	stat, final container.PathStat
	// missing holds the components below abs that do not exist.
	missing string
}

// resolve confines p to the workspace: lexically first, then component by
// component inside the container, following a symlink only when its target
// lies inside the workspace root.
func (s *Sandbox) resolve(ctx context.Context, p string) (resolved, error) {
	rel, err := runtime.Rel(s.root, p)
	if err != nil {
		return resolved{}, err
	}
	if err := s.checkNotGone("file operation"); err != nil {
		return resolved{}, err
	}
	r := resolved{rel: rel, abs: s.root}
	st, err := s.stat(ctx, s.root)
	if err != nil {
		return resolved{}, err
	}
	r.stat, r.final = st, st
	if rel == "." {
		return r, nil
	}
	comps := strings.Split(rel, "/")
	hops := 0
	for i, c := range comps {
		if !r.stat.Mode.IsDir() {
			return resolved{}, errcode.New(errcode.InvalidRequest, "a parent of %s is not a directory", rel)
		}
		cand := path.Join(r.abs, c)
		st, err := s.stat(ctx, cand)
		if errcode.Of(err) == errcode.NotFound {
			r.missing = strings.Join(comps[i:], "/")
			return r, nil
		}
		if err != nil {
			return resolved{}, err
		}
		final := st
		for st.Mode&fs.ModeSymlink != 0 {
			if hops++; hops > maxLinkHops {
				return resolved{}, errcode.New(errcode.InvalidPath, "%s: too many levels of symbolic links", rel)
			}
			// The daemon reports the link's target fully resolved inside
			// the container's root file system.
			target := path.Clean("/" + st.LinkTarget)
			if !within(target, s.root) {
				return resolved{}, errcode.New(errcode.InvalidPath, "%s leads outside the workspace through a symbolic link", rel)
			}
			cand = target
			st, err = s.stat(ctx, cand)
			if errcode.Of(err) == errcode.NotFound {
				return resolved{}, errcode.New(errcode.NotFound, "%s: the symbolic link %s is dangling", rel, c)
			}
			if err != nil {
				return resolved{}, err
			}
		}
		r.abs, r.stat, r.final = cand, st, final
	}
	return r, nil
}

// within reports whether p is root or lies below it.
func within(p, root string) bool {
	return p == root || strings.HasPrefix(p, root+"/")
}

// stat is ContainerStatPath with errors mapped.
func (s *Sandbox) stat(ctx context.Context, abs string) (container.PathStat, error) {
	st, err := s.r.cli.ContainerStatPath(ctx, s.id, abs)
	if err == nil {
		return st, nil
	}
	if errdefs.IsNotFound(err) {
		if s.containerGone(ctx) {
			return st, errcode.New(errcode.InvalidState, "the sandbox's container is gone")
		}
		return st, errcode.New(errcode.NotFound, "%s does not exist", abs)
	}
	return st, s.r.wrap(err, "stat "+abs)
}

func (s *Sandbox) containerGone(ctx context.Context) bool {
	_, err := s.r.cli.ContainerInspect(ctx, s.id)
	return errdefs.IsNotFound(err)
}

// ReadFile returns a regular file's content and permission bits. A path
// outside the workspace (symlinks included) is invalid_path, a missing
// file not_found, a directory or other non-regular file invalid_request,
// a file over limit payload_too_large (before its content is copied), and
// any operation after Shutdown invalid_state.
func (s *Sandbox) ReadFile(ctx context.Context, p string, limit int64) ([]byte, fs.FileMode, error) {
	var buf bytes.Buffer
	_, mode, err := s.ReadFileTo(ctx, p, &buf, limit)
	if err != nil {
		return nil, 0, err
	}
	return buf.Bytes(), mode, nil
}

// ReadFileTo streams a regular file's content to w and returns its size
// and permission bits; a file over limit is payload_too_large before
// anything is written.
func (s *Sandbox) ReadFileTo(ctx context.Context, p string, w io.Writer, limit int64) (int64, fs.FileMode, error) {
	r, err := s.resolve(ctx, p)
	if err != nil {
		return 0, 0, err
	}
	switch {
	case r.missing != "":
		return 0, 0, errcode.New(errcode.NotFound, "read: %s does not exist", r.rel)
	case r.stat.Mode.IsDir():
		return 0, 0, errcode.New(errcode.InvalidRequest, "read: %s is a directory", r.rel)
	case !r.stat.Mode.IsRegular():
		return 0, 0, errcode.New(errcode.InvalidRequest, "read: %s is not a regular file", r.rel)
	case r.stat.Size > limit:
		return 0, 0, errcode.New(errcode.PayloadTooLarge, "read: %s has %d bytes, over the limit of %d", r.rel, r.stat.Size, limit)
	}
	rc, _, err := s.r.cli.CopyFromContainer(ctx, s.id, r.abs)
	if err != nil {
		return 0, 0, s.r.wrap(err, "read "+r.rel)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	if err != nil {
		return 0, 0, s.r.wrap(err, "read "+r.rel)
	}
	if hdr.Typeflag != tar.TypeReg {
		return 0, 0, errcode.New(errcode.InvalidRequest, "read: %s changed into something other than a file", r.rel)
	}
	if hdr.Size > limit {
		return 0, 0, errcode.New(errcode.PayloadTooLarge, "read: %s grew over the limit of %d bytes", r.rel, limit)
	}
	n, err := io.Copy(w, tr)
	if err != nil {
		return n, 0, s.r.wrap(err, "read "+r.rel)
	}
	return n, hdr.FileInfo().Mode().Perm(), nil
}

// WriteFile replaces a file's content and sets its mode exactly (0: 0644),
// creating missing parent directories (0755); the file and the directories
// belong to the sandbox user. The daemon's extraction removes an existing
// file and writes the new one in its place: not atomic, unlike the local
// runtime's rename. An existing directory, or a parent that is not one, is
// invalid_request; the workspace root or a path outside it invalid_path.
func (s *Sandbox) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	return s.WriteFileFrom(ctx, p, bytes.NewReader(data), int64(len(data)), mode)
}

// WriteFileFrom is WriteFile with the content streamed from r, which must
// hold exactly size bytes. The last component is not followed: a symlink
// there is replaced, as the local runtime's rename replaces it.
func (s *Sandbox) WriteFileFrom(ctx context.Context, p string, src io.Reader, size int64, mode fs.FileMode) error {
	rel, err := runtime.Rel(s.root, p)
	if err != nil {
		return err
	}
	if rel == "." {
		return errcode.New(errcode.InvalidPath, "write: the workspace root is not a file")
	}
	parent, err := s.resolve(ctx, path.Dir(rel))
	if err != nil {
		return err
	}
	if !parent.stat.Mode.IsDir() {
		return errcode.New(errcode.InvalidRequest, "write: a parent of %s is not a directory", rel)
	}
	if mode == 0 {
		mode = 0o644
	}
	name := path.Base(rel)
	if parent.missing != "" {
		name = parent.missing + "/" + name
	} else {
		st, err := s.stat(ctx, path.Join(parent.abs, name))
		if err == nil && st.Mode.IsDir() {
			return errcode.New(errcode.InvalidRequest, "write: %s is a directory", rel)
		}
		if err != nil && errcode.Of(err) != errcode.NotFound {
			return err
		}
	}
	return s.copyIn(ctx, "write "+rel, parent.abs, name, src, size, mode)
}

// Mkdir makes a directory (mode 0755, owned by the sandbox user); with
// parents it makes missing parents and accepts an existing directory.
// Without parents a missing parent is not_found; an existing entry is
// already_exists (with parents, unless it is a directory); a parent that
// is not a directory is invalid_request; a path outside the workspace is
// invalid_path.
func (s *Sandbox) Mkdir(ctx context.Context, p string, parents bool) error {
	r, err := s.resolve(ctx, p)
	if err != nil {
		return err
	}
	switch {
	case r.missing == "" && parents && r.stat.Mode.IsDir():
		return nil
	case r.missing == "":
		return errcode.New(errcode.AlreadyExists, "mkdir: %s already exists", r.rel)
	case !r.stat.Mode.IsDir():
		return errcode.New(errcode.InvalidRequest, "mkdir: a parent of %s is not a directory", r.rel)
	case !parents && strings.Contains(r.missing, "/"):
		return errcode.New(errcode.NotFound, "mkdir: the parent of %s does not exist", r.rel)
	}
	return s.copyIn(ctx, "mkdir "+r.rel, r.abs, r.missing+"/", nil, 0, 0)
}

// copyIn extracts into dir (an existing directory, symlinks resolved) the
// entry name: a directory when name ends in "/", else a file of size bytes
// streamed from data. Missing directories on the way are made first.
// Everything belongs to the sandbox user.
func (s *Sandbox) copyIn(ctx context.Context, what, dir, name string, data io.Reader, size int64, mode fs.FileMode) error {
	o, err := s.owner(ctx)
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() { // ends when the archive is written or the copy stops reading
		pw.CloseWithError(writeEntry(pw, name, data, size, mode, o))
	}()
	// Without CopyUIDGID the daemon keeps the archive's owners (with it, it
	// would chown to the container's user as the host's passwd names it).
	err = s.r.cli.CopyToContainer(ctx, s.id, dir, pr, container.CopyToContainerOptions{})
	pr.CloseWithError(err)
	if err != nil {
		if errcode.Of(err) == errcode.InvalidRequest {
			return err
		}
		return s.r.wrap(err, what)
	}
	return nil
}

// writeEntry writes the tar archive copyIn extracts.
func writeEntry(w io.Writer, name string, data io.Reader, size int64, mode fs.FileMode, o owner) error {
	tw := tar.NewWriter(w)
	now := time.Now()
	comps := strings.Split(strings.TrimSuffix(name, "/"), "/")
	for i := range comps {
		hdr := &tar.Header{
			Name: strings.Join(comps[:i+1], "/"), Uid: o.uid, Gid: o.gid, ModTime: now,
			Typeflag: tar.TypeDir, Mode: 0o755,
		}
		if i == len(comps)-1 && !strings.HasSuffix(name, "/") {
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, int64(mode.Perm()), size
		} else {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg {
			if n, err := io.CopyN(tw, data, size); err != nil {
				return errcode.Wrap(errcode.InvalidRequest, err, fmt.Sprintf("write: %d of %d bytes arrived", n, size))
			}
		}
	}
	return tw.Close()
}

// Remove removes a file, symlink or empty directory, or a whole tree when
// recursive, by running rm (rmdir) in the container as the sandbox user,
// from inside the resolved parent directory: it needs the sandbox running
// (invalid_state otherwise). The final component is not followed: a
// symlink is removed, not its target. The workspace root or a path outside
// it is invalid_path, a missing path not_found, and a non-empty directory
// without recursive invalid_request.
func (s *Sandbox) Remove(ctx context.Context, p string, recursive bool) error {
	rel, err := runtime.Rel(s.root, p)
	if err != nil {
		return err
	}
	if rel == "." {
		return errcode.New(errcode.InvalidPath, "rm: the workspace root cannot be removed")
	}
	parent, err := s.resolve(ctx, path.Dir(rel))
	if err != nil {
		return err
	}
	if parent.missing != "" {
		return errcode.New(errcode.NotFound, "rm: %s does not exist", rel)
	}
	if !parent.stat.Mode.IsDir() {
		return errcode.New(errcode.InvalidRequest, "rm: a parent of %s is not a directory", rel)
	}
	name := path.Base(rel)
	st, err := s.stat(ctx, path.Join(parent.abs, name))
	if err != nil {
		if errcode.Of(err) == errcode.NotFound {
			return errcode.New(errcode.NotFound, "rm: %s does not exist", rel)
		}
		return err
	}
	how := "-f"
	switch {
	case recursive:
		how = "-r"
	case st.Mode.IsDir():
		how = "-d"
	}
	res, err := s.Exec(ctx, runtime.ExecSpec{
		Argv:    []string{"/bin/sh", "-c", removeScript, "paddock-rm", parent.abs, s.root, how, name},
		Timeout: 5 * time.Minute, MaxOutput: 4 << 10,
	})
	if err != nil {
		if errcode.Of(err) == errcode.InvalidState {
			return errcode.New(errcode.InvalidState, "rm: the sandbox must be running to remove %s", rel)
		}
		return err
	}
	switch res.ExitCode {
	case 0:
		return nil
	case 3:
		return errcode.New(errcode.NotFound, "rm: the parent of %s vanished", rel)
	case 4:
		return errcode.New(errcode.InvalidPath, "rm: %s leads outside the workspace", rel)
	}
	if how == "-d" {
		return errcode.New(errcode.InvalidRequest, "rm: directory %s is not empty; use recursive", rel)
	}
	return errcode.New(errcode.RuntimeError, "rm %s failed (exit %d): %s", rel, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
}

// removeScript runs as sh -c removeScript paddock-rm <parent> <root>
// <how> <name>. It works from inside the parent, entered physically and
// checked to lie in the workspace, so that a symlink swapped in after the
// checks cannot redirect it.
const removeScript = `cd -P -- "$1" 2>/dev/null || exit 3
case $PWD in "$2"|"$2"/*) ;; *) exit 4;; esac
case $3 in
-r) exec rm -rf -- "./$4";;
-d) exec rmdir -- "./$4";;
*) exec rm -f -- "./$4";;
esac
`
