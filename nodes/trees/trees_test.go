package trees

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fill writes one file of n bytes into a tree being built.
func fill(n int) func(dir string) (int64, error) {
	return func(dir string) (int64, error) {
		return int64(n), os.WriteFile(filepath.Join(dir, "f"), make([]byte, n), 0o644)
	}
}

func none() (map[string]bool, error) { return map[string]bool{}, nil }

// TestBuildGetRelease: a built tree is found again by its tenant, root
// and owner only; a build that fails publishes nothing; bad names are
// refused.
func TestBuildGetRelease(t *testing.T) {
	ctx := context.Background()
	c, err := Open(t.TempDir(), 1<<20, none)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := c.Build(ctx, "acme", "r1", 1000, 1000, fill(10))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(tr.Dir(), "f")); err != nil || len(b) != 10 {
		t.Fatalf("tree file: %d bytes, %v", len(b), err)
	}
	tr.Release()
	tr.Release() // once only
	for _, k := range []struct {
		tenant, root string
		uid          int
	}{{"other", "r1", 1000}, {"acme", "r2", 1000}, {"acme", "r1", 0}} {
		if _, ok := c.Get(k.tenant, k.root, k.uid, k.uid); ok {
			t.Fatalf("Get(%+v) found acme's tree", k)
		}
	}
	got, ok := c.Get("acme", "r1", 1000, 1000)
	if !ok || got.Dir() != tr.Dir() {
		t.Fatalf("Get = %v, %v; want %s", got, ok, tr.Dir())
	}
	got.Release()
	boom := errors.New("boom")
	if _, err := c.Build(ctx, "acme", "r3", 0, 0, func(dir string) (int64, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Fatalf("failed build = %v", err)
	}
	if _, ok := c.Get("acme", "r3", 0, 0); ok {
		t.Fatal("a failed build was published")
	}
	for _, bad := range [][2]string{{"../x", "r"}, {"acme", "a/b"}, {"", "r"}, {"acme", ".."}} {
		if _, err := c.Build(ctx, bad[0], bad[1], 0, 0, fill(1)); err == nil {
			t.Fatalf("Build(%q, %q) was taken", bad[0], bad[1])
		}
	}
	if n, b := c.Stats(); n != 1 || b != 10 {
		t.Fatalf("Stats = %d trees, %d bytes; want 1, 10", n, b)
	}
}

// TestEvictionSparesUsedTrees: past the budget the least recently used
// tree goes, never one that is pinned or that an overlay uses, and none
// at all when what overlays use cannot be read.
func TestEvictionSparesUsedTrees(t *testing.T) {
	ctx := context.Background()
	used := map[string]bool{}
	var usedErr error
	c, err := Open(t.TempDir(), 25, func() (map[string]bool, error) { return used, usedErr })
	if err != nil {
		t.Fatal(err)
	}
	build := func(root string) *Tree {
		t.Helper()
		tr, err := c.Build(ctx, "acme", root, 0, 0, fill(10))
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	a := build("a") // pinned: kept
	b := build("b")
	b.Release()
	used[b.Dir()] = true // mounted: kept
	cc := build("c")
	cc.Release()
	// 30 bytes > 25, but a is pinned, b used and c just built (pinned
	// while it was published): none goes yet.
	for _, tr := range []*Tree{a, b, cc} {
		if _, err := os.Stat(tr.Dir()); err != nil {
			t.Fatalf("tree removed though pinned or used: %v", err)
		}
	}
	a.Release()
	usedErr = errors.New("mount table unreadable")
	d := build("d")
	d.Release()
	if _, err := os.Stat(a.Dir()); err != nil {
		t.Fatalf("tree removed while what overlays use was unknown: %v", err)
	}
	usedErr = nil
	e := build("e")
	e.Release()
	// Least recently used first, until 25 bytes or less: a, c and d go;
	// b stays (used), e stays.
	for _, tr := range []*Tree{a, cc, d} {
		if _, err := os.Stat(tr.Dir()); !os.IsNotExist(err) {
			t.Fatalf("free tree %s still there past the budget: %v", tr.Dir(), err)
		}
	}
	for _, tr := range []*Tree{b, e} {
		if _, err := os.Stat(tr.Dir()); err != nil {
			t.Fatalf("tree %s removed: %v", tr.Dir(), err)
		}
	}
	if n, bytes := c.Stats(); n != 2 || bytes != 20 {
		t.Fatalf("Stats = %d, %d; want 2 trees, 20 bytes", n, bytes)
	}
}

// TestOpenFindsTrees: a reopened cache knows the published trees and
// removes what a stopped node left half built or half removed.
func TestOpenFindsTrees(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(dir, 1<<20, none)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := c.Build(context.Background(), "acme", "r1", 0, 0, fill(7))
	if err != nil {
		t.Fatal(err)
	}
	tr.Release()
	half := filepath.Join(dir, "acme", ".build-XYZ")
	if err := os.MkdirAll(filepath.Join(half, "tree", "ro"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(half, "tree"), 0o555); err != nil {
		t.Fatal(err)
	}
	noBytes := filepath.Join(dir, "acme", "r9-0-0")
	if err := os.MkdirAll(filepath.Join(noBytes, "tree"), 0o755); err != nil {
		t.Fatal(err)
	}
	// One process (one Open) at a time per directory.
	if _, err := Open(dir, 1<<20, none); !errors.Is(err, ErrInUse) {
		t.Fatalf("second Open of a directory in use = %v; want ErrInUse", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c2, err := Open(dir, 1<<20, none)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if n, b := c2.Stats(); n != 1 || b != 7 {
		t.Fatalf("reopened Stats = %d, %d; want 1, 7", n, b)
	}
	if _, ok := c2.Get("acme", "r1", 0, 0); !ok {
		t.Fatal("reopened cache lost the tree")
	}
	for _, p := range []string{half, noBytes} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s left by a stopped node is still there (%v)", strings.TrimPrefix(p, dir), err)
		}
	}
}

// TestConcurrentBuildsFillOnce: eight Builds of one tree at once (the
// children of a fork) write it once and all get it; a Build that fails
// lets a waiting one build its own.
func TestConcurrentBuildsFillOnce(t *testing.T) {
	c, err := Open(t.TempDir(), 1<<20, none)
	if err != nil {
		t.Fatal(err)
	}
	var fills atomic.Int32
	release := make(chan struct{})
	slow := func(dir string) (int64, error) {
		fills.Add(1)
		<-release
		return fill(5)(dir)
	}
	var wg sync.WaitGroup
	dirs := make([]string, 8)
	errs := make([]error, 8)
	for i := range 8 {
		wg.Go(func() {
			tr, err := c.Build(context.Background(), "acme", "r", 0, 0, slow)
			errs[i] = err
			if err == nil {
				dirs[i] = tr.Dir()
				tr.Release()
			}
		})
	}
	// Wait (with a deadline) until one fill runs and the rest wait.
	deadline := time.Now().Add(10 * time.Second)
	for fills.Load() == 0 && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	if n := fills.Load(); n != 1 {
		t.Fatalf("fill ran %d times; want 1", n)
	}
	for i := range 8 {
		if errs[i] != nil || dirs[i] != dirs[0] {
			t.Fatalf("build %d = %q, %v; want %q", i, dirs[i], errs[i], dirs[0])
		}
	}
	// A failed build: the next one builds.
	boom := errors.New("boom")
	if _, err := c.Build(context.Background(), "acme", "s", 0, 0, func(string) (int64, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	tr, err := c.Build(context.Background(), "acme", "s", 0, 0, fill(1))
	if err != nil {
		t.Fatal(err)
	}
	tr.Release()
}
