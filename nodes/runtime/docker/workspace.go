package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// A hydrate stages the new workspace beside the old one and then swaps
// their entries:
//
//	<parent>/<root>                      the workspace
//	<parent>/.paddock/staging-<random>   the archive, extracted as it arrives
//	<parent>/.paddock/old-<random>       what a hydrate replaced, until removed
//
// where <parent> is the workspace root's parent directory and .paddock is a
// directory of the sandbox user's that every stage (re)makes so (the
// daemon's extraction sets its owner). The commit, one exec as the sandbox
// user, who owns all of these, moves the workspace's entries into
// <staging>/.paddock-old-<random>, then the staging directory's entries
// into the workspace, one rename each; a directory without write permission
// (0555) is made writable for its move, which rewrites its "..", and given
// its mode back. If any move fails, everything is moved back and the
// workspace is as it was. The staging directory, now holding only the old
// entries, is renamed old-<random>, and the old-* directories are removed
// in the background (made writable first: the owner can then delete
// everything it owns; what it cannot stays there, outside the workspace,
// and the next hydrate's cleanup tries again). Processes whose cwd was in
// a moved directory keep it, and survive its removal.
//
// The workspace root itself is never renamed, as swapping whole trees
// would: on the overlay file systems Docker uses, a directory that comes
// from an image layer (as /workspace does in Paddock's base image) cannot
// be renamed. The kernel's overlayfs answers EXDEV unless redirect_dir is
// on, and mv then copies and deletes instead: measured on this engine
// (fuse-overlayfs), the "renamed" root came out with a new inode, owned by
// whoever ran mv, and its source could not be fully deleted; and after a
// rename of a root the container had made over the image's, fuse-overlayfs
// showed the image's directory again at the old name, so that the second
// rename moved the new tree into it. Renaming in the parent would also need
// a user who may write it (uid 0, who has no capabilities but owns "/");
// moving entries needs only the sandbox user. Entries the container made
// (everything a hydrate, a write or a command makes) are renamed in place.
// An image that ships directories inside the workspace root is the
// exception: moving those may copy, and a hydrate that cannot move an
// entry fails with the workspace as it was.

const (
	holderName    = ".paddock"
	stagingPrefix = "staging-"
	oldPrefix     = "old-"
)

// commitScript runs as sh -c commitScript paddock-commit <root> <staging>
// <old> <aside>, as the sandbox user: the workspace's entries go to
// <staging>/<aside>, a name no member of the archive has, and <old> is the
// staging directory's name once it holds only them. Exit codes: 0 swapped;
// 3 nothing changed (a directory is missing or not one); 4 failed and
// everything was moved back (and <aside> removed, so that the commit can
// run again); 5 failed and not everything could be moved back. The mode of
// a directory is read from ls -ld: busybox's test -w is true for uid 0,
// capabilities or not.
const commitScript = `root=$1 new=$2 old=$2/$4
exists() { [ -e "$1" ] || [ -L "$1" ]; }
ownerw() { case $(ls -ld -- "$1" 2>/dev/null) in ??w*) return 0;; esac; return 1; }
move() {
  exists "$2" && return 1
  if [ -d "$1" ] && [ ! -L "$1" ] && ! ownerw "$1"; then
    chmod u+w -- "$1" 2>/dev/null || return 1
    if mv -f -- "$1" "$2" 2>/dev/null && ! exists "$1"; then chmod u-w -- "$2"; return 0; fi
    exists "$1" && chmod u-w -- "$1"
    return 1
  fi
  mv -f -- "$1" "$2" 2>/dev/null && ! exists "$1"
}
finish() {
  [ -n "$ro" ] && chmod u-w -- "$root"
  exit "$1"
}
rollback() {
  st=4
  if [ "$phase" = 2 ]; then
    cd -P -- "$root" || finish 5
    for e in * .[!.]* ..?*; do exists "$e" && { move "$root/$e" "$new/$e" || st=5; }; done
  fi
  cd -P -- "$old" || finish 5
  for e in * .[!.]* ..?*; do exists "$e" && { move "$old/$e" "$root/$e" || st=5; }; done
  cd / && rmdir -- "$old" 2>/dev/null
  finish "$st"
}
[ -d "$root" ] && [ ! -L "$root" ] && [ -d "$new" ] && [ ! -L "$new" ] || exit 3
exists "$old" && exit 3
mkdir -- "$old" 2>/dev/null || exit 3
ro= phase=1
if ! ownerw "$root"; then chmod u+w -- "$root" 2>/dev/null && ro=1; fi
cd -P -- "$root" || finish 3
for e in * .[!.]* ..?*; do
  exists "$e" || continue
  move "$root/$e" "$old/$e" || rollback
done
phase=2
cd -P -- "$new" || rollback
for e in * .[!.]* ..?*; do
  exists "$e" || continue
  [ "$e" = "$4" ] && continue
  move "$new/$e" "$root/$e" || rollback
done
mv -f -- "$new" "$3" 2>/dev/null
finish 0
`

// removeTreesScript runs as sh -c removeTreesScript paddock-rmtree
// <holder> <prefix>...: it removes every entry of holder whose name starts
// with one of the prefixes, making what it owns writable first, and exits
// 1 if any is left.
const removeTreesScript = `cd -P -- "$1" 2>/dev/null || exit 0
shift
left=0
for p; do
  for d in "$p"*; do
    [ -e "$d" ] || [ -L "$d" ] || continue
    chmod -R u+w -- "$d" 2>/dev/null
    rm -rf -- "$d" 2>/dev/null
    if [ -e "$d" ] || [ -L "$d" ]; then left=1; fi
  done
done
exit "$left"
`

// StageWorkspace extracts the archive r, member by member as archive checks
// them and as it arrives (one archive copy streamed through a pipe), into a
// staging directory beside the workspace root, owned by the sandbox user;
// the container may be stopped. commit swaps the staging directory's
// entries in place of the workspace's (the sandbox must be running: the
// moves run in an exec) and removes the old ones in the background; abort
// removes the staging directory. Either may be called once, and only one of
// them. On an error nothing is left (the staging directory is removed, best
// effort) and the workspace is untouched: invalid_archive for a member that
// fails the checks, the codes of Exec for the execs, runtime_error when the
// engine fails or an entry cannot be moved.
func (s *Sandbox) StageWorkspace(ctx context.Context, r io.Reader, lim archive.Limits) (archive.Stats, func() error, func(), error) {
	if err := s.checkNotGone("hydrate"); err != nil {
		return archive.Stats{}, nil, nil, err
	}
	o, err := s.owner(ctx)
	if err != nil {
		return archive.Stats{}, nil, nil, err
	}
	// Into the parent, making the holder; on a loopfs the holder is a
	// mount of the disk's (the read-only root takes no copy) and exists.
	dest, prefix := path.Dir(s.root), holderName+"/"
	if s.disk.mechanism == runtime.DiskLoopFS {
		dest, prefix = path.Join(path.Dir(s.root), holderName), ""
	}
	name := stagingPrefix + rand.Text()
	pr, pw := io.Pipe()
	type result struct {
		st  archive.Stats
		err error
	}
	done := make(chan result, 1)
	go func() { // ends when r is drained or the copy below stops reading
		st, err := archive.CopyUnder(pw, r, lim, o.uid, o.gid, prefix+name)
		pw.CloseWithError(err)
		done <- result{st, err}
	}()
	cerr := s.r.cli.CopyToContainer(ctx, s.id, dest, pr, container.CopyToContainerOptions{})
	pr.CloseWithError(cerr)
	out := <-done
	if out.err != nil || cerr != nil {
		s.discardFailed(ctx, name)
		if out.err != nil {
			return out.st, nil, nil, out.err
		}
		return out.st, nil, nil, s.r.wrap(cerr, "hydrate: extract the archive")
	}
	var used atomic.Bool
	commit := func() error {
		if used.Swap(true) {
			return errcode.New(errcode.Internal, "hydrate: the staged workspace was already committed or aborted")
		}
		return s.swapIn(ctx, name)
	}
	abort := func() {
		if !used.Swap(true) {
			s.discard(ctx, name)
		}
	}
	return out.st, commit, abort, nil
}

// ImportWorkspace replaces the workspace's contents with the archive r:
// StageWorkspace, then its commit. The sandbox must be running.
func (s *Sandbox) ImportWorkspace(ctx context.Context, r io.Reader, lim archive.Limits) (archive.Stats, error) {
	return runtime.ImportStaged(ctx, s.StageWorkspace, r, lim)
}

// swapIn runs commitScript for the staging directory name and removes
// what it replaced in the background, or removes the staging directory now
// when the swap failed. The script runs to its end even when ctx ends: a
// kill half way would leave the workspace half swapped.
//
// A commit that fails with everything moved back (exit 4) may have met a
// directory of the workspace root that the sandbox's user does not own
// and so cannot move (one the Docker API left owned by root before its
// extractions were frozen, or one of another user's): reown gives those
// to the sandbox's user and the commit runs once more.
func (s *Sandbox) swapIn(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer cancel()
	holder := path.Join(path.Dir(s.root), holderName)
	if s.disk.mechanism == runtime.DiskLoopFS {
		// The workspace and the holder are two mounts of one disk inside
		// the container (a rename between them would copy): the node
		// renames on its own mount of the disk instead.
		// An overlay (a restore from a kept tree) is unmounted first: the
		// swap renames on the disk's own workspace directory.
		restore, forget, err := s.dropOverlay()
		if err != nil {
			s.discard(ctx, name)
			return err
		}
		if err := s.swapHost(ctx, name, oldPrefix+rand.Text(), ".paddock-old-"+rand.Text()); err != nil {
			if !errors.Is(err, errHalfSwapped) {
				s.discard(ctx, name)
				restore()
			}
			return err
		}
		forget()
		s.goBackground(func(ctx context.Context) { s.removeTrees(ctx, name, oldPrefix) })
		return nil
	}
	spec := runtime.ExecSpec{
		Argv: []string{"/bin/sh", "-c", commitScript, "paddock-commit", s.root,
			path.Join(holder, name), path.Join(holder, oldPrefix+rand.Text()), ".paddock-old-" + rand.Text()},
		Timeout: 5 * time.Minute, MaxOutput: 4 << 10,
	}
	res, err := s.Exec(ctx, spec)
	if err == nil && res.ExitCode == 4 && reownOn {
		if n, rerr := s.reown(ctx); rerr != nil {
			err = rerr
		} else if n > 0 {
			res, err = s.Exec(ctx, spec)
		}
	}
	if err == nil && res.ExitCode == 0 {
		// Sweeps the old-* of earlier hydrates too, and name should the
		// rename to old-* have failed.
		s.goBackground(func(ctx context.Context) { s.removeTrees(ctx, name, oldPrefix) })
		return nil
	}
	if err != nil {
		s.discard(ctx, name)
		return err
	}
	// What the moves printed names container paths: it stays in the cause.
	cause := errors.New(strings.TrimSpace(string(res.Stderr)))
	if res.ExitCode == 5 {
		// Some of the old entries are still in the staging directory:
		// it is kept for whoever looks.
		return errcode.Wrap(errcode.RuntimeError, cause, "hydrate: the staged workspace could not be swapped in, and not all of the old one could be moved back; the rest is kept beside the workspace root")
	}
	s.discard(ctx, name)
	return errcode.Wrap(errcode.RuntimeError, cause, fmt.Sprintf("hydrate: the staged workspace could not be swapped in (exit %d); the workspace is as it was", res.ExitCode))
}

// reownOn says whether swapIn may reown; tests turn it off to reach the
// rollback of a commit that cannot move an entry.
var reownOn = true

// foreignDirsScript runs as sh -c foreignDirsScript paddock-foreign <root>
// <uid>: it prints, each ended by a NUL, the directories directly in the
// workspace root that uid does not own.
const foreignDirsScript = `cd -P -- "$1" || exit 3
exec find . -mindepth 1 -maxdepth 1 -type d ! -user "$2" -print0`

// reown gives the directories directly in the workspace root that the
// sandbox's user does not own to that user, through the Docker API (the
// daemon's extraction chowns an existing directory to the owner of the
// archive's entry for it), keeping their modes, and returns how many it
// gave. Only the workspace root's own entries: the root cannot be renamed
// by the sandbox, the entries are single names extracted into it, and each
// is checked to be a directory (not a symlink: a stat does not follow the
// last component, and the daemon refuses to put a directory over anything
// else) with the sandbox frozen from the check to the extraction, so that
// nothing outside the workspace is ever chowned. What lies deeper moves
// with its top-level entry.
func (s *Sandbox) reown(ctx context.Context) (int, error) {
	o, err := s.owner(ctx)
	if err != nil {
		return 0, err
	}
	res, err := s.Exec(ctx, runtime.ExecSpec{
		Argv:    []string{"/bin/sh", "-c", foreignDirsScript, "paddock-foreign", s.root, strconv.Itoa(o.uid)},
		Timeout: time.Minute, MaxOutput: 1 << 20,
	})
	if err != nil || res.ExitCode != 0 {
		return 0, err // a listing that failed (no find in the image) gives nothing to reown
	}
	var names []string
	for _, n := range strings.Split(string(res.Stdout), "\x00") {
		n = strings.TrimPrefix(n, "./")
		if n != "" && n != "." && n != ".." && !strings.Contains(n, "/") && len(n) <= runtime.MaxNameBytes {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return 0, nil
	}
	thaw, err := s.freeze(ctx, "hydrate")
	if err != nil {
		return 0, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	n := 0
	for _, name := range names {
		st, err := s.r.cli.ContainerStatPath(ctx, s.id, path.Join(s.root, name))
		if err != nil || !st.Mode.IsDir() {
			continue // gone, or no longer a directory
		}
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeDir, Name: name + "/", Mode: int64(st.Mode.Perm()),
			Uid: o.uid, Gid: o.gid, ModTime: st.Mtime, Format: tar.FormatPAX,
		}); err != nil {
			_ = thaw()
			return 0, errcode.Wrap(errcode.Internal, err, "hydrate: reown")
		}
		n++
	}
	if err := tw.Close(); err != nil {
		_ = thaw()
		return 0, errcode.Wrap(errcode.Internal, err, "hydrate: reown")
	}
	err = nil
	if n > 0 {
		err = s.r.wrap(s.r.cli.CopyToContainer(ctx, s.id, s.root, &buf, container.CopyToContainerOptions{}),
			"hydrate: give the workspace's directories to the sandbox's user")
	}
	if terr := thaw(); err == nil {
		err = terr
	}
	if err != nil {
		return 0, err
	}
	return n, nil
}

// discard removes the staging directory name now, best effort, under its
// own bound: it also runs when the hydrate's ctx has ended.
func (s *Sandbox) discard(ctx context.Context, name string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer cancel()
	s.removeTrees(ctx, name)
}

// discardFailed removes the staging directory of a copy that failed.
// The daemon may still be extracting what it received when the client's
// side of the copy has already failed (an archive that breaks off), and
// make the directory after a first removal: the removal is checked, and
// done again, for a few seconds.
func (s *Sandbox) discardFailed(ctx context.Context, name string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	holder := path.Join(path.Dir(s.root), holderName)
	wait := 50 * time.Millisecond
	for attempt := 0; attempt < 8; attempt++ {
		s.removeTrees(ctx, name)
		res, err := s.Exec(ctx, runtime.ExecSpec{Argv: []string{"/bin/sh", "-c", `test -e "$1/$2"`, "paddock-test", holder, name}, Timeout: time.Minute, MaxOutput: 1 << 10})
		if err == nil && res.ExitCode != 0 && attempt > 0 {
			return // gone, and still gone a moment later
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// removeTrees removes the entries of the holder directory whose names
// start with one of the prefixes, as the sandbox user, who owns the holder
// and what a hydrate extracted. What it cannot remove stays, outside the
// workspace.
//
// On a loopfs disk the node removes them as root on its own mount of the
// disk, so that what the sandbox's user cannot remove (a directory the
// Docker API left owned by root, moved aside by a hydrate) goes too.
func (s *Sandbox) removeTrees(ctx context.Context, prefixes ...string) {
	if s.disk.mechanism == runtime.DiskLoopFS {
		_ = removeTreesHost(filepath.Join(s.disk.mnt(), diskHolder), prefixes...) // best effort, as the exec
		return
	}
	_, _ = s.Exec(ctx, runtime.ExecSpec{
		Argv: append([]string{"/bin/sh", "-c", removeTreesScript, "paddock-rmtree",
			path.Join(path.Dir(s.root), holderName)}, prefixes...),
		Timeout: 5 * time.Minute, MaxOutput: 4 << 10,
	})
}

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

// removeTreesHost removes the entries of the directory holder whose names
// start with one of prefixes. It goes through an os.Root: nothing the
// sandbox put there (a symlink, a directory swapped in meanwhile) leads
// it out of holder.
func removeTreesHost(holder string, prefixes ...string) error {
	root, err := os.OpenRoot(holder)
	if err != nil {
		return err
	}
	defer root.Close()
	dir, err := root.Open(".")
	if err != nil {
		return err
	}
	names, err := dir.Readdirnames(-1)
	dir.Close()
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		for _, p := range prefixes {
			if strings.HasPrefix(n, p) {
				errs = append(errs, root.RemoveAll(n))
				break
			}
		}
	}
	return errors.Join(errs...)
}

var _ runtime.HostWorkspace = (*Sandbox)(nil)

// HostWorkspaceDir returns the workspace directory of the node's own mount
// of the sandbox's loopfs disk. ok is false for the other disk mechanisms
// (the workspace is in the container's writable layer), once the sandbox is
// shut down, and while the disk is not mounted (a scan would find an empty
// directory where the workspace is).
func (s *Sandbox) HostWorkspaceDir() (string, bool) {
	if s.disk.mechanism != runtime.DiskLoopFS || s.disk.dir == "" || s.checkNotGone("scan workspace") != nil || !mounted(s.disk) {
		return "", false
	}
	return filepath.Join(s.disk.mnt(), diskWorkspace), true
}

var _ runtime.HostStager = (*Sandbox)(nil)

// StageHost makes an empty staging directory in the holder of the node's
// own mount of the sandbox's loopfs disk, owned by the sandbox's user as
// StageWorkspace's extraction makes it, for the node to write; its commit
// swaps the entries in on the host (swapIn) and its abort removes it. ok is
// false when HostWorkspaceDir's is (no loopfs disk, or not mounted): the
// caller stages a tar. The sandbox can reach the holder while the node
// writes: HostStage.Root confines every write to the staging directory.
func (s *Sandbox) StageHost(ctx context.Context) (runtime.HostStage, bool, error) {
	if _, ok := s.HostWorkspaceDir(); !ok {
		return runtime.HostStage{}, false, nil
	}
	o, err := s.owner(ctx)
	if err != nil {
		return runtime.HostStage{}, false, err
	}
	fail := func(err error) (runtime.HostStage, bool, error) {
		return runtime.HostStage{}, false, errcode.Wrap(errcode.RuntimeError, err, "hydrate: staging directory")
	}
	holder, err := os.OpenRoot(filepath.Join(s.disk.mnt(), diskHolder))
	if err != nil {
		return fail(err)
	}
	defer holder.Close()
	name := stagingPrefix + rand.Text()
	if err := holder.Mkdir(name, 0o755); err != nil {
		return fail(err)
	}
	root, err := holder.OpenRoot(name)
	if err == nil {
		// Through the opened directory: the name may be another by now.
		err = chownFile(root, o.uid, o.gid)
	}
	if err != nil {
		if root != nil {
			root.Close()
		}
		s.discard(ctx, name)
		return fail(err)
	}
	var used atomic.Bool
	return runtime.HostStage{
		Root: root, Chown: true, UID: o.uid, GID: o.gid,
		Commit: func() error {
			if used.Swap(true) {
				return errcode.New(errcode.Internal, "hydrate: the staged workspace was already committed or aborted")
			}
			root.Close()
			return s.swapIn(ctx, name)
		},
		Abort: func() {
			if !used.Swap(true) {
				root.Close()
				s.discard(ctx, name)
			}
		},
	}, true, nil
}

// chownFile gives the directory of root to uid and gid.
func chownFile(root *os.Root, uid, gid int) error {
	d, err := root.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Chown(uid, gid)
}
