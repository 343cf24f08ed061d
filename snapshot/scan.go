package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/errcode"
	"golang.org/x/sys/unix"
)

// scanWorkers is how many files a scan hashes at once.
const scanWorkers = 4

// scanWalkers is how many directories a scan reads at once: a warm scan
// is mostly stat calls.
const scanWalkers = 4

// racyWindow is how close to a scan's start a file's mtime or ctime may
// be for the next scan to trust the digests this scan read: a file
// written in the same timestamp tick as the scan read it could change
// again without its times changing ("racily clean", as git calls it).
const racyWindow = time.Second

// fileKey identifies one version of a file as its inode shows it.
type fileKey struct {
	dev, ino, nlink    uint64
	size, mtime, ctime int64 // ns since the epoch
}

func keyOf(st *unix.Stat_t) fileKey {
	return fileKey{
		dev: uint64(st.Dev), ino: st.Ino, nlink: uint64(st.Nlink), size: st.Size,
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(),
	}
}

type cachedFile struct {
	key    fileKey
	chunks []string
	// trusted is false for a file that was racily clean when hashed.
	trusted bool
}

// HashCache holds the chunk digests of one workspace's files as the last
// scan read them, by path, with the inode, size, mtime and ctime they had.
// A scan reuses them only when all of those are unchanged and the file
// was not racily clean (its mtime or ctime within a second of the start of
// the scan that hashed it). It is safe for concurrent use.
type HashCache struct {
	mu    sync.Mutex
	files map[string]cachedFile // guarded by mu
}

// NewHashCache returns an empty cache.
func NewHashCache() *HashCache { return &HashCache{files: map[string]cachedFile{}} }

func (c *HashCache) get(rel string, k fileKey) ([]string, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.files[rel]
	if !ok || !f.trusted || f.key != k {
		return nil, false
	}
	return f.chunks, true
}

func (c *HashCache) replace(files map[string]cachedFile) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.files = files
	c.mu.Unlock()
}

// chunkLoc is where a scan saw a chunk: a file and an offset in it.
type chunkLoc struct {
	path   string
	off    int64
	length int64
}

// Scanned is the result of a Scan: the workspace's manifest, and where in
// the tree each of its chunks can be read again.
type Scanned struct {
	Manifest *Manifest
	// Incremental is true when the scan took what had not changed from
	// an earlier one (ScanSince) rather than reading the whole tree.
	Incremental bool

	dir         string
	locsOnce    sync.Once
	locs        map[string]chunkLoc // built by the first Read
	hashedFiles int
	hashedBytes int64
	skipped     int
}

// Hashed returns the files and bytes this scan read and hashed: those the
// cache did not vouch for.
func (s *Scanned) Hashed() (files int, bytes int64) { return s.hashedFiles, s.hashedBytes }

// Skipped returns how many paths the scan left out: excluded by skip (a
// directory counts once) and sockets, FIFOs and devices.
func (s *Scanned) Skipped() int { return s.skipped }

// Read reads one chunk of the manifest again from the tree, from the
// first place the scan saw it, and checks its digest. A digest the
// manifest does not hold is not_found; a chunk that no longer matches
// (the sandbox changed or replaced the file since the scan) is
// concurrency_conflict; a tree that cannot be read is runtime_error.
func (s *Scanned) Read(digest string) ([]byte, error) {
	s.locsOnce.Do(func() {
		s.locs = make(map[string]chunkLoc)
		for _, e := range s.Manifest.Entries {
			for i, d := range e.Chunks {
				if _, ok := s.locs[d]; !ok {
					s.locs[d] = chunkLoc{path: e.Path, off: int64(i) * ChunkSize, length: chunkLen(e.Size, i)}
				}
			}
		}
	})
	loc, ok := s.locs[digest]
	if !ok {
		return nil, errcode.New(errcode.NotFound, "chunk %s is not in the scanned manifest", digest)
	}
	root, err := os.OpenRoot(s.dir)
	if err != nil {
		return nil, errcode.Wrap(errcode.RuntimeError, err, "open workspace")
	}
	defer root.Close()
	f, err := root.OpenFile(loc.path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, changed(loc.path, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, changed(loc.path, err)
	}
	buf := make([]byte, loc.length)
	if _, err := f.ReadAt(buf, loc.off); err != nil {
		return nil, changed(loc.path, err)
	}
	if sum := sha256.Sum256(buf); hex.EncodeToString(sum[:]) != digest {
		return nil, changed(loc.path, nil)
	}
	return buf, nil
}

// changed is the error of a file that changed under a scan or since it.
func changed(rel string, err error) error {
	e := errcode.New(errcode.ConcurrencyConflict, "%s changed while it was read", rel)
	e.Err = err
	return e
}

// scanJob is one regular file to hash: opened by the walker, checked to
// be the inode it stat-ed, closed by the worker.
type scanJob struct {
	f   *os.File
	fd  int // f's, not to be closed but through f
	rel string
	e   *Entry
	st  unix.Stat_t
}

// scanner is one Scan's state.
type scanner struct {
	ctx   context.Context
	skip  archive.Skip
	cache *HashCache
	start time.Time
	lim   Limits
	// afterRead, if set, is called after each read of a file.
	afterRead func(rel string, attempt int)

	jobs chan scanJob
	// walkSlots bounds the walkers beside the first: a directory goes to
	// a new walker when a slot is free, else it is walked in place.
	walkSlots chan struct{}
	walkers   sync.WaitGroup
	cancel    context.CancelCauseFunc

	// reuse is what an incremental scan takes from the earlier one (nil
	// for a full scan); read-only once the scan starts.
	reuse *reuse

	mu      sync.Mutex // guards what follows
	entries []*Entry   // a job's worker fills in its file's
	reused  []Entry    // entries taken from the earlier scan
	files   map[string]cachedFile
	hashed  int
	hbytes  int64
	skipped int
}

// Scan reads the directory dir, a host directory that a hostile sandbox
// may change while it runs, into a manifest. It never follows a symlink:
// it walks one os.Root per directory, checking that each directory and
// file it opens is the inode it stat-ed, and opens files with O_NOFOLLOW
// and O_NONBLOCK. It records regular files, directories and symlinks
// (skipping and counting sockets, FIFOs and devices, and the paths skip
// excludes); dir itself is not an entry. Files are hashed by a few
// workers, except those whose digests cache holds for the same inode,
// size, mtime and ctime (cache may be nil); the cache is then replaced by
// what this scan saw. A file that changes while it is hashed is hashed
// once more, then the scan fails with concurrency_conflict (retryable);
// so does a path replaced between its stat and its open. A name that is
// not UTF-8 is invalid_path; more than a million entries or 1 TiB is
// payload_too_large; a directory that cannot be read is runtime_error.
func Scan(ctx context.Context, dir string, skip archive.Skip, cache *HashCache) (*Scanned, error) {
	return scanAt(ctx, dir, skip, cache, time.Now(), nil)
}

// scanAt is Scan with the time the scan starts, which decides what is
// racily clean, and a hook called after each read of a file, before its
// inode is checked again (tests move the one and change files in the
// other).
func scanAt(ctx context.Context, dir string, skip archive.Skip, cache *HashCache, start time.Time,
	afterRead func(rel string, attempt int)) (*Scanned, error) {
	return scanFrom(ctx, dir, skip, cache, start, afterRead, nil)
}

// scanFrom is scanAt taking what it can from an earlier scan (since: nil
// reads everything).
func scanFrom(ctx context.Context, dir string, skip archive.Skip, cache *HashCache, start time.Time,
	afterRead func(rel string, attempt int), since *Since) (*Scanned, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, errcode.Wrap(errcode.RuntimeError, err, "open workspace")
	}
	defer root.Close()
	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s := &scanner{
		ctx: ctx, skip: skip, cache: cache, start: start, afterRead: afterRead, lim: Limits{}.withDefaults(),
		jobs: make(chan scanJob, 4*scanWorkers), walkSlots: make(chan struct{}, scanWalkers-1), cancel: cancel,
		files: map[string]cachedFile{}, reuse: newReuse(since, cache),
	}
	var wg sync.WaitGroup
	for range scanWorkers {
		wg.Go(func() {
			var buf []byte // one chunk, made on the first file that needs it
			for j := range s.jobs {
				if ctx.Err() != nil {
					j.f.Close()
					continue
				}
				if n := min(j.st.Size, ChunkSize); int64(len(buf)) < n {
					buf = make([]byte, ChunkSize)
				}
				if err := s.hash(j, buf); err != nil {
					cancel(err)
				}
			}
		})
	}
	walkErr := s.walk(root, "", s.reuse == nil)
	if walkErr != nil {
		cancel(walkErr) // stops the other walkers and the workers
	}
	s.walkers.Wait() // the directories handed to other walkers
	close(s.jobs)
	wg.Wait()
	if walkErr == nil && ctx.Err() != nil {
		walkErr = context.Cause(ctx)
	}
	if errors.Is(walkErr, errShared) {
		// A file with another link, which a change through that link
		// would not name: read everything.
		return scanFrom(parent, dir, skip, cache, start, afterRead, nil)
	}
	if walkErr != nil {
		return nil, walkErr
	}
	m := &Manifest{Version: Version, Entries: make([]Entry, len(s.entries), len(s.entries)+len(s.reused))}
	for i, e := range s.entries {
		m.Entries[i] = *e
	}
	m.Entries = append(m.Entries, s.reused...)
	if len(m.Entries) > s.lim.MaxEntries {
		return nil, errcode.New(errcode.PayloadTooLarge, "the workspace has more than %d entries", s.lim.MaxEntries)
	}
	slices.SortFunc(m.Entries, cmpEntry)
	if _, _, n := m.Stats(); n > s.lim.MaxBytes {
		return nil, errcode.New(errcode.PayloadTooLarge, "the workspace holds more than %d bytes", s.lim.MaxBytes)
	}
	cache.replace(s.files)
	return &Scanned{
		Manifest: m, dir: dir, Incremental: s.reuse != nil,
		hashedFiles: s.hashed, hashedBytes: s.hbytes, skipped: s.skipped,
	}, nil
}

// walk records the members of the directory r (at rel) and below. The
// members are stat-ed, read and opened relative to the directory's own
// descriptor, one name at a time and never through a symlink. With fresh
// false (an incremental scan, in a directory that did not change), a
// member that did not change is taken from the earlier scan unread.
func (s *scanner) walk(r *os.Root, rel string, fresh bool) error {
	d, err := r.Open(".")
	if err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "read directory "+relOrRoot(rel))
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "read directory "+relOrRoot(rel))
	}
	slices.Sort(names)
	dirfd := int(d.Fd())
	for _, name := range names {
		if err := s.ctx.Err(); err != nil {
			return context.Cause(s.ctx)
		}
		if err := s.member(r, dirfd, rel, name, fresh); err != nil {
			return err
		}
	}
	return nil
}

func relOrRoot(rel string) string {
	if rel == "" {
		return "the workspace root"
	}
	return rel
}

// member records one directory member, and for a directory its tree.
func (s *scanner) member(r *os.Root, dirfd int, dirRel, name string, fresh bool) error {
	rel := path.Join(dirRel, name)
	if s.skip != nil && s.skip(rel) {
		s.addSkipped()
		return nil
	}
	if !utf8.ValidString(rel) {
		return errcode.New(errcode.InvalidPath, "workspace path %q is not UTF-8: a manifest cannot hold it", rel)
	}
	if !fresh {
		var reused bool
		if fresh, reused = s.reuse.take(s, rel); reused {
			return nil
		}
	}
	s.mu.Lock()
	n := len(s.entries) + len(s.reused)
	s.mu.Unlock()
	if n >= s.lim.MaxEntries {
		return errcode.New(errcode.PayloadTooLarge, "the workspace has more than %d entries", s.lim.MaxEntries)
	}
	for attempt := 0; ; attempt++ {
		err := s.memberOnce(r, dirfd, rel, name, fresh)
		if !errors.Is(err, errRaced) {
			return err
		}
		if attempt == 1 {
			return changed(rel, err)
		}
	}
}

// errRaced is a path replaced between its stat and its open.
var errRaced = errors.New("replaced between stat and open")

// errShared ends an incremental scan that met a file with more than one
// link: it starts again in full.
var errShared = errors.New("a file has more than one link")

func (s *scanner) memberOnce(r *os.Root, dirfd int, rel, name string, fresh bool) error {
	var st unix.Stat_t
	err := ignoringEINTR(func() error { return unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) })
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed while walking
	}
	if err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "stat "+rel)
	}
	mode := st.Mode & 0o7777
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		sub, err := r.OpenRoot(name)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %w", errRaced, err)
		}
		if fi, err := sub.Stat("."); err != nil || !sameInode(fi, &st) {
			sub.Close()
			return errRaced
		}
		s.add(&Entry{Path: rel, Kind: KindDir, Mode: mode})
		select {
		case s.walkSlots <- struct{}{}:
			s.walkers.Go(func() {
				defer func() { <-s.walkSlots }()
				defer sub.Close()
				if err := s.walk(sub, rel, fresh); err != nil {
					s.cancel(err)
				}
			})
			return nil
		default:
			defer sub.Close()
			return s.walk(sub, rel, fresh)
		}
	case unix.S_IFLNK:
		target, err := readlinkat(dirfd, name)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %w", errRaced, err)
		}
		if target == "" || !utf8.ValidString(target) {
			return errcode.New(errcode.InvalidPath, "symlink %q has a target that is empty or not UTF-8", rel)
		}
		// Linux gives symlinks no mode of their own: always 0777.
		s.add(&Entry{Path: rel, Kind: KindSymlink, Mode: 0o777, Target: target})
		return nil
	case unix.S_IFREG:
		if s.reuse != nil && st.Nlink > 1 {
			return errShared
		}
		e := &Entry{Path: rel, Kind: KindFile, Mode: mode, Size: st.Size}
		k := keyOf(&st)
		if chunks, ok := s.cache.get(rel, k); ok {
			e.Chunks = chunks
			s.add(e)
			s.record(rel, e, k, true)
			return nil
		}
		// O_NOFOLLOW: a symlink swapped in fails (ELOOP); O_NONBLOCK: a
		// FIFO swapped in does not block the open.
		var fd int
		err := ignoringEINTR(func() (err error) {
			fd, err = unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
			return err
		})
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %w", errRaced, err)
		}
		f := os.NewFile(uintptr(fd), rel)
		var fst unix.Stat_t
		if err := unix.Fstat(fd, &fst); err != nil || fst.Mode&unix.S_IFMT != unix.S_IFREG ||
			fst.Dev != st.Dev || fst.Ino != st.Ino {
			f.Close()
			return errRaced
		}
		s.add(e)
		select {
		case s.jobs <- scanJob{f: f, fd: fd, rel: rel, e: e, st: fst}:
			return nil
		case <-s.ctx.Done():
			f.Close()
			return context.Cause(s.ctx)
		}
	default:
		s.addSkipped()
		return nil
	}
}

// sameInode reports whether fi is the inode st describes.
func sameInode(fi fs.FileInfo, st *unix.Stat_t) bool {
	o, ok := fi.Sys().(*syscall.Stat_t)
	return ok && o.Dev == st.Dev && o.Ino == st.Ino
}

// readlinkat reads the symlink name in dirfd.
func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		var n int
		err := ignoringEINTR(func() (err error) {
			n, err = unix.Readlinkat(dirfd, name, buf)
			return err
		})
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

func ignoringEINTR(fn func() error) error {
	for {
		if err := fn(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// add records an entry.
func (s *scanner) add(e *Entry) {
	s.mu.Lock()
	s.entries = append(s.entries, e)
	s.mu.Unlock()
}

func (s *scanner) addSkipped() {
	s.mu.Lock()
	s.skipped++
	s.mu.Unlock()
}

// record notes a file's chunks for the cache and Scanned.Read.
func (s *scanner) record(rel string, e *Entry, k fileKey, fromCache bool) {
	racy := s.start.Add(-racyWindow).UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[rel] = cachedFile{key: k, chunks: e.Chunks, trusted: k.mtime < racy && k.ctime < racy}
	if !fromCache {
		s.hashed++
		s.hbytes += e.Size
	}
}

// hash reads and hashes one file (and closes it): once more if it changed
// while read, then concurrency_conflict.
func (s *scanner) hash(j scanJob, buf []byte) error {
	defer j.f.Close()
	before := j.st
	for attempt := 0; attempt < 2; attempt++ {
		if n := min(before.Size, ChunkSize); int64(len(buf)) < n {
			buf = make([]byte, ChunkSize) // it grew between the reads
		}
		chunks, err := hashFile(s.ctx, j.f, before.Size, buf)
		if err != nil && !errors.Is(err, errRaced) {
			return err
		}
		if s.afterRead != nil {
			s.afterRead(j.rel, attempt)
		}
		var after unix.Stat_t
		if serr := unix.Fstat(j.fd, &after); serr != nil {
			return errcode.Wrap(errcode.RuntimeError, serr, "stat "+j.rel)
		}
		if err == nil && keyOf(&after) == keyOf(&before) {
			j.e.Size, j.e.Mode, j.e.Chunks = after.Size, uint32(after.Mode)&0o7777, chunks
			s.record(j.rel, j.e, keyOf(&after), false)
			return nil
		}
		before = after
	}
	return changed(j.rel, nil)
}

// hashFile reads size bytes of f from its start in ChunkSize pieces and
// returns their digests; a file shorter or longer than size is errRaced.
func hashFile(ctx context.Context, f *os.File, size int64, buf []byte) ([]string, error) {
	chunks := make([]string, 0, chunkCount(size))
	for i := 0; int64(i) < chunkCount(size); i++ {
		if err := ctx.Err(); err != nil {
			return nil, context.Cause(ctx)
		}
		n := chunkLen(size, i)
		if _, err := f.ReadAt(buf[:n], int64(i)*ChunkSize); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, errRaced
			}
			return nil, errcode.Wrap(errcode.RuntimeError, err, "read "+f.Name())
		}
		sum := sha256.Sum256(buf[:n])
		chunks = append(chunks, hex.EncodeToString(sum[:]))
	}
	var one [1]byte
	if n, _ := f.ReadAt(one[:], size); n > 0 {
		return nil, errRaced // it grew
	}
	if len(chunks) == 0 {
		chunks = nil
	}
	return chunks, nil
}

// Seed fills the cache with m's digests for the files of dir that are m's
// (the node wrote them from m's verified chunks and nobody else can have
// written them since: a kept tree, read-only below an overlay), keyed by
// what each shows now. Called after dir became m, at start, it replaces
// what the cache held. A file that is not m's regular file of m's size,
// or whose mtime or ctime is within racyWindow of start (changed since,
// or too recently to tell), is not trusted: a scan hashes it. Only
// regular files are seeded; nothing follows a symlink.
func (c *HashCache) Seed(dir string, m *Manifest, start time.Time) error {
	if c == nil {
		return nil
	}
	top, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "seed the hash cache")
	}
	// Each directory opened once, relative to its parent, never through
	// a symlink (a directory swapped for one is not seeded).
	dirs := map[string]int{"": top}
	defer func() {
		for _, fd := range dirs {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	var open func(p string) int
	open = func(p string) int {
		if fd, ok := dirs[p]; ok {
			return fd
		}
		parent, name := path.Split(strings.TrimSuffix(p, "/"))
		fd := -1
		if pfd := open(parent); pfd >= 0 {
			if f, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
				fd = f
			}
		}
		dirs[p] = fd
		return fd
	}
	racy := start.Add(-racyWindow).UnixNano()
	files := make(map[string]cachedFile, len(m.Entries))
	for i := range m.Entries {
		e := &m.Entries[i]
		if e.Kind != KindFile {
			continue
		}
		parent, name := path.Split(e.Path)
		fd := open(parent)
		if fd < 0 {
			continue
		}
		var st unix.Stat_t
		if err := ignoringEINTR(func() error { return unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) }); err != nil {
			continue
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != e.Size {
			continue
		}
		k := keyOf(&st)
		files[e.Path] = cachedFile{key: k, chunks: e.Chunks, trusted: k.mtime < racy && k.ctime < racy}
	}
	c.replace(files)
	return nil
}
