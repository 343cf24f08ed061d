// Package overlay mounts a sandbox's workspace as an overlay of a
// read-only tree the node keeps (a snapshot it restored before) and an
// upper directory on the sandbox's own disk, so that a restore of a
// snapshot the node already holds as a tree writes no file: the mount is
// the restore (docs/architecture.md, "Restore from a kept tree").
//
// The lower tree is never written through the overlay: a write copies
// the file up into the upper directory first. It must not change while
// mounted; the node's tree cache (package trees) never removes a tree
// that Lowers or a record names.
package overlay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/paddock-dev/paddock/errcode"
)

// Mount mounts at target an overlay whose lower layer is lower (read
// only) and whose writes go to upper, with work as the overlay's work
// directory (upper and work on one file system, work empty). Directory
// renames are allowed (redirect_dir), as on any file system. Every path
// must be absolute. A kernel or a process that cannot mount overlays
// gives ErrUnsupported (wrapped): the caller restores another way.
//
// volatile skips every sync of the upper's file system, the unmount's
// included (which otherwise flushes all of that file system's dirty
// data, whoever wrote it); fsync in the overlay does nothing then, and
// after a crash of the host the upper must be thrown away: for a
// workspace nothing brings back after a crash (the local runtime's).
// Mounting a volatile overlay again on a work directory it used needs
// ClearVolatile first.
func Mount(lower, upper, work, target string, volatile bool) error {
	for _, p := range []string{lower, upper, work, target} {
		if !filepath.IsAbs(p) || strings.ContainsAny(p, ",:\\\n\t ") {
			return errcode.New(errcode.Internal, "overlay: path %q is not absolute or holds a character the mount options cannot carry", p)
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,redirect_dir=on", lower, upper, work)
	if volatile {
		opts += ",volatile"
	}
	err := unix.Mount("overlay", target, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.ENODEV), errors.Is(err, unix.ENOSYS):
		return fmt.Errorf("%w: mount overlay at %s: %v", ErrUnsupported, target, err)
	default:
		return errcode.Wrap(errcode.RuntimeError, err, "mount the workspace's overlay")
	}
}

// ClearVolatile removes the mark a volatile overlay leaves in its work
// directory, for a mount again on it within the same boot of the host
// (nothing was lost: the page cache holds what was not synced).
func ClearVolatile(work string) error {
	err := os.RemoveAll(filepath.Join(work, "work", "incompat"))
	if err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "clear the overlay's volatile mark")
	}
	return nil
}

// Probe reports whether this process can mount an overlay, by mounting
// and unmounting an empty one in a directory it makes under dir (and
// removes): the first restore of a host where it cannot then writes its
// files once, not a tree first.
func Probe(dir string) error {
	d, err := os.MkdirTemp(dir, ".probe-")
	if err != nil {
		return errcode.Wrap(errcode.Internal, err, "overlay probe")
	}
	defer os.RemoveAll(d)
	for _, sub := range []string{"lower", "upper", "work", "target"} {
		if err := os.Mkdir(filepath.Join(d, sub), 0o700); err != nil {
			return errcode.Wrap(errcode.Internal, err, "overlay probe")
		}
	}
	target := filepath.Join(d, "target")
	if err := Mount(filepath.Join(d, "lower"), filepath.Join(d, "upper"), filepath.Join(d, "work"), target, true); err != nil {
		return err
	}
	return Unmount(target)
}

// ErrUnsupported says that this process cannot mount overlays (not root,
// or no overlay in the kernel).
var ErrUnsupported = errors.New("overlay mounts are not supported here")

// Unmount detaches the overlay mounted at target, lazily (a process that
// still has a file open in it keeps that view until it closes it).
// Nothing mounted at target is not an error.
func Unmount(target string) error {
	err := unix.Unmount(target, unix.MNT_DETACH)
	if err == nil || errors.Is(err, syscall.EINVAL) || errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return errcode.Wrap(errcode.RuntimeError, err, "unmount the workspace's overlay")
}

// Mounted reports whether an overlay is mounted at target.
func Mounted(target string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil {
		return false
	}
	return st.Type == unix.OVERLAYFS_SUPER_MAGIC
}

// Lowers returns the lower directories of the overlays mounted in this
// process's mount namespace (from /proc/self/mountinfo).
func Lowers() (map[string]bool, error) {
	ms, err := mounts()
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, m := range ms {
		for _, l := range m.lowers {
			out[l] = true
		}
	}
	return out, nil
}

// MountedUnder returns the mount points of the overlays mounted at or
// below dir, deepest first.
func MountedUnder(dir string) ([]string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "overlay mounts")
	}
	ms, err := mounts()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range ms {
		if m.target == dir || strings.HasPrefix(m.target, dir+string(filepath.Separator)) {
			out = append(out, m.target)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// mounted is one overlay of the mount table: where, and over what.
type mounted struct {
	target string
	lowers []string
}

// mounts returns the overlays in /proc/self/mountinfo.
func mounts() ([]mounted, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "read the mount table")
	}
	var out []mounted
	for _, line := range strings.Split(string(b), "\n") {
		if m, ok := parseLine(line); ok {
			out = append(out, m)
		}
	}
	return out, nil
}

// parseLine reads a mountinfo line (proc(5)) when it is an overlay's: the
// mount point is the fifth field; after " - " come the type, the source
// and the super block's options, which name the lower directories.
func parseLine(line string) (mounted, bool) {
	pre, post, ok := strings.Cut(line, " - ")
	f, g := strings.Fields(pre), strings.Fields(post)
	if !ok || len(f) < 5 || len(g) < 3 || g[0] != "overlay" {
		return mounted{}, false
	}
	m := mounted{target: unescape(f[4])}
	for _, o := range strings.Split(g[2], ",") {
		k, v, ok := strings.Cut(o, "=")
		if !ok || (k != "lowerdir" && k != "lowerdir+") {
			continue
		}
		for _, l := range strings.Split(v, ":") {
			if l != "" {
				m.lowers = append(m.lowers, unescape(l))
			}
		}
	}
	return m, true
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			var n int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &n); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// WriteRecord records beside a sandbox that its workspace is an overlay
// of lower with upper (so that it is mounted again after the host
// restarts, and the tree is kept meanwhile); it is written whole or not
// at all.
func WriteRecord(path string, r Record) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(r.Lower+"\n"+r.Upper+"\n"), 0o600); err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "record the workspace's overlay")
	}
	if err := os.Rename(tmp, path); err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "record the workspace's overlay")
	}
	return nil
}

// Record is what WriteRecord keeps: the overlay's lower tree and its
// upper directory (its work directory is the upper's sibling "work", as
// NewLayer makes them).
type Record struct {
	Lower, Upper string
}

// Mount mounts the overlay r at target (see Mount; a volatile one again
// on its work directory, within the same boot of the host).
func (r Record) Mount(target string, volatile bool) error {
	work := filepath.Join(filepath.Dir(r.Upper), "work")
	if volatile {
		if err := ClearVolatile(work); err != nil {
			return err
		}
	}
	return Mount(r.Lower, r.Upper, work, target, volatile)
}

// Layer is an overlay's writable side: an upper and a work directory
// side by side in Dir.
type Layer struct{ Dir string }

// Upper is the layer's upper directory.
func (l Layer) Upper() string { return filepath.Join(l.Dir, "upper") }

// Work is the layer's work directory.
func (l Layer) Work() string { return filepath.Join(l.Dir, "work") }

// Over is the record of l over lower.
func (l Layer) Over(lower string) Record { return Record{Lower: lower, Upper: l.Upper()} }

// NewLayer makes a layer in a new directory under base: the upper 0755
// (a workspace root's mode), given to uid:gid unless uid is negative;
// the work directory 0700. On an error nothing is left.
func NewLayer(base string, uid, gid int) (Layer, error) {
	dir, err := os.MkdirTemp(base, "layer-")
	if err != nil {
		return Layer{}, errcode.Wrap(errcode.RuntimeError, err, "overlay directory")
	}
	l := Layer{Dir: dir}
	err = os.Mkdir(l.Upper(), 0o755)
	if err == nil {
		err = os.Chmod(l.Upper(), 0o755) // past the umask
	}
	if err == nil && uid >= 0 {
		err = os.Lchown(l.Upper(), uid, gid)
	}
	if err == nil {
		err = os.Mkdir(l.Work(), 0o700)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return Layer{}, errcode.Wrap(errcode.RuntimeError, err, "overlay directory")
	}
	return l, nil
}

// ReadRecord reads a record; ok is false when there is none.
func ReadRecord(path string) (r Record, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, errcode.Wrap(errcode.RuntimeError, err, "read the workspace's overlay record")
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 2 || !filepath.IsAbs(lines[0]) || !filepath.IsAbs(lines[1]) {
		return Record{}, false, errcode.New(errcode.RuntimeError, "the workspace's overlay record %s is malformed", path)
	}
	return Record{Lower: lines[0], Upper: lines[1]}, true, nil
}
