package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/errdefs"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

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
	return s.ops("").readTo(ctx, p, w, limit)
}

// apiReadTo is ReadFileTo through the Docker API.
func (s *Sandbox) apiReadTo(ctx context.Context, p string, w io.Writer, limit int64) (int64, fs.FileMode, error) {
	r, err := s.resolve(ctx, p, true)
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
// runtime's rename. Through the Docker API, a path below the workspace
// root is written with the sandbox frozen (see freeze). An existing
// directory, or a parent that is not one, is invalid_request; the
// workspace root or a path outside it invalid_path.
func (s *Sandbox) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	return s.WriteFileFrom(ctx, p, bytes.NewReader(data), int64(len(data)), mode)
}

// WriteFileFrom is WriteFile with the content streamed from r, which must
// hold exactly size bytes. The last component is not followed: a symlink
// there is replaced, as the local runtime's rename replaces it.
func (s *Sandbox) WriteFileFrom(ctx context.Context, p string, src io.Reader, size int64, mode fs.FileMode) (err error) {
	rel, err := runtime.Rel(s.root, p)
	if err != nil {
		return err
	}
	if rel == "." {
		return errcode.New(errcode.InvalidPath, "write: the workspace root is not a file")
	}
	if mode == 0 {
		mode = 0o644
	}
	return s.ops("").writeFrom(ctx, p, rel, src, size, mode)
}

// apiWriteFrom is WriteFileFrom through the Docker API, of the path rel
// below the workspace root with mode set.
func (s *Sandbox) apiWriteFrom(ctx context.Context, rel string, src io.Reader, size int64, mode fs.FileMode) (err error) {
	o, err := s.owner(ctx)
	if err != nil {
		return err
	}
	if strings.Contains(rel, "/") && size > 0 {
		// What the frozen part of the copy sends is read first, so that the
		// freeze never waits on the content's source.
		head := make([]byte, min(size, frozenHead))
		if n, err := io.ReadFull(src, head); err != nil {
			return errcode.Wrap(errcode.InvalidRequest, err, fmt.Sprintf("write: %d of %d bytes arrived", n, size))
		}
		src = io.MultiReader(bytes.NewReader(head), src)
	}
	thaw, err := s.freezeFor(ctx, "write "+rel, rel)
	if err != nil {
		return err
	}
	defer func() {
		if terr := thaw(); err == nil {
			err = terr
		}
	}()
	r, err := s.resolve(ctx, rel, false)
	if err != nil {
		return err
	}
	dir, name := path.Dir(r.abs), path.Base(r.abs)
	switch {
	case r.missing != "" && !r.stat.Mode.IsDir():
		return errcode.New(errcode.InvalidRequest, "write: a parent of %s is not a directory", rel)
	case r.missing != "":
		dir, name = r.abs, r.missing
	case r.unresolvable: // a link that loops: replaced like any other link
	case r.stat.Mode.IsDir():
		return errcode.New(errcode.InvalidRequest, "write: %s is a directory", rel)
	}
	return s.copyIn(ctx, "write "+rel, dir, name, src, size, mode, o)
}

// Mkdir makes a directory (mode 0755, owned by the sandbox user); with
// parents it makes missing parents and accepts an existing directory
// (following a symlink to judge it). Without parents a missing parent is
// not_found; an existing entry, a symlink included, is already_exists
// (with parents, unless it is a directory); a parent that is not a
// directory is invalid_request; a path outside the workspace is
// invalid_path.
func (s *Sandbox) Mkdir(ctx context.Context, p string, parents bool) error {
	return s.ops("").mkdir(ctx, p, parents)
}

// apiMkdir is Mkdir through the Docker API.
func (s *Sandbox) apiMkdir(ctx context.Context, p string, parents bool) (err error) {
	rel, err := runtime.Rel(s.root, p)
	if err != nil {
		return err
	}
	o, err := s.owner(ctx)
	if err != nil {
		return err
	}
	frozenFor := rel
	if parents {
		frozenFor = "./" + rel // a link there is followed: it may lead anywhere
	}
	thaw, err := s.freezeFor(ctx, "mkdir "+rel, frozenFor)
	if err != nil {
		return err
	}
	defer func() {
		if terr := thaw(); err == nil {
			err = terr
		}
	}()
	// Without parents any existing entry is already_exists: a symlink is
	// not followed to say so. With them it is, to judge a directory.
	r, err := s.resolve(ctx, p, parents)
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
	return s.copyIn(ctx, "mkdir "+r.rel, r.abs, r.missing+"/", nil, 0, 0, o)
}

// copyIn extracts into dir (an existing directory, symlinks resolved) the
// entry name: a directory when name ends in "/", else a file of size bytes
// streamed from data. Missing directories on the way are made first.
// Everything belongs to the sandbox user (o). The caller has frozen the
// sandbox (see freezeFor) before it resolved dir, and thaws it once
// copyIn returns.
func (s *Sandbox) copyIn(ctx context.Context, what, dir, name string, data io.Reader, size int64, mode fs.FileMode, o owner) error {
	pr, pw := io.Pipe()
	go func() { // ends when the archive is written or the copy stops reading
		pw.CloseWithError(writeEntry(pw, name, data, size, mode, o))
	}()
	// Without CopyUIDGID the daemon keeps the archive's owners (with it, it
	// would chown to the container's user as the host's passwd names it).
	err := s.r.cli.CopyToContainer(ctx, s.id, dir, pr, container.CopyToContainerOptions{})
	pr.CloseWithError(err)
	if err != nil {
		if errcode.Of(err) == errcode.InvalidRequest {
			return err
		}
		return s.r.wrap(err, what)
	}
	return nil
}

// frozenHead is how much of a write's content WriteFileFrom reads before
// it freezes the sandbox, so that the freeze does not wait on the
// content's source. The daemon holds the container's lock while it
// extracts, so the sandbox cannot be unpaused before the copy ends: a
// larger content keeps it frozen while the rest streams.
const frozenHead = 16 << 20

// freezeFor freezes the sandbox (see freeze) for an extraction at the
// workspace path rel, unless rel is a single name. The daemon then
// extracts into the workspace root, which the sandbox cannot rename (its
// parent is root's), one member with no parent to make but the root: the
// sandbox has nothing to move under it, and the write costs no freeze.
// (A write, and a mkdir without parents, do not follow the last
// component; a mkdir with parents, which does, always freezes.)
func (s *Sandbox) freezeFor(ctx context.Context, what, rel string) (thaw func() error, err error) {
	if !strings.Contains(rel, "/") {
		return func() error { return nil }, nil
	}
	return s.freeze(ctx, what)
}

// freeze makes the container's file system hold still while the daemon
// extracts into it, as root: it pauses the container (docker pause, the
// cgroup freezer), so that no process of the sandbox can rename a
// directory on the way. The daemon makes a missing destination directory,
// and a missing parent of a member, itself, owned by root: a sandbox that
// renamed the directory away at the right moment got a root-owned one in
// its place, which its user can neither write in nor move elsewhere (and a
// hydrate, which moves the workspace's entries, then failed every time).
// It also holds s.life, so that no Start, Stop or exec through the Docker
// API runs meanwhile (an exec cannot start in a paused container); calls
// through the supervisor wait until it thaws. A stopped container has
// nothing to freeze, and s.life keeps it stopped; one paused already is
// left paused. thaw unpauses and releases s.life; it may be called any
// number of times and returns the first call's error every time
// (runtime_error when the container could not be unpaused). Only the
// Docker API fallback of a write or mkdir below the workspace root
// freezes: it is rare (a file operation the sandbox's user may not do, or
// any while no supervisor is connected), and its freeze lasts a few
// daemon calls and the copy (of at most frozenHead bytes read before it,
// unless the content is larger; a supervisor silent for 5 s meanwhile is
// dropped, and reconnects after).
func (s *Sandbox) freeze(ctx context.Context, what string) (thaw func() error, err error) {
	s.life.Lock()
	c, err := s.r.cli.ContainerInspect(ctx, s.id)
	if err != nil {
		s.life.Unlock()
		if errdefs.IsNotFound(err) {
			return nil, errcode.New(errcode.InvalidState, "%s: the container is gone", what)
		}
		return nil, s.r.wrap(err, what+": inspect the container")
	}
	pausing := c.State != nil && c.State.Running && !c.State.Paused
	if pausing {
		if err := s.r.cli.ContainerPause(ctx, s.id); err != nil {
			s.life.Unlock()
			return nil, s.r.wrap(err, what+": freeze the sandbox")
		}
	}
	var once sync.Once
	var uerr error
	return func() error {
		once.Do(func() {
			defer s.life.Unlock()
			if !pausing {
				return
			}
			// Thawed even when ctx has ended: the sandbox must not stay
			// frozen behind its client's back.
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if err := s.r.cli.ContainerUnpause(uctx, s.id); err != nil {
				uerr = s.r.wrap(err, what+": thaw the sandbox")
			}
		})
		return uerr
	}, nil
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
// from inside the resolved parent directory. On a stopped sandbox it
// starts the container for the rm and stops it again (see rmStopped). The
// final component is not followed: a symlink is removed, not its target.
// The workspace root or a path outside it is invalid_path, a missing path
// not_found, a non-empty directory without recursive invalid_request, and
// a sandbox shut down invalid_state.
func (s *Sandbox) Remove(ctx context.Context, p string, recursive bool) error {
	rel, err := runtime.Rel(s.root, p)
	if err != nil {
		return err
	}
	if rel == "." {
		return errcode.New(errcode.InvalidPath, "rm: the workspace root cannot be removed")
	}
	return s.ops("").remove(ctx, p, rel, recursive)
}

// apiRemove is Remove through the Docker API, of the path rel below the
// workspace root.
func (s *Sandbox) apiRemove(ctx context.Context, rel string, recursive bool) error {
	r, err := s.resolve(ctx, rel, false)
	if err != nil {
		return err
	}
	if r.missing != "" {
		return errcode.New(errcode.NotFound, "rm: %s does not exist", rel)
	}
	if r.abs == s.root {
		return errcode.New(errcode.InvalidPath, "rm: the workspace root cannot be removed")
	}
	how := "-f" // a file, or a symlink (one that loops included)
	switch {
	case recursive:
		how = "-r"
	case !r.unresolvable && r.stat.Mode.IsDir():
		how = "-d"
	}
	spec := runtime.ExecSpec{
		Argv:    []string{"/bin/sh", "-c", removeScript, "paddock-rm", path.Dir(r.abs), s.root, how, path.Base(r.abs)},
		Timeout: 5 * time.Minute, MaxOutput: 4 << 10,
	}
	res, err := s.Exec(ctx, spec)
	if errcode.Of(err) == errcode.InvalidState && s.checkNotGone("rm") == nil {
		res, err = s.rmStopped(ctx, spec)
	}
	if err != nil {
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
	// rm's stderr names container paths: it goes to the cause, for logs.
	return errcode.Wrap(errcode.RuntimeError, errors.New(strings.TrimSpace(string(res.Stderr))),
		fmt.Sprintf("rm %s failed (exit %d)", rel, res.ExitCode))
}

// rmStopped runs the rm spec in a container that is stopped: it starts the
// container, runs the rm and stops it again, whatever the rm did, so that
// the sandbox is stopped afterwards as it was before. The Docker API has no
// file delete, and the archive endpoints that work on a stopped container
// only add files; its extraction does remove what a member replaces, but
// only to put the member there, so nothing short of a process in the
// container removes a file. A helper container cannot reach another's root
// file system (the workspace is not a volume). Starting the container runs
// only keepAlive under Docker's init, nothing of the client's. It costs a
// start and a stop on a path that is rare: BenchmarkRemove measured p50
// ~720-740 ms for a file on a stopped sandbox against ~110-120 ms on a
// running one (the start alone ~475 ms, the stop ~150 ms).
//
// It holds s.life the whole time, so that a Start, Stop or exec of the
// client's waits for it: none of them sees the container running for the
// rm, and a Start that arrives meanwhile starts it after the rm stopped it.
// A container started meanwhile (the lock taken after a Start) is left
// running and the rm just runs.
func (s *Sandbox) rmStopped(ctx context.Context, spec runtime.ExecSpec) (runtime.ExecResult, error) {
	s.life.Lock()
	defer s.life.Unlock()
	if err := s.checkNotGone("rm"); err != nil {
		return runtime.ExecResult{}, err
	}
	running, err := s.Running(ctx)
	if err != nil {
		return runtime.ExecResult{}, err
	}
	if running {
		return s.exec(ctx, spec, true)
	}
	if err := s.r.cli.ContainerStart(ctx, s.id, container.StartOptions{}); err != nil {
		if errdefs.IsNotFound(err) {
			return runtime.ExecResult{}, errcode.New(errcode.InvalidState, "rm: the container is gone")
		}
		return runtime.ExecResult{}, s.r.wrap(err, "start container for rm")
	}
	res, err := s.exec(ctx, spec, true)
	// Stopped again even when ctx has ended: the sandbox must not be left
	// running behind its client's back.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second+s.r.cfg.StopTimeout)
	defer cancel()
	if serr := s.stopContainer(sctx); serr != nil {
		return res, errcode.Wrap(errcode.RuntimeError, errors.Join(err, serr), "rm: the sandbox, started for the rm, could not be stopped again")
	}
	return res, err
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
