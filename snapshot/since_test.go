package snapshot

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/nodes/runtime/changes"
)

// treeOps are random changes to a tree, each as a shell user would make
// them: they return what they did, for failure messages.
var treeOps = []func(t *testing.T, rng *rand.Rand, dir string) string{
	func(t *testing.T, rng *rand.Rand, dir string) string { // create a file
		p := fmt.Sprintf("d%d/n%d", rng.IntN(4), rng.Uint64())
		mkfile(t, dir, p, content(rng.Uint64(), rng.IntN(3000)), 0o644)
		return "create " + p
	},
	// Modifications change a file's size: one in the same timestamp
	// tick as its last scan, at the same size, is the racily-clean case
	// that these tests' trusted start hides (TestScanCacheRacilyClean).
	func(t *testing.T, rng *rand.Rand, dir string) string { // modify in place
		p := pickFile(rng, dir)
		if p == "" {
			return "modify: no file"
		}
		f, err := os.OpenFile(filepath.Join(dir, p), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.Write([]byte{byte(rng.Uint32()), byte(rng.Uint32())})
		f.Close()
		return "modify " + p
	},
	func(t *testing.T, rng *rand.Rand, dir string) string { // rename a file
		p := pickFile(rng, dir)
		if p == "" {
			return "rename: no file"
		}
		to := fmt.Sprintf("d%d/r%d", rng.IntN(4), rng.Uint64())
		_ = os.MkdirAll(filepath.Dir(filepath.Join(dir, to)), 0o755)
		if err := os.Rename(filepath.Join(dir, p), filepath.Join(dir, to)); err != nil {
			t.Fatal(err)
		}
		return "rename " + p + " " + to
	},
	func(t *testing.T, rng *rand.Rand, dir string) string { // rename a directory
		from, to := fmt.Sprintf("d%d", rng.IntN(4)), fmt.Sprintf("d%d", rng.IntN(4))
		if from == to {
			return "rename dir: same"
		}
		_ = os.RemoveAll(filepath.Join(dir, to))
		if err := os.Rename(filepath.Join(dir, from), filepath.Join(dir, to)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return "rename dir " + from + " " + to
	},
	func(t *testing.T, rng *rand.Rand, dir string) string { // rm -r a directory
		p := fmt.Sprintf("d%d", rng.IntN(4))
		if err := os.RemoveAll(filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
		return "rm -r " + p
	},
	func(t *testing.T, rng *rand.Rand, dir string) string { // rm a file
		p := pickFile(rng, dir)
		if p == "" {
			return "rm: no file"
		}
		if err := os.Remove(filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
		return "rm " + p
	},
	func(t *testing.T, rng *rand.Rand, dir string) string { // chmod a file or a directory
		p := pickFile(rng, dir)
		if rng.IntN(2) == 0 || p == "" {
			p = fmt.Sprintf("d%d", rng.IntN(4))
			_ = os.Chmod(filepath.Join(dir, p), 0o700|os.FileMode(rng.IntN(2))*0o055)
			return "chmod dir " + p
		}
		_ = os.Chmod(filepath.Join(dir, p), 0o600|os.FileMode(rng.IntN(2))*0o111)
		return "chmod " + p
	},
	func(t *testing.T, rng *rand.Rand, dir string) string { // a symlink, or one replaced
		p := fmt.Sprintf("d%d/s%d", rng.IntN(4), rng.IntN(3))
		_ = os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755)
		_ = os.Remove(filepath.Join(dir, p))
		if err := os.Symlink(fmt.Sprintf("t%d", rng.IntN(100)), filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
		return "symlink " + p
	},
	func(t *testing.T, rng *rand.Rand, dir string) string { // a directory made with files in it
		p := fmt.Sprintf("d%d/sub%d", rng.IntN(4), rng.IntN(3))
		mkfile(t, dir, p+"/deep/x", content(rng.Uint64(), 100), 0o644)
		return "mkdir -p " + p
	},
	func(t *testing.T, rng *rand.Rand, dir string) string { // a file replaced by a directory
		p := pickFile(rng, dir)
		if p == "" {
			return "replace: no file"
		}
		_ = os.Remove(filepath.Join(dir, p))
		mkfile(t, dir, p+"/in", content(rng.Uint64(), 10), 0o644)
		return "file to dir " + p
	},
	func(t *testing.T, rng *rand.Rand, dir string) string { // a hard link, then written through
		p := pickFile(rng, dir)
		if p == "" {
			return "link: no file"
		}
		l := fmt.Sprintf("d%d/l%d", rng.IntN(4), rng.IntN(1000))
		_ = os.MkdirAll(filepath.Dir(filepath.Join(dir, l)), 0o755)
		if err := os.Link(filepath.Join(dir, p), filepath.Join(dir, l)); err != nil {
			return "link: " + err.Error()
		}
		f, err := os.OpenFile(filepath.Join(dir, l), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.Write([]byte("through the link"))
		f.Close()
		return "link " + p + " " + l
	},
}

// pickFile returns a random regular file of the tree ("" when none).
func pickFile(rng *rand.Rand, dir string) string {
	var files []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, rel)
		}
		return nil
	})
	if len(files) == 0 {
		return ""
	}
	slices.Sort(files)
	return files[rng.IntN(len(files))]
}

// TestScanSinceMatchesFullScan applies random changes to a tree between
// scans, a real inotify watcher recording them as dirty tracking does,
// and checks that each incremental scan's manifest is the full scan's.
func TestScanSinceMatchesFullScan(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 25))
			dir := t.TempDir()
			for i := range 40 {
				mkfile(t, dir, fmt.Sprintf("d%d/f%d", i%4, i), content(uint64(i), rng.IntN(2000)), 0o644)
			}
			w, err := changes.Start(changes.Config{Root: dir})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			cache := NewHashCache()
			tok := w.Begin()
			// The scans start 2 s ahead, so that files written just now
			// count as trusted: the test is of what is read, not of the
			// racily-clean rule (TestScanCacheRacilyClean).
			base, err := scanFrom(ctx, dir, nil, cache, time.Now().Add(2*time.Second), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			incremental := 0
			for round := range 12 {
				var did []string
				for range 1 + rng.IntN(4) {
					did = append(did, treeOps[rng.IntN(len(treeOps))](t, rng, dir))
				}
				next := w.Begin()
				paths, complete := w.EndPaths(ctx, tok)
				tok = next
				if !complete {
					t.Fatalf("round %d: the watcher's record is not complete", round)
				}
				got, err := scanFrom(ctx, dir, nil, cache, time.Now().Add(2*time.Second), nil, &Since{Manifest: base.Manifest, Changed: paths})
				if err != nil {
					t.Fatal(err)
				}
				want, err := scanFrom(ctx, dir, nil, NewHashCache(), time.Now().Add(2*time.Second), nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				if g, w := got.Manifest.Root(), want.Manifest.Root(); g != w {
					t.Fatalf("round %d after %q (changed %q): incremental manifest\n%s\nwant\n%s", round, did, paths, got.Manifest.Encode(), want.Manifest.Encode())
				}
				if got.Incremental {
					incremental++
				}
				base = got
			}
			if incremental == 0 {
				t.Fatal("no scan was incremental")
			}
		})
	}
}

// TestScanSinceReadsOnlyChanged shows what an incremental scan saves: of
// 200 files, it reads only the one changed, and a file it was not told
// about keeps its earlier digests even when its bytes changed (which is
// why Changed must be complete).
func TestScanSinceReadsOnlyChanged(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for i := range 200 {
		mkfile(t, dir, fmt.Sprintf("d%d/f%d", i%10, i), content(uint64(i), 100), 0o644)
	}
	cache := NewHashCache()
	start := time.Now().Add(2 * time.Second)
	base, err := scanFrom(ctx, dir, nil, cache, start, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	mkfile(t, dir, "d3/f3", content(1000, 101), 0o644)
	mkfile(t, dir, "d4/f4", content(1001, 101), 0o644) // not named below
	got, err := scanFrom(ctx, dir, nil, cache, start, nil, &Since{Manifest: base.Manifest, Changed: []string{"d3/f3"}})
	if err != nil {
		t.Fatal(err)
	}
	if !got.Incremental {
		t.Fatal("the scan was not incremental")
	}
	if f, _ := got.Hashed(); f != 1 {
		t.Fatalf("hashed %d files, want 1", f)
	}
	old, _ := base.Manifest.Lookup("d4/f4")
	if e, _ := got.Manifest.Lookup("d4/f4"); !slices.Equal(e.Chunks, old.Chunks) {
		t.Fatal("a path not named changed was read again")
	}
	was, _ := base.Manifest.Lookup("d3/f3")
	if e, _ := got.Manifest.Lookup("d3/f3"); slices.Equal(e.Chunks, was.Chunks) {
		t.Fatal("the changed file kept its digests")
	}
}

// TestScanSinceFallsBack checks the cases an incremental scan reads in
// full: a file with two links (a write through the other name would not
// name this one), and no earlier manifest.
func TestScanSinceFallsBack(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	mkfile(t, dir, "a/x", content(1, 100), 0o644)
	mkfile(t, dir, "b/y", content(2, 100), 0o644)
	cache := NewHashCache()
	start := time.Now().Add(2 * time.Second)
	base, err := scanFrom(ctx, dir, nil, cache, start, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A link, then a write through it: only the new name is reported.
	if err := os.Link(filepath.Join(dir, "a/x"), filepath.Join(dir, "b/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "b/link"), content(3, 200), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := scanFrom(ctx, dir, nil, cache, start, nil, &Since{Manifest: base.Manifest, Changed: []string{"b/link"}})
	if err != nil {
		t.Fatal(err)
	}
	want := mustScan(t, dir, NewHashCache())
	if got.Incremental || got.Manifest.Root() != want.Manifest.Root() {
		t.Fatalf("incremental %v, root %s; want a full scan's %s", got.Incremental, got.Manifest.Root(), want.Manifest.Root())
	}
	// The next one too, while the file has two links.
	got, err = scanFrom(ctx, dir, nil, cache, start, nil, &Since{Manifest: got.Manifest})
	if err != nil {
		t.Fatal(err)
	}
	if got.Incremental {
		t.Fatal("a scan with a twice-linked file in the cache was incremental")
	}
	if got, err := ScanSince(ctx, dir, nil, cache, nil); err != nil || got.Incremental {
		t.Fatalf("ScanSince(nil): incremental %v, %v", got != nil && got.Incremental, err)
	}
}
