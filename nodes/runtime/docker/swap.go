package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/paddock-dev/paddock/errcode"
)

// errHalfSwapped marks a swap that failed and could not move everything
// back: the staging directory is kept for whoever looks.
var errHalfSwapped = errors.New("not all of the old workspace could be moved back")

// swapHost is commitScript done by the node on its own mount of a loopfs
// disk, where the workspace (<mnt>/workspace) and the staging directory
// (<mnt>/paddock/<name>) are one file system: every workspace entry is
// renamed into <staging>/<aside> (a directory of the sandbox user's), then
// every staged entry into the workspace, then the staging directory to
// old, which the background sweep removes as the sandbox user. A failed
// rename moves everything back; what cannot be moved back is
// errHalfSwapped.
//
// The sandbox cannot redirect a rename: every rename is relative to a
// directory opened without following symlinks (renameat2 never follows
// its last component, and RENAME_NOREPLACE never replaces an entry made
// meanwhile), the workspace and holder directories are mount points inside
// the container (they cannot be renamed or replaced there), and the disk's
// root is not in the container at all.
func (s *Sandbox) swapHost(ctx context.Context, name, old, aside string) error {
	o, err := s.owner(ctx)
	if err != nil {
		return err
	}
	fail := func(what string, err error) error {
		return errcode.Wrap(errcode.RuntimeError, fmt.Errorf("%s: %w", what, err), "hydrate: the staged workspace could not be swapped in (the workspace is as it was)")
	}
	ws, err := openDirAt(unix.AT_FDCWD, filepath.Join(s.disk.mnt(), diskWorkspace))
	if err != nil {
		return fail("open the workspace", err)
	}
	defer ws.Close()
	holder, err := openDirAt(unix.AT_FDCWD, filepath.Join(s.disk.mnt(), diskHolder))
	if err != nil {
		return fail("open the holder", err)
	}
	defer holder.Close()
	stage, err := openDirAt(int(holder.Fd()), name)
	if err != nil {
		return fail("open the staging directory", err)
	}
	defer stage.Close()
	if err := unix.Mkdirat(int(stage.Fd()), aside, 0o700); err != nil {
		return fail("make the aside directory", err)
	}
	if err := unix.Fchownat(int(stage.Fd()), aside, o.uid, o.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fail("own the aside directory", err)
	}
	side, err := openDirAt(int(stage.Fd()), aside)
	if err != nil {
		return fail("open the aside directory", err)
	}
	defer side.Close()

	olds, err := ws.Readdirnames(-1)
	if err != nil {
		return fail("list the workspace", err)
	}
	move := func(from, to *os.File, names []string) ([]string, error) {
		var done []string
		for _, n := range names {
			if err := unix.Renameat2(int(from.Fd()), n, int(to.Fd()), n, unix.RENAME_NOREPLACE); err != nil {
				return done, fmt.Errorf("move %q: %w", n, err)
			}
			done = append(done, n)
		}
		return done, nil
	}
	back := func(cause error, movedIn []string, movedOut []string) error {
		_, err1 := move(ws, stage, movedIn)
		_, err2 := move(side, ws, movedOut)
		if err1 != nil || err2 != nil {
			return errcode.Wrap(errcode.RuntimeError, errors.Join(cause, errHalfSwapped, err1, err2),
				"hydrate: the staged workspace could not be swapped in, and not all of the old one could be moved back; the rest is kept beside the workspace root")
		}
		return fail("swap", cause)
	}
	movedOut, err := move(ws, side, olds)
	if err != nil {
		return back(err, nil, movedOut)
	}
	news, err := stage.Readdirnames(-1)
	if err != nil {
		return back(err, nil, movedOut)
	}
	var staged []string
	for _, n := range news {
		if n != aside {
			staged = append(staged, n)
		}
	}
	movedIn, err := move(stage, ws, staged)
	if err != nil {
		return back(err, movedIn, movedOut)
	}
	// Best effort: the sweep removes <name> as well as old-*.
	_ = unix.Renameat2(int(holder.Fd()), name, int(holder.Fd()), old, unix.RENAME_NOREPLACE)
	return nil
}

// openDirAt opens the directory name relative to dirfd without following
// a symlink.
func openDirAt(dirfd int, name string) (*os.File, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}
