package local

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// File operations resolve a workspace path lexically with runtime.Rel, then
// act through the workspace's os.Root, which refuses any symlink that leads
// outside it. They work on a stopped sandbox and are invalid_state after
// Shutdown.

// ReadFile returns a regular file's content and permission bits. A path
// outside the workspace is invalid_path, a missing file not_found, a
// directory or other non-regular file invalid_request, and a file larger
// than limit payload_too_large.
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
	root, rel, err := s.resolve(p)
	if err != nil {
		return 0, 0, err
	}
	// O_NONBLOCK: opening a FIFO a command planted must not block; it is
	// refused below as not regular.
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, 0, s.fsErr(err, rel, "read")
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, s.fsErr(err, rel, "read")
	}
	switch {
	case fi.IsDir():
		return 0, 0, errcode.New(errcode.InvalidRequest, "read: %s is a directory", rel)
	case !fi.Mode().IsRegular():
		return 0, 0, errcode.New(errcode.InvalidRequest, "read: %s is not a regular file", rel)
	case fi.Size() > limit:
		return 0, 0, errcode.New(errcode.PayloadTooLarge, "read: %s has %d bytes, over the limit of %d", rel, fi.Size(), limit)
	}
	// A file that grows while read is cut at its size when opened.
	n, err := io.CopyN(w, f, fi.Size())
	if err != nil && !errors.Is(err, io.EOF) {
		return n, 0, s.fsErr(err, rel, "read")
	}
	return n, fi.Mode().Perm(), nil
}

// WriteFile replaces a file atomically with data and sets its mode exactly
// (0: 0644), making missing parent directories. It writes a temporary file
// beside the target and renames it over. The workspace root or a path
// outside it is invalid_path; an existing directory is invalid_request.
func (s *Sandbox) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	return s.WriteFileFrom(ctx, p, bytes.NewReader(data), int64(len(data)), mode)
}

// WriteFileFrom is WriteFile with the content streamed from r, which must
// hold exactly size bytes.
func (s *Sandbox) WriteFileFrom(ctx context.Context, p string, r io.Reader, size int64, mode fs.FileMode) error {
	root, rel, err := s.resolve(p)
	if err != nil {
		return err
	}
	if rel == "." {
		return errcode.New(errcode.InvalidPath, "write: the workspace root is not a file")
	}
	if mode == 0 {
		mode = 0o644
	}
	if fi, err := root.Lstat(rel); err == nil && fi.IsDir() {
		return errcode.New(errcode.InvalidRequest, "write: %s is a directory", rel)
	}
	dir := path.Dir(rel)
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return s.fsErr(err, dir, "write")
	}
	tmp := path.Join(dir, ".paddock-write-"+rand.Text())
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return s.fsErr(err, rel, "write")
	}
	n, err := io.CopyN(f, r, size)
	if err != nil {
		err = errcode.Wrap(errcode.InvalidRequest, err, fmt.Sprintf("write: %d of %d bytes arrived", n, size))
	}
	if err == nil {
		err = f.Chmod(mode) // fchmod: the umask does not apply
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, rel)
	}
	if err != nil {
		_ = root.Remove(tmp)
		if errcode.Of(err) == errcode.InvalidRequest {
			return err
		}
		return s.fsErr(err, rel, "write")
	}
	return nil
}

// List returns a directory's entries sorted by name, or a file's or
// symlink's own entry: symlinks are listed, not followed, in a directory
// and as the last component of p alike. A path outside the workspace is
// invalid_path, a missing one not_found.
func (s *Sandbox) List(ctx context.Context, p string) ([]commands.Entry, error) {
	root, rel, err := s.resolve(p)
	if err != nil {
		return nil, err
	}
	fi, err := root.Lstat(rel)
	if err != nil {
		return nil, s.fsErr(err, rel, "ls")
	}
	if !fi.IsDir() {
		return []commands.Entry{entry(fi)}, nil
	}
	d, err := root.Open(rel)
	if err != nil {
		return nil, s.fsErr(err, rel, "ls")
	}
	defer d.Close()
	des, err := d.ReadDir(-1)
	if err != nil {
		return nil, s.fsErr(err, rel, "ls")
	}
	out := make([]commands.Entry, 0, len(des))
	for _, de := range des {
		info, err := de.Info() // lstat
		if err != nil {
			continue // removed while listing
		}
		out = append(out, entry(info))
	}
	slices.SortFunc(out, func(a, b commands.Entry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ListPage returns one page of a directory's entries: those named after
// after (byte order), at most limit, and whether more follow. It reads
// the directory's names and stats only the page's entries, so paging
// through a large directory costs one read of its names per page, not one
// stat of every entry. A file lists itself on the first page.
func (s *Sandbox) ListPage(ctx context.Context, p, after string, limit int) ([]commands.Entry, bool, error) {
	root, rel, err := s.resolve(p)
	if err != nil {
		return nil, false, err
	}
	fi, err := root.Lstat(rel) // a symlink lists itself, as in List
	if err != nil {
		return nil, false, s.fsErr(err, rel, "ls")
	}
	if !fi.IsDir() {
		if after != "" && fi.Name() <= after {
			return nil, false, nil
		}
		return []commands.Entry{entry(fi)}, false, nil
	}
	d, err := root.Open(rel)
	if err != nil {
		return nil, false, s.fsErr(err, rel, "ls")
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, false, s.fsErr(err, rel, "ls")
	}
	slices.Sort(names)
	from, _ := slices.BinarySearch(names, after)
	if from < len(names) && names[from] == after {
		from++
	}
	out := make([]commands.Entry, 0, min(limit, len(names)-from))
	more := false
	for _, name := range names[from:] {
		if len(out) == limit {
			more = true
			break
		}
		info, err := root.Lstat(path.Join(rel, name))
		if err != nil {
			continue // removed while listing
		}
		out = append(out, entry(info))
	}
	return out, more, nil
}

func entry(fi fs.FileInfo) commands.Entry {
	typ := "other"
	switch m := fi.Mode(); {
	case m.IsRegular():
		typ = "file"
	case m.IsDir():
		typ = "dir"
	case m&fs.ModeSymlink != 0:
		typ = "symlink"
	}
	return commands.Entry{
		Name:    fi.Name(),
		Type:    typ,
		Size:    fi.Size(),
		Mode:    uint32(fi.Mode().Perm()),
		ModTime: fi.ModTime().UTC(),
	}
}

// Remove removes a file, symlink or empty directory, or a whole tree when
// recursive. The workspace root or a path outside it is invalid_path, a
// missing path not_found, and a non-empty directory without recursive
// invalid_request.
func (s *Sandbox) Remove(ctx context.Context, p string, recursive bool) error {
	root, rel, err := s.resolve(p)
	if err != nil {
		return err
	}
	if rel == "." {
		return errcode.New(errcode.InvalidPath, "rm: the workspace root cannot be removed")
	}
	if _, err := root.Lstat(rel); err != nil {
		return s.fsErr(err, rel, "rm")
	}
	if recursive {
		err = root.RemoveAll(rel)
	} else {
		err = root.Remove(rel)
	}
	if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
		return errcode.New(errcode.InvalidRequest, "rm: directory %s is not empty; use recursive", rel)
	}
	return s.fsErr(err, rel, "rm")
}

// Mkdir makes a directory, mode 0755. With parents it makes missing parents
// and accepts an existing directory (following a symlink to judge it);
// without, a missing parent is not_found. An existing entry (any existing
// one, a symlink included, without parents) is already_exists; a path
// outside the workspace is invalid_path.
func (s *Sandbox) Mkdir(ctx context.Context, p string, parents bool) error {
	root, rel, err := s.resolve(p)
	if err != nil {
		return err
	}
	if parents {
		return s.fsErr(root.MkdirAll(rel, 0o755), rel, "mkdir")
	}
	if rel == "." {
		return errcode.New(errcode.AlreadyExists, "mkdir: the workspace root exists")
	}
	err = root.Mkdir(rel, 0o755)
	if errors.Is(err, fs.ErrExist) && !s.escapes(path.Dir(rel)) {
		// The entry exists in the workspace: a symlink is not followed to
		// say so, whatever its target.
		return errcode.New(errcode.AlreadyExists, "mkdir: %s already exists", rel)
	}
	return s.fsErr(err, rel, "mkdir")
}

// resolve returns the workspace root and p relative to it.
func (s *Sandbox) resolve(p string) (*os.Root, string, error) {
	rel, err := runtime.Rel(s.vroot, p)
	if err != nil {
		return nil, "", err
	}
	if err := s.checkParents(rel); err != nil {
		return nil, "", err
	}
	root, err := s.fsRoot()
	if err != nil {
		return nil, "", err
	}
	return root, rel, nil
}

// fsErr maps a file system error on rel to a coded error. An escape is
// recognised by resolving rel's symlinks, not by the error's text. A name
// or path too long, or a loop of symbolic links, is invalid_path, as on
// every runtime.
func (s *Sandbox) fsErr(err error, rel, op string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ENAMETOOLONG):
		return errcode.Wrap(errcode.InvalidPath, err, op+": "+rel+": a name or path is too long")
	case errors.Is(err, syscall.ELOOP):
		return errcode.Wrap(errcode.InvalidPath, err, op+": "+rel+": too many levels of symbolic links")
	}
	switch s.walk(rel) {
	case walkEscapes:
		return errcode.New(errcode.InvalidPath, "%s: %s leads outside the workspace", op, rel)
	case walkTooLong:
		// Some file systems (overlayfs, under every container) answer
		// ENOENT, not ENAMETOOLONG, for a name over 255 bytes.
		return errcode.Wrap(errcode.InvalidPath, err, op+": "+rel+": a name or path is too long")
	}
	switch {
	case errors.Is(err, os.ErrClosed): // Shutdown closed the root meanwhile
		return errcode.New(errcode.InvalidState, "%s: sandbox is shut down", op)
	case errors.Is(err, fs.ErrNotExist):
		return errcode.New(errcode.NotFound, "%s: %s does not exist", op, rel)
	case errors.Is(err, fs.ErrExist):
		return errcode.New(errcode.AlreadyExists, "%s: %s already exists", op, rel)
	case errors.Is(err, syscall.ENOTDIR):
		return errcode.New(errcode.InvalidRequest, "%s: a parent of %s is not a directory", op, rel)
	}
	return errcode.Wrap(errcode.RuntimeError, err, op+" "+rel)
}

// maxLinks bounds the symlinks escapes follows, as the kernel's ELOOP does.
const maxLinks = 40

// What walk finds of a path.
const (
	walkInside  = iota // it stays in the workspace
	walkEscapes        // it leads outside
	walkTooLong        // a name on its way is over runtime.MaxNameBytes, or the path over MaxPathBytes
)

// escapes reports whether resolving rel leads outside the workspace.
func (s *Sandbox) escapes(rel string) bool { return s.walk(rel) == walkEscapes }

// walk resolves rel inside the workspace, following its symlinks as the
// host would, and says whether it leads outside the workspace (an
// absolute link target counts as outside: os.Root refuses those too) or
// through a name or to a path too long.
func (s *Sandbox) walk(rel string) int {
	parts := strings.Split(rel, "/")
	cur := "." // resolved so far, free of symlinks, relative to the workspace
	for links := 0; len(parts) > 0; {
		part := parts[0]
		parts = parts[1:]
		if part == "" || part == "." {
			continue
		}
		if len(part) > runtime.MaxNameBytes {
			return walkTooLong
		}
		next := path.Join(cur, part)
		if next == ".." || strings.HasPrefix(next, "../") {
			return walkEscapes
		}
		if len(s.dir)+1+len(next) > runtime.MaxPathBytes {
			return walkTooLong
		}
		host := filepath.Join(s.dir, filepath.FromSlash(next))
		fi, err := os.Lstat(host)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return walkEscapes
		}
		target, err := os.Readlink(host)
		if err != nil || path.IsAbs(target) {
			return walkEscapes
		}
		parts = append(strings.Split(target, "/"), parts...)
	}
	return walkInside
}
