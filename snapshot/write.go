package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/errcode"
)

// WriteOptions tune WriteDir.
type WriteOptions struct {
	// Parallel bounds the files written at once (below 1: 1). Each writer
	// holds one chunk at a time.
	Parallel int
	// Chown gives every entry written to UID and GID (the sandbox's
	// user); otherwise entries belong to the caller.
	Chown    bool
	UID, GID int
	// Verified says that get returns only bytes it has checked against
	// their digest (the node's chunk cache and the object store's
	// GetChunk both do): WriteDir then checks their length only, instead
	// of hashing every chunk a second time.
	Verified bool
	// Limits are the archive limits a tar of m would be held to (zero
	// fields: archive's defaults).
	Limits archive.Limits
}

// WriteDir writes the manifest m into root, a directory that should be
// empty (a staging directory that is then swapped in for the workspace):
// its directories first, in manifest order, then its files and symlinks
// with up to opts.Parallel files written at once, each file's chunks
// fetched with get in order; last, each directory is given its mode,
// deepest first (a 0555 directory is written into before it is made
// read-only). Before anything is written, every entry passes archive's
// checker with opts.Limits as the member WriteTar would make of it passes
// StageWorkspace: a symlink whose target is absolute or leads outside the
// workspace, or a manifest past the limits, is invalid_archive, as it is
// through the tar path. Modes keep the permission bits only (0777), as the tar
// extractor does: setuid, setgid and sticky bits do not survive a
// restore. Every operation goes through root (openat-style, confined to
// it), so a symlink that someone else plants in the directory while it is
// written never leads a write outside it; a new entry never replaces or
// follows an existing one (files are created O_EXCL|O_NOFOLLOW,
// directories with mkdir): an entry already there is runtime_error, as is
// any file system error. A manifest that does not validate is
// invalid_request; a chunk whose length (or, unless opts.Verified, whose
// sha256) is not the manifest's is internal "corrupt chunk"; a get's
// error, or ctx's, stops the write and is returned (wrapped). On an
// error, what was written stays for the caller to remove.
func WriteDir(ctx context.Context, root *os.Root, m *Manifest,
	get func(ctx context.Context, digest string) ([]byte, error), opts WriteOptions) (archive.Stats, error) {
	var st archive.Stats
	if err := m.validate(Limits{}.withDefaults()); err != nil {
		return st, err
	}
	c := archive.NewChecker(opts.Limits)
	for i := range m.Entries {
		if _, err := c.Check(headerOf(&m.Entries[i], time.Time{})); err != nil {
			return st, err
		}
	}
	fail := func(what, p string, err error) error {
		return errcode.Wrap(errcode.RuntimeError, fmt.Errorf("%s %q: %w", what, p, err), "restore into the workspace")
	}
	own := func(f *os.File, p string) error {
		if !opts.Chown {
			return nil
		}
		if err := f.Chown(opts.UID, opts.GID); err != nil {
			return fail("own", p, err)
		}
		return nil
	}
	// Directories, parents first (the manifest lists a parent before its
	// children), writable by their owner until the end.
	var dirs []*Entry
	for i := range m.Entries {
		e := &m.Entries[i]
		if e.Kind != KindDir {
			continue
		}
		if err := ctx.Err(); err != nil {
			return st, err
		}
		if err := root.Mkdir(e.Path, 0o700); err != nil {
			return st, fail("make directory", e.Path, err)
		}
		dirs = append(dirs, e)
		st.Members++
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		members, written atomic.Int64
		errOnce          sync.Once
		firstErr         error
	)
	setErr := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel() })
	}
	jobs := make(chan *Entry)
	var wg sync.WaitGroup
	for range max(opts.Parallel, 1) {
		wg.Go(func() {
			for e := range jobs {
				if ctx.Err() != nil {
					continue // drain
				}
				n, err := writeEntry(ctx, root, e, get, opts, own, fail)
				if err != nil {
					setErr(err)
					continue
				}
				members.Add(1)
				written.Add(n)
			}
		})
	}
feed:
	for i := range m.Entries {
		e := &m.Entries[i]
		if e.Kind == KindDir {
			continue
		}
		select {
		case jobs <- e:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	st.Members += int(members.Load())
	st.Bytes += written.Load()
	if firstErr != nil {
		return st, firstErr
	}
	if err := ctx.Err(); err != nil {
		return st, err
	}
	// Modes and owners last, deepest first.
	for _, e := range slices.Backward(dirs) {
		d, err := root.OpenFile(e.Path, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return st, fail("open directory", e.Path, err)
		}
		err = own(d, e.Path)
		if err == nil {
			if cerr := d.Chmod(fs.FileMode(e.Mode & 0o777)); cerr != nil {
				err = fail("set the mode of", e.Path, cerr)
			}
		}
		d.Close()
		if err != nil {
			return st, err
		}
	}
	return st, nil
}

// writeEntry writes one file or symlink e and returns the bytes written.
func writeEntry(ctx context.Context, root *os.Root, e *Entry,
	get func(ctx context.Context, digest string) ([]byte, error), opts WriteOptions,
	own func(*os.File, string) error, fail func(what, p string, err error) error) (int64, error) {
	if e.Kind == KindSymlink {
		if err := root.Symlink(e.Target, e.Path); err != nil {
			return 0, fail("make symlink", e.Path, err)
		}
		if opts.Chown {
			if err := root.Lchown(e.Path, opts.UID, opts.GID); err != nil {
				return 0, fail("own", e.Path, err)
			}
		}
		return 0, nil
	}
	f, err := root.OpenFile(e.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return 0, fail("create file", e.Path, err)
	}
	defer f.Close()
	var n int64
	for i, d := range e.Chunks {
		data, err := get(ctx, d)
		if err != nil {
			return n, fmt.Errorf("chunk %s of %s: %w", d, e.Path, err)
		}
		if int64(len(data)) != chunkLen(e.Size, i) {
			return n, errcode.New(errcode.Internal, "corrupt chunk %s of %s", d, e.Path)
		}
		if !opts.Verified {
			if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != d {
				return n, errcode.New(errcode.Internal, "corrupt chunk %s of %s", d, e.Path)
			}
		}
		if _, err := f.Write(data); err != nil {
			return n, fail("write file", e.Path, err)
		}
		n += int64(len(data))
	}
	if err := own(f, e.Path); err != nil {
		return n, err
	}
	// After the chown, which clears setuid/setgid bits (none are kept).
	if err := f.Chmod(fs.FileMode(e.Mode & 0o777)); err != nil {
		return n, fail("set the mode of", e.Path, err)
	}
	if err := f.Close(); err != nil {
		return n, fail("write file", e.Path, err)
	}
	return n, nil
}
