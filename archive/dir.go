package archive

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"github.com/paddock-dev/paddock/errcode"
)

// Skip reports whether a workspace-relative path (and, for a directory,
// everything below it) is left out of an archive.
type Skip func(rel string) bool

// WriteDir writes the tree under root as a tar stream of workspace-relative
// members: directories, regular files and symlinks (not followed), with
// their modes and times. Sockets, fifos and devices are skipped and
// counted.
func WriteDir(w io.Writer, root *os.Root, skip Skip) (Stats, error) {
	var st Stats
	tw := tar.NewWriter(w)
	err := fs.WalkDir(root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		if skip != nil && skip(rel) {
			st.Skipped++
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed while walking
		}
		if err != nil {
			return err
		}
		link := ""
		switch m := fi.Mode(); {
		case m&fs.ModeSymlink != 0:
			if link, err = root.Readlink(rel); err != nil {
				return err
			}
		case m.IsDir(), m.IsRegular():
		default:
			st.Skipped++
			return nil
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.Format = rel, 0, 0, "", "", tar.FormatPAX
		// Access and change times change on every read: leave them out so
		// that an unchanged workspace archives to the same bytes (its
		// fingerprint).
		h.AccessTime, h.ChangeTime = time.Time{}, time.Time{}
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		st.Members++
		if fi.Mode().IsRegular() {
			f, err := root.Open(rel)
			if err != nil {
				return err
			}
			n, err := io.CopyN(tw, f, h.Size)
			f.Close()
			if err != nil {
				return fmt.Errorf("%s changed while archived (%d of %d bytes): %w", rel, n, h.Size, err)
			}
			st.Bytes += n
		}
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("archive workspace: %w", err)
	}
	return st, tw.Close()
}

// Rebase rewrites the tar stream of a directory as Docker's archive
// endpoint returns it (members "<dir>/...") into workspace-relative members,
// leaving out the directory itself, skipped paths and special files.
func Rebase(w io.Writer, r io.Reader, skip Skip) (Stats, error) {
	var st Stats
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	skipped := map[string]bool{}
	strip := func(n string) string {
		_, rest, _ := strings.Cut(strings.TrimSuffix(n, "/"), "/")
		return rest
	}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return st, fmt.Errorf("read workspace archive: %w", err)
		}
		rel := strip(h.Name)
		if rel == "" {
			continue // the workspace root itself
		}
		under := false
		for p := path.Dir(rel); p != "."; p = path.Dir(p) {
			under = under || skipped[p]
		}
		if under || (skip != nil && skip(rel)) {
			st.Skipped++
			skipped[rel] = true
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir, tar.TypeReg, tar.TypeRegA, tar.TypeSymlink:
		case tar.TypeLink:
			h.Linkname = strip(h.Linkname)
		default:
			st.Skipped++
			continue
		}
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.Format = rel, 0, 0, "", "", tar.FormatPAX
		h.AccessTime, h.ChangeTime = time.Time{}, time.Time{}
		if h.Typeflag == tar.TypeDir {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return st, err
		}
		st.Members++
		if h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeRegA {
			n, err := io.Copy(tw, tr)
			if err != nil {
				return st, fmt.Errorf("read workspace archive: %w", err)
			}
			st.Bytes += n
		}
	}
	return st, tw.Close()
}

// Extract checks the tar stream r member by member and extracts what
// passes into root, which should be empty: directories, regular files with
// their modes and times, symlinks and hardlinks inside the workspace. It
// stops at the first bad member with invalid_archive; callers check the
// whole archive first (Check) so that a bad one leaves nothing behind.
func Extract(root *os.Root, r io.Reader, lim Limits) (Stats, error) {
	lim = lim.withDefaults()
	c := NewChecker(lim)
	tr := tar.NewReader(&CountingReader{R: r, Limit: lim.MaxArchiveBytes})
	type dirMode struct {
		name  string
		mode  fs.FileMode
		mtime time.Time
	}
	var dirs []dirMode
	made := map[string]bool{".": true} // directories known to exist
	mkdirAll := func(d string) error {
		if made[d] {
			return nil
		}
		if err := root.MkdirAll(d, 0o755); err != nil {
			return err
		}
		for ; d != "." && !made[d]; d = path.Dir(d) {
			made[d] = true
		}
		return nil
	}
	for {
		h, name, err := c.Next(tr)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return c.stats, err
		}
		if err := mkdirAll(path.Dir(name)); err != nil {
			return c.stats, extractErr(name, err)
		}
		mode := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := mkdirAll(name); err != nil {
				return c.stats, extractErr(name, err)
			}
			dirs = append(dirs, dirMode{name, mode, h.ModTime})
		case tar.TypeReg:
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
			if err != nil {
				return c.stats, extractErr(name, err)
			}
			n, err := io.CopyN(f, tr, h.Size)
			if err == nil {
				err = f.Chmod(mode)
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				if errcode.Of(err) == errcode.InvalidArchive {
					return c.stats, err
				}
				return c.stats, extractErr(name, fmt.Errorf("%d of %d bytes: %w", n, h.Size, err))
			}
			_ = root.Chtimes(name, h.ModTime, h.ModTime)
		case tar.TypeSymlink:
			_ = root.Remove(name)
			if err := root.Symlink(h.Linkname, name); err != nil {
				return c.stats, extractErr(name, err)
			}
		case tar.TypeLink:
			_ = root.Remove(name)
			if err := root.Link(h.Linkname, name); err != nil {
				return c.stats, extractErr(name, err)
			}
		}
	}
	// Directory modes last, deepest first, so a read-only directory does
	// not stop its own members from being written.
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if err := root.Chmod(d.name, d.mode); err != nil {
			return c.stats, extractErr(d.name, err)
		}
		_ = root.Chtimes(d.name, d.mtime, d.mtime)
	}
	return c.stats, nil
}

func extractErr(name string, err error) error {
	if strings.Contains(err.Error(), "path escapes from parent") {
		return errcode.Wrap(errcode.InvalidArchive, err, "member "+name+" leads outside the workspace")
	}
	return errcode.Wrap(errcode.RuntimeError, err, "extract "+name)
}
