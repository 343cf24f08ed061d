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
	"github.com/paddock-dev/paddock/snapshot/snapshottest"
)

// TestScanSinceMatchesFullScan applies random changes to a tree between
// scans, a real inotify watcher recording them as dirty tracking does,
// and checks that each incremental scan's manifest is the full scan's.
func TestScanSinceMatchesFullScan(t *testing.T) {
	ctx := context.Background()
	incremental, rounds := 0, 0
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 25))
			dir := t.TempDir()
			snapshottest.Populate(t, rng, dir, 40)
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
			for round := range 12 {
				var did []string
				for range 1 + rng.IntN(4) {
					did = append(did, snapshottest.Change(t, rng, dir, true))
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
				rounds++
				if got.Incremental {
					incremental++
				}
				base = got
			}
		})
	}
	// Once a hard link is made the scans are full while it lasts: the
	// rest must be incremental.
	t.Logf("%d of %d scans incremental", incremental, rounds)
	if incremental < rounds/4 {
		t.Fatalf("only %d of %d scans were incremental", incremental, rounds)
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
