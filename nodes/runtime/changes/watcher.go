//go:build linux

package changes

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
)

// Defaults of Config.
const (
	DefaultMaxTracked      = 100_000
	DefaultMaxTrackedBytes = 16 << 20
	DefaultMaxWatches      = 65_536
	DefaultMaxDepth        = 128
	DefaultFenceWait       = 5 * time.Second
)

// Config configures a Watcher. Zero values take the defaults.
type Config struct {
	// Root is the host directory of the workspace.
	Root string
	// FenceDir is where the watcher makes its private fence directory;
	// it must be outside Root. By default /dev/shm, else os.TempDir(): a
	// fence is a mkdir and an rmdir, a few microseconds on tmpfs and a
	// few hundred on a journalled disk.
	FenceDir string
	// MaxTracked bounds the distinct paths held to classify changes, over
	// all open windows (default DefaultMaxTracked).
	MaxTracked int
	// MaxTrackedBytes bounds the bytes of those paths' names.
	MaxTrackedBytes int
	// MaxWatches bounds the directories watched.
	MaxWatches int
	// MaxDepth bounds how deep below Root a directory is watched.
	MaxDepth int
	// FenceWait bounds how long End waits for its fence.
	FenceWait time.Duration
}

func (c Config) withDefaults() Config {
	if c.MaxTracked <= 0 {
		c.MaxTracked = DefaultMaxTracked
	}
	if c.MaxTrackedBytes <= 0 {
		c.MaxTrackedBytes = DefaultMaxTrackedBytes
	}
	if c.MaxWatches <= 0 {
		c.MaxWatches = DefaultMaxWatches
	}
	if c.MaxDepth <= 0 {
		c.MaxDepth = DefaultMaxDepth
	}
	if c.FenceWait <= 0 {
		c.FenceWait = DefaultFenceWait
	}
	return c
}

// dirMask is what every watched directory reports.
const dirMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_ATTRIB |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW | unix.IN_EXCL_UNLINK

// Token names an open window (Begin's).
type Token uint64

// node is one watched directory.
type node struct {
	parent   int32 // -1 for the root, and for one moved away (detached)
	name     string
	depth    int
	children map[string]int32
}

// state is what a window knows of one path.
type state uint8

const (
	stNone state = iota // created then removed: nothing to report
	stCreated
	stModified
	stRemoved
)

// window is one open attribution window. Guarded by Watcher.mu.
type window struct {
	startSeq, endSeq uint64
	active, done     bool
	overlapped       bool
	truncated        bool
	paths            map[string]state
	order            []string
	names            int // bytes of the keys of paths
	// counts of changes beyond the tracked paths (counted naively)
	created, modified, removed int
	bytes                      int64
}

// Watcher watches a workspace tree; see the package doc. Its methods are
// safe for concurrent use.
type Watcher struct {
	cfg   Config
	fd    int
	f     *os.File // fd, on Go's poller: Close unblocks the reader
	rc    syscall.RawConn
	fence string // the private fence directory
	ffd   int    // its descriptor
	fwd   int32  // its watch
	fpre  string // the prefix of fence names
	dev   uint64 // the root's device and inode when the watch began
	ino   uint64

	readMu sync.Mutex // serialises reading the descriptor and applying what was read
	buf    []byte     // the read buffer; guarded by readMu

	fenceMu sync.Mutex // serialises fences, so their events come in seq order
	nextSeq uint64     // last fence made; guarded by fenceMu

	mu         sync.Mutex // guards the fields below
	nodes      map[int32]*node
	rootWD     int32
	stale      bool // the root was removed or moved: start a new watcher
	incomplete bool // a directory lacks a watch
	moving     map[uint32]int32
	seen       uint64 // last fence read
	read       chan struct{}
	windows    map[Token]*window
	nextTok    Token
	tracked    int // paths held, over all windows
	trackedB   int // their bytes
	closed     bool

	wg        sync.WaitGroup
	closeOnce sync.Once
}

// Start watches cfg.Root and every directory below it. Errors:
// runtime_error when inotify or the fence directory cannot be had.
func Start(cfg Config) (*Watcher, error) {
	cfg = cfg.withDefaults()
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, errcode.Wrap(errcode.RuntimeError, err, "changes: workspace root")
	}
	cfg.Root = root
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, errcode.Wrap(errcode.RuntimeError, err, "changes: inotify")
	}
	w := &Watcher{
		cfg: cfg, fd: fd, ffd: -1, nodes: map[int32]*node{}, moving: map[uint32]int32{},
		windows: map[Token]*window{}, read: make(chan struct{}), fpre: "f" + rand.Text()[:8] + "-",
	}
	fail := func(err error, what string) (*Watcher, error) {
		w.release()
		return nil, errcode.Wrap(errcode.RuntimeError, err, "changes: "+what)
	}
	dirs := []string{cfg.FenceDir}
	if cfg.FenceDir == "" {
		dirs = []string{"/dev/shm", os.TempDir()}
	}
	for _, d := range dirs {
		if w.fence, err = os.MkdirTemp(d, "paddock-fence-*"); err == nil {
			break
		}
	}
	if err != nil {
		return fail(err, "fence directory")
	}
	if w.ffd, err = unix.Open(w.fence, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return fail(err, "fence directory")
	}
	fwd, err := unix.InotifyAddWatch(fd, w.fence, unix.IN_CREATE|unix.IN_ONLYDIR)
	if err != nil {
		return fail(err, "watch the fence directory")
	}
	w.fwd = int32(fwd)
	wd, err := unix.InotifyAddWatch(fd, root, dirMask)
	if err != nil {
		return fail(err, "watch the workspace")
	}
	w.rootWD = int32(wd)
	var st unix.Stat_t
	if err := unix.Stat(root, &st); err != nil {
		return fail(err, "stat the workspace")
	}
	w.dev, w.ino = st.Dev, st.Ino
	w.nodes[w.rootWD] = &node{parent: -1, children: map[string]int32{}}
	w.scan(w.rootWD, "", false)
	w.f = os.NewFile(uintptr(fd), "inotify")
	if w.rc, err = w.f.SyscallConn(); err != nil {
		return fail(err, "inotify")
	}
	w.buf = make([]byte, 64<<10)
	w.wg.Go(w.readLoop)
	return w, nil
}

// release frees what Start took before the reader runs.
func (w *Watcher) release() {
	if w.f != nil {
		_ = w.f.Close()
	} else {
		_ = unix.Close(w.fd)
	}
	if w.ffd >= 0 {
		_ = unix.Close(w.ffd)
	}
	if w.fence != "" {
		_ = os.RemoveAll(w.fence)
	}
}

// Close stops the watcher's goroutine, waits for it and frees the
// inotify instance and the fence directory. Windows still open end
// Truncated. It is idempotent.
func (w *Watcher) Close() error {
	w.closeOnce.Do(func() {
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
		_ = w.f.Close() // the reader's Read returns
		w.wg.Wait()
		if w.ffd >= 0 {
			_ = unix.Close(w.ffd)
		}
		_ = os.RemoveAll(w.fence)
		w.mu.Lock()
		close(w.read)
		w.read = nil
		w.mu.Unlock()
	})
	return nil
}

// Stale reports whether the watched root was removed or moved away, or
// Root names another directory now (a workspace swapped by a restore),
// or the watcher is closed: its owner should start a new one.
func (w *Watcher) Stale() bool {
	w.mu.Lock()
	stale := w.stale || w.closed
	w.mu.Unlock()
	if stale {
		return true
	}
	var st unix.Stat_t
	return unix.Stat(w.cfg.Root, &st) != nil || st.Dev != w.dev || st.Ino != w.ino
}

// Watches returns how many directories are watched.
func (w *Watcher) Watches() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.nodes)
}

// Begin opens a window: what changes from now until End is its.
func (w *Watcher) Begin() Token {
	w.mu.Lock()
	w.nextTok++
	tok := w.nextTok
	win := &window{paths: map[string]state{}, truncated: w.incomplete || w.stale || w.closed}
	for _, o := range w.windows {
		o.overlapped = true
		win.overlapped = true
	}
	w.windows[tok] = win
	w.mu.Unlock()
	w.makeFence(func(seq uint64) { win.startSeq = seq }, func() { win.active, win.truncated = true, true })
	return tok
}

// End closes the window tok and returns what changed in it, once every
// event until now has been read (or FenceWait or ctx has passed: then
// Truncated). An unknown token gives an empty, truncated record.
func (w *Watcher) End(ctx context.Context, tok Token) commands.Changes {
	w.mu.Lock()
	win := w.windows[tok]
	w.mu.Unlock()
	if win == nil {
		return commands.Changes{Truncated: true, Observed: commands.ObservedWatch}
	}
	var seq uint64
	w.makeFence(func(s uint64) { win.endSeq, seq = s, s }, func() { win.done, win.active, win.truncated = true, false, true })
	if seq != 0 {
		// The fence's event is queued: read it here rather than wait for
		// the reader to be scheduled (the common case costs no switch).
		_ = w.rc.Control(func(uintptr) { w.drain() })
		w.await(ctx, seq, win)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.windows, tok)
	w.tracked -= len(win.paths)
	w.trackedB -= win.names
	return win.result()
}

// EndPaths closes the window tok as End does and returns every path it
// saw change (in the order first seen, a path created then removed
// included), and complete: false when the window was Truncated (a queue
// overflow, a directory left unwatched, more paths than MaxTracked, a
// fence that did not come, the root gone or the watcher closed), and then
// the paths are not all there are. Dirty tracking (a persist that reads
// only what changed) must read everything again when complete is false.
func (w *Watcher) EndPaths(ctx context.Context, tok Token) (paths []string, complete bool) {
	w.mu.Lock()
	win := w.windows[tok]
	w.mu.Unlock()
	if win == nil {
		return nil, false
	}
	w.End(ctx, tok) // removes the window: its fields are no longer shared
	w.mu.Lock()
	defer w.mu.Unlock()
	return win.order, !win.truncated && !w.stale && !w.incomplete && !w.closed
}

// makeFence makes the next fence, calling set with its seq under w.mu
// first; when it cannot be made, failed (under w.mu).
func (w *Watcher) makeFence(set func(seq uint64), failed func()) {
	w.fenceMu.Lock()
	defer w.fenceMu.Unlock()
	seq := w.nextSeq + 1
	w.mu.Lock()
	if w.closed {
		failed()
		w.mu.Unlock()
		return
	}
	set(seq)
	w.mu.Unlock()
	name := w.fpre + strconv.FormatUint(seq, 10)
	err := unix.Mkdirat(w.ffd, name, 0o700)
	if err == nil {
		_ = unix.Unlinkat(w.ffd, name, unix.AT_REMOVEDIR)
		w.nextSeq = seq
		return
	}
	w.mu.Lock()
	set(0)
	failed()
	w.mu.Unlock()
}

// await waits until fence seq has been read, or FenceWait or ctx ends
// (then the window is Truncated).
func (w *Watcher) await(ctx context.Context, seq uint64, win *window) {
	timer := time.NewTimer(w.cfg.FenceWait)
	defer timer.Stop()
	for {
		w.mu.Lock()
		read := w.read
		if w.seen >= seq || read == nil {
			break
		}
		w.mu.Unlock()
		select {
		case <-read:
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		w.mu.Lock()
		break
	}
	if w.seen < seq {
		win.done, win.active, win.truncated = true, false, true
	}
	w.mu.Unlock()
}

// result is the window's record.
func (win *window) result() commands.Changes {
	c := commands.Changes{
		Created: win.created, Modified: win.modified, Removed: win.removed, BytesWritten: win.bytes,
		Truncated: win.truncated, Overlapped: win.overlapped, Observed: commands.ObservedWatch,
	}
	for _, p := range win.order {
		var change string
		switch win.paths[p] {
		case stCreated:
			c.Created++
			change = "created"
		case stModified:
			c.Modified++
			change = "modified"
		case stRemoved:
			c.Removed++
			change = "removed"
		default:
			continue
		}
		if len(c.Paths) < commands.MaxChangedPaths {
			c.Paths = append(c.Paths, commands.ChangedPath{Path: p, Change: change})
		} else {
			c.Truncated = true
		}
	}
	return c
}

// readLoop reads events as they come until Close (Go's poller wakes it;
// Close ends its wait).
func (w *Watcher) readLoop() {
	_ = w.rc.Read(func(uintptr) bool {
		w.drain()
		return false // wait for more
	})
}

// drain reads and applies every queued event, under readMu so that
// batches are applied in the order they were read.
func (w *Watcher) drain() {
	w.readMu.Lock()
	defer w.readMu.Unlock()
	for {
		n, err := unix.Read(w.fd, w.buf)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return
		case err != nil || n <= 0:
			w.mu.Lock()
			w.stale = true
			w.mu.Unlock()
			return
		}
		w.mu.Lock()
		w.apply(w.buf[:n])
		if w.read != nil { // nil once closed
			close(w.read)
			w.read = make(chan struct{})
		}
		w.mu.Unlock()
	}
}

// apply handles a batch of events. w.mu must be held.
func (w *Watcher) apply(b []byte) {
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			return
		}
		name := ""
		if ev.Len > 0 {
			name = strings.TrimRight(string(b[unix.SizeofInotifyEvent:end]), "\x00")
		}
		w.event(ev.Wd, ev.Mask, ev.Cookie, name)
		b = b[end:]
	}
}

// event handles one event. w.mu must be held.
func (w *Watcher) event(wd int32, mask, cookie uint32, name string) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		w.truncateActive()
		w.rescan()
		return
	}
	if wd == w.fwd {
		if seq, ok := strings.CutPrefix(name, w.fpre); ok && mask&unix.IN_CREATE != 0 {
			if s, err := strconv.ParseUint(seq, 10, 64); err == nil {
				w.fenceRead(s)
			}
		}
		return
	}
	n := w.nodes[wd]
	if n == nil {
		return // a watch removed meanwhile
	}
	if mask&unix.IN_IGNORED != 0 {
		w.forget(wd)
		return
	}
	if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
		switch {
		case wd == w.rootWD:
			w.stale = true
			w.truncateActive()
		case mask&unix.IN_MOVE_SELF != 0 && n.parent == -1:
			w.unwatch(wd) // moved out of the workspace
		}
		return
	}
	if name == "" {
		return // the directory's own attributes or content
	}
	rel := w.pathOf(wd, name)
	isDir := mask&unix.IN_ISDIR != 0
	switch {
	case mask&unix.IN_CREATE != 0:
		w.record(rel, stCreated)
		if isDir {
			w.addDir(wd, name, rel, true)
		}
	case mask&unix.IN_MOVED_TO != 0:
		w.record(rel, stCreated)
		if isDir {
			if child, ok := w.moving[cookie]; ok && w.nodes[child] != nil {
				delete(w.moving, cookie)
				c := w.nodes[child]
				c.parent, c.name = wd, name
				n.children[name] = child
				w.redepth(child, n.depth+1)
			} else {
				w.addDir(wd, name, rel, true)
			}
		}
	case mask&unix.IN_MOVED_FROM != 0:
		w.record(rel, stRemoved)
		if child, ok := n.children[name]; ok && isDir {
			delete(n.children, name)
			if c := w.nodes[child]; c != nil {
				c.parent = -1
				w.moving[cookie] = child
			}
		}
	case mask&unix.IN_DELETE != 0:
		w.record(rel, stRemoved)
		delete(n.children, name)
	default: // IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE
		w.record(rel, stModified)
		if mask&unix.IN_CLOSE_WRITE != 0 {
			w.written(rel)
		}
	}
}

// fenceRead marks fence seq read: windows it opens start counting,
// windows it closes stop. w.mu must be held.
func (w *Watcher) fenceRead(seq uint64) {
	w.seen = max(w.seen, seq)
	for _, win := range w.windows {
		if win.endSeq != 0 && win.endSeq <= seq {
			win.active, win.done = false, true
		} else if !win.done && !win.active && win.startSeq != 0 && win.startSeq <= seq {
			win.active = true
		}
	}
}

// record folds a change of rel into every active window. w.mu must be
// held.
func (w *Watcher) record(rel string, ch state) {
	for _, win := range w.windows {
		if !win.active {
			continue
		}
		old, ok := win.paths[rel]
		if !ok {
			if w.tracked >= w.cfg.MaxTracked || w.trackedB+len(rel) > w.cfg.MaxTrackedBytes {
				win.truncated = true
				switch ch {
				case stCreated:
					win.created++
				case stModified:
					win.modified++
				case stRemoved:
					win.removed++
				}
				continue
			}
			win.paths[rel] = ch
			win.order = append(win.order, rel)
			win.names += len(rel)
			w.tracked++
			w.trackedB += len(rel)
			continue
		}
		win.paths[rel] = fold(old, ch)
	}
}

// fold is a path's state after ch.
func fold(old, ch state) state {
	switch ch {
	case stCreated:
		if old == stRemoved {
			return stModified // replaced
		}
		if old == stNone {
			return stCreated
		}
		return old
	case stModified:
		if old == stNone {
			return stCreated // created, removed, made again: new
		}
		if old == stCreated {
			return stCreated
		}
		return stModified
	case stRemoved:
		if old == stCreated || old == stNone {
			return stNone
		}
		return stRemoved
	}
	return old
}

// written adds the size of rel, a file closed after writing, to the
// active windows. w.mu must be held.
func (w *Watcher) written(rel string) {
	var st unix.Stat_t
	if err := unix.Fstatat(unix.AT_FDCWD, filepath.Join(w.cfg.Root, rel), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return
	}
	for _, win := range w.windows {
		if win.active {
			win.bytes += st.Size
		}
	}
}

// truncateActive marks every active window (and every open one not yet
// active) Truncated. w.mu must be held.
func (w *Watcher) truncateActive() {
	for _, win := range w.windows {
		if !win.done {
			win.truncated = true
		}
	}
}

// pathOf is the workspace-relative path of name in directory wd.
func (w *Watcher) pathOf(wd int32, name string) string {
	var parts []string
	if name != "" {
		parts = append(parts, name)
	}
	for n, hops := w.nodes[wd], 0; n != nil && wd != w.rootWD && hops <= w.cfg.MaxDepth+1; n, hops = w.nodes[wd], hops+1 {
		parts = append(parts, n.name)
		if n.parent == -1 {
			break
		}
		wd = n.parent
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, "/")
}

// addDir watches directory name (rel) in parent and scans what it holds;
// with count, its entries are recorded as created. w.mu must be held.
func (w *Watcher) addDir(parent int32, name, rel string, count bool) {
	p := w.nodes[parent]
	if p == nil {
		return
	}
	if len(w.nodes) >= w.cfg.MaxWatches || p.depth+1 > w.cfg.MaxDepth {
		w.incomplete = true
		w.truncateActive()
		return
	}
	wd, err := unix.InotifyAddWatch(w.fd, filepath.Join(w.cfg.Root, rel), dirMask)
	if err != nil {
		if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) {
			w.incomplete = true // ENOSPC (max_user_watches), ENAMETOOLONG, EACCES
			w.truncateActive()
		}
		return
	}
	if old := w.nodes[int32(wd)]; old != nil { // already watched (moved here)
		old.parent, old.name = parent, name
		p.children[name] = int32(wd)
		w.redepth(int32(wd), p.depth+1)
		return
	}
	w.nodes[int32(wd)] = &node{parent: parent, name: name, depth: p.depth + 1, children: map[string]int32{}}
	p.children[name] = int32(wd)
	w.scan(int32(wd), rel, count)
}

// scan reads directory wd (rel) and watches its subdirectories; with
// count, every entry is recorded as created. w.mu must be held.
func (w *Watcher) scan(wd int32, rel string, count bool) {
	f, err := os.Open(filepath.Join(w.cfg.Root, rel))
	if err != nil {
		return
	}
	defer f.Close()
	for {
		ents, err := f.ReadDir(1024)
		for _, e := range ents {
			child := e.Name()
			if rel != "" {
				child = rel + "/" + e.Name()
			}
			if count {
				w.record(child, stCreated)
			}
			if e.IsDir() {
				if _, ok := w.nodes[wd].children[e.Name()]; !ok {
					w.addDir(wd, e.Name(), child, count)
				}
			}
		}
		if err != nil || len(ents) == 0 {
			return
		}
	}
}

// rescan walks the tree again after a queue overflow, watching
// directories that lack a watch (nothing is counted: the windows are
// Truncated already). w.mu must be held.
func (w *Watcher) rescan() {
	w.incomplete = false
	var walk func(wd int32, rel string)
	walk = func(wd int32, rel string) {
		w.scan(wd, rel, false)
		n := w.nodes[wd]
		if n == nil {
			return
		}
		for name, c := range n.children {
			child := name
			if rel != "" {
				child = rel + "/" + name
			}
			walk(c, child)
		}
	}
	walk(w.rootWD, "")
}

// redepth sets the depth of wd and its subtree.
func (w *Watcher) redepth(wd int32, depth int) {
	n := w.nodes[wd]
	if n == nil {
		return
	}
	n.depth = depth
	for _, c := range n.children {
		w.redepth(c, depth+1)
	}
}

// unwatch removes the watches of wd and its subtree.
func (w *Watcher) unwatch(wd int32) {
	n := w.nodes[wd]
	if n == nil {
		return
	}
	for _, c := range n.children {
		w.unwatch(c)
	}
	_, _ = unix.InotifyRmWatch(w.fd, uint32(wd))
	w.forget(wd)
}

// forget drops wd, whose watch is gone.
func (w *Watcher) forget(wd int32) {
	n := w.nodes[wd]
	if n == nil {
		return
	}
	if wd == w.rootWD {
		w.stale = true
	}
	if p := w.nodes[n.parent]; p != nil && p.children[n.name] == wd {
		delete(p.children, n.name)
	}
	for c, m := range w.moving {
		if m == wd {
			delete(w.moving, c)
		}
	}
	delete(w.nodes, wd)
}

// String describes the watcher for logs.
func (w *Watcher) String() string {
	return fmt.Sprintf("changes.Watcher(%s)", w.cfg.Root)
}
