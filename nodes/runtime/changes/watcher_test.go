//go:build linux

package changes_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/nodes/runtime/changes"
	"github.com/paddock-dev/paddock/testenv"
)

func start(t *testing.T, cfg changes.Config) (*changes.Watcher, string) {
	t.Helper()
	if cfg.Root == "" {
		cfg.Root = t.TempDir()
	}
	if cfg.FenceDir == "" {
		cfg.FenceDir = t.TempDir()
	}
	w, err := changes.Start(cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w, cfg.Root
}

// sh runs script in dir and waits for it, as an exec does.
func sh(t *testing.T, dir, script string) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
}

// window runs script in a window and returns its record.
func window(t *testing.T, w *changes.Watcher, dir, script string) commands.Changes {
	t.Helper()
	tok := w.Begin()
	sh(t, dir, script)
	return w.End(testenv.Context(t, 10*time.Second), tok)
}

func paths(c commands.Changes) []string {
	var out []string
	for _, p := range c.Paths {
		out = append(out, p.Change+" "+p.Path)
	}
	slices.Sort(out)
	return out
}

// TestThousandFilesAllCounted: a command that creates 1,000 files and
// exits at once has every one counted (the fence makes End wait for the
// last event).
func TestThousandFilesAllCounted(t *testing.T) {
	w, dir := start(t, changes.Config{})
	c := window(t, w, dir, `i=0; while [ $i -lt 1000 ]; do : > f$i; i=$((i+1)); done`)
	if c.Created != 1000 || c.Modified != 0 || c.Removed != 0 {
		t.Fatalf("got +%d ~%d -%d, want +1000 ~0 -0", c.Created, c.Modified, c.Removed)
	}
	if !c.Truncated || len(c.Paths) != commands.MaxChangedPaths {
		t.Fatalf("got %d paths truncated=%v, want %d and truncated", len(c.Paths), c.Truncated, commands.MaxChangedPaths)
	}
	if c.Observed != commands.ObservedWatch || c.Overlapped {
		t.Fatalf("got observed %q overlapped %v", c.Observed, c.Overlapped)
	}
}

// TestFold: created, modified, removed and their combinations in one
// window, with bytes written.
func TestFold(t *testing.T) {
	w, dir := start(t, changes.Config{})
	sh(t, dir, `echo old > mod; echo old > gone; echo old > modgone; echo old > replaced; mkdir keep`)
	c := window(t, w, dir, strings.Join([]string{
		`printf 12345 > new`,                         // created (5 bytes)
		`printf abc >> new`,                          // created still (3 bytes more when closed)
		`printf 1234567890 > mod`,                    // modified (10 bytes)
		`rm gone`,                                    // removed
		`echo x > tmp; rm tmp`,                       // nothing
		`echo x >> modgone; rm modgone`,              // removed
		`rm replaced; printf 12 > replaced`,          // modified
		`mkdir -p keep/a/b && printf 1 > keep/a/b/f`, // created: keep/a, keep/a/b, keep/a/b/f
	}, "; "))
	want := []string{
		"created keep/a", "created keep/a/b", "created keep/a/b/f", "created new",
		"modified mod", "modified replaced", "removed gone", "removed modgone",
	}
	if got := paths(c); !slices.Equal(got, want) {
		t.Fatalf("got paths %q, want %q", got, want)
	}
	if c.Created != 4 || c.Modified != 2 || c.Removed != 2 || c.Truncated {
		t.Fatalf("got +%d ~%d -%d truncated %v, want +4 ~2 -2", c.Created, c.Modified, c.Removed, c.Truncated)
	}
}

// TestBytesWritten: the sizes of files closed after writing (a file
// written twice counts twice: it was written twice).
func TestBytesWritten(t *testing.T) {
	w, dir := start(t, changes.Config{})
	sh(t, dir, `echo old > mod`)
	c := window(t, w, dir, `printf 12345 > a; printf 1234567890 > mod; mkdir d; printf 1 > d/f`)
	if c.BytesWritten != 16 {
		t.Fatalf("got %d bytes written, want 16", c.BytesWritten)
	}
}

// TestNewDirectoryRace: files made in a directory the moment it is made
// are all counted, however the watch races them.
func TestNewDirectoryRace(t *testing.T) {
	w, dir := start(t, changes.Config{})
	for i := range 5 {
		c := window(t, w, dir, `mkdir -p d`+string(rune('0'+i))+`/x/y && cd d`+string(rune('0'+i))+`/x/y && for f in 1 2 3 4 5 6 7 8 9 10; do : > $f; done`)
		if c.Created != 13 || c.Truncated {
			t.Fatalf("round %d: got +%d truncated %v (%q), want +13", i, c.Created, c.Truncated, paths(c))
		}
	}
}

// TestRenameDirectory: a directory renamed keeps its watch under its new
// name; one moved out of the workspace loses it.
func TestRenameDirectory(t *testing.T) {
	outside := t.TempDir()
	w, dir := start(t, changes.Config{})
	sh(t, dir, `mkdir -p a/b`)
	c := window(t, w, dir, `mv a z && : > z/b/f`)
	want := []string{"created z", "created z/b/f", "removed a"}
	if got := paths(c); !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	before := w.Watches()
	c = window(t, w, dir, `mv z `+outside+`/z && : > `+outside+`/z/b/g`)
	if got := paths(c); !slices.Equal(got, []string{"removed z"}) {
		t.Fatalf("got %q, want [removed z]", got)
	}
	if got := w.Watches(); got != before-2 {
		t.Fatalf("got %d watches after moving 2 directories out, want %d", got, before-2)
	}
}

// TestOverlapped: windows open at the same time are both Overlapped; one
// alone is not.
func TestOverlapped(t *testing.T) {
	w, dir := start(t, changes.Config{})
	ctx := testenv.Context(t, 10*time.Second)
	a := w.Begin()
	sh(t, dir, `: > x`)
	b := w.Begin()
	sh(t, dir, `: > y`)
	cb := w.End(ctx, b)
	ca := w.End(ctx, a)
	if !ca.Overlapped || !cb.Overlapped {
		t.Fatalf("got overlapped %v and %v, want both", ca.Overlapped, cb.Overlapped)
	}
	if ca.Created != 2 || cb.Created != 1 {
		t.Fatalf("got +%d and +%d, want +2 (x, y) and +1 (y)", ca.Created, cb.Created)
	}
	if c := window(t, w, dir, `: > z`); c.Overlapped {
		t.Fatal("a window alone is overlapped")
	}
}

// TestBoundedMemory is the attack: a command making 200,000 files and a
// tree deeper than the watcher goes. The watcher holds at most its
// bounds, counts everything it can, and says Truncated.
func TestBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("makes 200,000 files")
	}
	w, dir := start(t, changes.Config{MaxTracked: 1000, MaxDepth: 16})
	c := window(t, w, dir, `mkdir m && cd m && seq 0 199999 | xargs touch`)
	if !c.Truncated || len(c.Paths) != commands.MaxChangedPaths {
		t.Fatalf("got truncated %v with %d paths", c.Truncated, len(c.Paths))
	}
	// Tracked paths are exact; the rest are counted as they come, so the
	// count is a floor unless the queue overflowed.
	if c.Created < 1000 || c.Created > 200001 {
		t.Fatalf("got +%d, want between 1000 and 200001", c.Created)
	}
	deep := strings.Repeat("d/", 40)
	c = window(t, w, dir, `mkdir -p `+deep+` && : > `+deep+`f`)
	if !c.Truncated {
		t.Fatal("a tree deeper than MaxDepth is not Truncated")
	}
	if got := w.Watches(); got > 2+16 {
		t.Fatalf("got %d watches, want at most %d", got, 2+16)
	}
	// Later windows say the watch is incomplete.
	if c := window(t, w, dir, `: > later`); !c.Truncated {
		t.Fatal("a window after a directory went unwatched is not Truncated")
	}
}

// TestCloseStopsGoroutine: Close stops the reader, removes the fence
// directory, and is idempotent; a window ended after it is Truncated.
func TestCloseStopsGoroutine(t *testing.T) {
	fence := t.TempDir()
	before := runtime.NumGoroutine()
	w, err := changes.Start(changes.Config{Root: t.TempDir(), FenceDir: fence})
	if err != nil {
		t.Fatal(err)
	}
	tok := w.Begin()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	if c := w.End(context.Background(), tok); !c.Truncated {
		t.Fatal("a window ended after Close is not Truncated")
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if n := runtime.NumGoroutine(); n > before {
			return fmt.Errorf("%d goroutines, want at most %d", n, before)
		}
		return nil
	})
	if ents, _ := os.ReadDir(fence); len(ents) != 0 {
		t.Fatalf("the fence directory is left: %v", ents)
	}
	if !w.Stale() {
		t.Fatal("a closed watcher is not stale")
	}
}

// TestStaleRoot: a workspace moved away (swapped by a restore) makes the
// watcher stale.
func TestStaleRoot(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "ws")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	w, _ := start(t, changes.Config{Root: root})
	if w.Stale() {
		t.Fatal("stale at start")
	}
	if err := os.Rename(root, filepath.Join(parent, "old")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if !w.Stale() {
			return os.ErrExist
		}
		return nil
	})
}

// TestBadRoot: a root that does not exist is runtime_error, not a panic.
func TestBadRoot(t *testing.T) {
	_, err := changes.Start(changes.Config{Root: filepath.Join(t.TempDir(), "none"), FenceDir: t.TempDir()})
	if err == nil {
		t.Fatal("no error for a missing root")
	}
	if _, err := changes.Start(changes.Config{Root: t.TempDir(), FenceDir: filepath.Join(t.TempDir(), "none")}); err == nil {
		t.Fatal("no error for a missing fence directory")
	}
}

// TestEndPaths checks the record dirty tracking reads: every path a
// window saw, more than commands.MaxChangedPaths of them, complete; and
// incomplete once the window tracked more paths than its bound.
func TestEndPaths(t *testing.T) {
	w, dir := start(t, changes.Config{MaxTracked: 300})
	ctx := testenv.Context(t, 10*time.Second)
	tok := w.Begin()
	sh(t, dir, "mkdir a && for i in $(seq 1 250); do echo x > a/f$i; done && rm a/f1")
	got, complete := w.EndPaths(ctx, tok)
	if !complete {
		t.Fatal("a window within its bounds is not complete")
	}
	if len(got) != 251 || !slices.Contains(got, "a/f250") || !slices.Contains(got, "a/f1") || !slices.Contains(got, "a") {
		t.Fatalf("got %d paths (%v...), want a and a/f1..a/f250", len(got), got[:min(5, len(got))])
	}
	tok = w.Begin()
	sh(t, dir, "for i in $(seq 1 400); do echo x > a/g$i; done")
	if got, complete = w.EndPaths(ctx, tok); complete {
		t.Fatalf("a window past its bound of 300 paths is complete (%d paths)", len(got))
	}
	if _, complete := w.EndPaths(ctx, tok); complete {
		t.Fatal("an ended window's token is complete")
	}
	w.Close()
	if _, complete := w.EndPaths(ctx, w.Begin()); complete {
		t.Fatal("a closed watcher's window is complete")
	}
}
