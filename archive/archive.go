// Package archive reads and writes workspace archives: tar streams whose
// member names are paths relative to the workspace root.
//
// Reading is where the danger is, so every archive that is to be extracted
// goes through a Checker first, member by member, and only what it passed
// is extracted. It refuses (invalid_archive): absolute names, names with
// "..", members under a symlink of the same archive, symlinks whose target
// is absolute or leaves the workspace, hardlinks to anything but an earlier
// regular member, device nodes, fifos and other special members, more
// members than the limit, more bytes than the limit (archive and
// extracted: a decompression bomb stops at the extracted limit).
//
// Writing walks a directory through an os.Root (the local runtime) or
// re-bases the tar stream Docker's archive endpoint returns, skipping
// excluded paths, without ever holding the archive in memory.
package archive

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/paddock-dev/paddock/errcode"
)

// Limits bound what an archive may hold.
type Limits struct {
	// MaxArchiveBytes bounds the archive as stored (default 1 GiB).
	MaxArchiveBytes int64
	// MaxExtractedBytes bounds the sum of member sizes (default 4 GiB).
	MaxExtractedBytes int64
	// MaxMembers bounds the member count (default 100,000).
	MaxMembers int
}

// DefaultLimits returns the default limits.
func DefaultLimits() Limits {
	return Limits{MaxArchiveBytes: 1 << 30, MaxExtractedBytes: 4 << 30, MaxMembers: 100_000}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxArchiveBytes <= 0 {
		l.MaxArchiveBytes = d.MaxArchiveBytes
	}
	if l.MaxExtractedBytes <= 0 {
		l.MaxExtractedBytes = d.MaxExtractedBytes
	}
	if l.MaxMembers <= 0 {
		l.MaxMembers = d.MaxMembers
	}
	return l
}

// Stats describe an archive.
type Stats struct {
	Members int   `json:"members"`
	Bytes   int64 `json:"bytes"` // the sum of regular members' sizes
	// Skipped counts members left out on writing (excluded paths, special
	// files).
	Skipped int `json:"skipped,omitempty"`
}

func invalid(format string, args ...any) error {
	return errcode.New(errcode.InvalidArchive, format, args...)
}

// Checker validates an archive's members in order. Use one per archive.
type Checker struct {
	lim      Limits
	stats    Stats
	symlinks map[string]bool // members that are symlinks
	regular  map[string]bool // members that are regular files
}

// NewChecker returns a checker with lim (zero fields take the defaults).
func NewChecker(lim Limits) *Checker {
	return &Checker{lim: lim.withDefaults(), symlinks: map[string]bool{}, regular: map[string]bool{}}
}

// Stats returns what the checker has passed so far.
func (c *Checker) Stats() Stats { return c.stats }

// Check validates one member header and returns its clean name. It
// normalises the header in place (clean names, no owners, permission bits
// only) so that what is extracted is exactly what was checked. A directory
// member naming the workspace root itself ("./", as `tar -C dir .` writes)
// passes with an empty name: callers skip it.
func (c *Checker) Check(h *tar.Header) (string, error) {
	if h.Typeflag == tar.TypeDir && path.Clean(h.Name) == "." && !strings.HasPrefix(h.Name, "/") {
		return "", nil
	}
	name, err := cleanName(h.Name)
	if err != nil {
		return "", err
	}
	if c.stats.Members++; c.stats.Members > c.lim.MaxMembers {
		return "", invalid("more than %d members", c.lim.MaxMembers)
	}
	for p := path.Dir(name); p != "."; p = path.Dir(p) {
		if c.symlinks[p] {
			return "", invalid("member %q lies under the symlink %q", name, p)
		}
	}
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeRegA:
		if h.Size < 0 {
			return "", invalid("member %q has a negative size", name)
		}
		if c.stats.Bytes += h.Size; c.stats.Bytes > c.lim.MaxExtractedBytes {
			return "", invalid("members hold more than %d bytes", c.lim.MaxExtractedBytes)
		}
		h.Typeflag = tar.TypeReg
		c.regular[name] = true
	case tar.TypeDir:
	case tar.TypeSymlink:
		t := h.Linkname
		if t == "" || strings.ContainsRune(t, 0) || path.IsAbs(t) {
			return "", invalid("symlink %q has an empty or absolute target %q", name, t)
		}
		if to := path.Join(path.Dir(name), t); to == ".." || strings.HasPrefix(to, "../") {
			return "", invalid("symlink %q leads outside the workspace (%q)", name, t)
		}
		c.symlinks[name] = true
	case tar.TypeLink:
		t, err := cleanName(h.Linkname)
		if err != nil || !c.regular[t] {
			return "", invalid("hardlink %q must point to an earlier regular member, not %q", name, h.Linkname)
		}
		h.Linkname = t
	default:
		return "", invalid("member %q is of type %q: only files, directories and links are allowed", name, string(h.Typeflag))
	}
	if c.symlinks[name] && h.Typeflag != tar.TypeSymlink {
		return "", invalid("member %q replaces a symlink of the same archive", name)
	}
	h.Name = name
	if h.Typeflag == tar.TypeDir {
		h.Name += "/"
	}
	h.Mode &= 0o7777
	h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
	h.PAXRecords, h.Xattrs = nil, nil //nolint:staticcheck // Xattrs: clear what an old writer set
	h.Format = tar.FormatPAX
	return name, nil
}

// Next reads and checks the next member of tr, skipping the root entry,
// and returns its header and clean name; io.EOF at the end. A stream that
// is not a well-formed tar is invalid_archive.
func (c *Checker) Next(tr *tar.Reader) (*tar.Header, string, error) {
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, "", io.EOF
		}
		if err != nil {
			if errcode.Of(err) == errcode.InvalidArchive {
				return nil, "", err
			}
			return nil, "", errcode.Wrap(errcode.InvalidArchive, err, "read archive")
		}
		name, err := c.Check(h)
		if err != nil {
			return nil, "", err
		}
		if name != "" { // "" is the root itself
			return h, name, nil
		}
	}
}

// cleanName turns a member name into a clean workspace-relative path.
func cleanName(n string) (string, error) {
	if n == "" || strings.ContainsRune(n, 0) {
		return "", invalid("member with an empty name or a NUL byte")
	}
	if strings.HasPrefix(n, "/") {
		return "", invalid("member %q has an absolute name", n)
	}
	for _, part := range strings.Split(n, "/") {
		if part == ".." {
			return "", invalid("member %q climbs out with ..", n)
		}
	}
	c := path.Clean(n)
	if c == "." {
		return "", invalid("member %q names the workspace root", n)
	}
	return c, nil
}

// CountingReader counts the bytes read through it and refuses to read past
// a limit with invalid_archive.
type CountingReader struct {
	R     io.Reader
	Limit int64
	N     int64
}

// Read implements io.Reader.
func (c *CountingReader) Read(p []byte) (int, error) {
	n, err := c.R.Read(p)
	c.N += int64(n)
	if c.N > c.Limit {
		return n, invalid("the archive is larger than %d bytes", c.Limit)
	}
	return n, err
}

// Copy reads the tar stream r, checks every member and writes the checked
// members to w as a new tar stream; it stops at the first bad member.
// Member data is streamed, never held whole.
func Copy(w io.Writer, r io.Reader, lim Limits) (Stats, error) {
	return CopyAs(w, r, lim, 0, 0)
}

// CopyAs is Copy with every member owned by uid and gid. A member whose
// parent directories the archive has not given before it gets them first
// (mode 0755, owned by uid and gid): extracted by the Docker daemon, an
// archive without them would get them made by the daemon, owned by root.
// A member under a member that is not a directory is invalid_archive.
func CopyAs(w io.Writer, r io.Reader, lim Limits, uid, gid int) (Stats, error) {
	return copyUnder(w, r, lim, uid, gid, "")
}

// CopyUnder is CopyAs with the members moved under the directory dir, a
// clean relative path ("stage", ".paddock/stage-1"): the archive first
// writes dir and each of its parents (mode 0755, owned by uid and gid),
// then every checked member with dir/ prepended to its name and to a
// hardlink's target (symlink targets are relative to their link and stay
// as they are). Extracted beside a workspace, it stages the workspace's
// replacement in dir. Checks and stats are those of CopyAs; a dir that is
// not a clean relative path is an error.
func CopyUnder(w io.Writer, r io.Reader, lim Limits, uid, gid int, dir string) (Stats, error) {
	if dir == "" || path.IsAbs(dir) || path.Clean(dir) != dir || dir == "." || dir == ".." ||
		strings.HasPrefix(dir, "../") || strings.ContainsRune(dir, 0) {
		return Stats{}, fmt.Errorf("archive: %q is not a clean relative directory", dir)
	}
	return copyUnder(w, r, lim, uid, gid, dir)
}

func copyUnder(w io.Writer, r io.Reader, lim Limits, uid, gid int, dir string) (Stats, error) {
	lim = lim.withDefaults()
	c := NewChecker(lim)
	cr := &CountingReader{R: r, Limit: lim.MaxArchiveBytes}
	tr := tar.NewReader(cr)
	if w == io.Discard { // Check: no archive to write
		for {
			if _, _, err := c.Next(tr); errors.Is(err, io.EOF) {
				return c.stats, nil
			} else if err != nil {
				return c.stats, err
			}
		}
	}
	tw := tar.NewWriter(w)
	mkdir := func(name string) error {
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755,
			Uid: uid, Gid: gid, ModTime: time.Now(), Format: tar.FormatPAX,
		}); err != nil {
			return fmt.Errorf("write archive: %w", err)
		}
		return nil
	}
	if dir != "" {
		comps := strings.Split(dir, "/")
		for i := range comps {
			if err := mkdir(strings.Join(comps[:i+1], "/")); err != nil {
				return c.stats, err
			}
		}
	}
	// dirs holds the directories written so far: a member whose parent is
	// not among them gets it (and its own missing parents) first, so that
	// the daemon never makes one itself, owned by root.
	dirs := map[string]bool{}
	for {
		h, name, err := c.Next(tr)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return c.stats, err
		}
		var missing []string
		for p := path.Dir(name); p != "." && !dirs[p]; p = path.Dir(p) {
			if c.regular[p] || c.symlinks[p] {
				return c.stats, invalid("member %q lies under %q, which is not a directory", name, p)
			}
			missing = append(missing, p)
		}
		for i := len(missing) - 1; i >= 0; i-- {
			p := missing[i]
			if dir != "" {
				p = dir + "/" + p
			}
			if err := mkdir(p); err != nil {
				return c.stats, err
			}
			dirs[missing[i]] = true
		}
		if h.Typeflag == tar.TypeDir {
			dirs[name] = true
		} else {
			delete(dirs, name)
		}
		h.Uid, h.Gid = uid, gid
		if dir != "" {
			h.Name = dir + "/" + h.Name
			if h.Typeflag == tar.TypeLink {
				h.Linkname = dir + "/" + h.Linkname
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return c.stats, fmt.Errorf("write archive: %w", err)
		}
		if h.Typeflag == tar.TypeReg {
			if n, err := io.Copy(tw, tr); err != nil || n != h.Size {
				if errcode.Of(err) == errcode.InvalidArchive {
					return c.stats, err
				}
				return c.stats, errcode.Wrap(errcode.InvalidArchive, fmt.Errorf("member %s: %d of %d bytes: %v", h.Name, n, h.Size, err), "read archive")
			}
		}
	}
	if err := tw.Close(); err != nil {
		return c.stats, fmt.Errorf("write archive: %w", err)
	}
	return c.stats, nil
}

// Check reads the whole tar stream r and checks every member.
func Check(r io.Reader, lim Limits) (Stats, error) {
	return Copy(io.Discard, r, lim)
}
