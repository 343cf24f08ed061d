package snapshot

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/errcode"
)

func TestScanRecordsTheTree(t *testing.T) {
	dir := testTree(t)
	outside := t.TempDir()
	mkfile(t, outside, "secret", []byte("outside"), 0o644)
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "escapedir")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mkfile(t, dir, "skipme/x", []byte("x"), 0o644)
	mkfile(t, dir, "a/skipfile", []byte("x"), 0o644)
	skip := func(rel string) bool { return rel == "skipme" || rel == "a/skipfile" }

	s, err := Scan(context.Background(), dir, skip, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := s.Manifest
	if _, err := Decode(m.Encode(), Limits{}); err != nil {
		t.Fatalf("the scanned manifest does not decode: %v", err)
	}
	var paths []string
	for _, e := range m.Entries {
		paths = append(paths, e.Path)
	}
	want := "a a/b a/b/c a/b/c/big a/b/c/same-as-exact a/b/exact a/below empty emptydir escape escapedir link one ro ro/inside"
	if got := strings.Join(paths, " "); got != want {
		t.Fatalf("paths:\n got %s\nwant %s", got, want)
	}
	if s.Skipped() != 4 { // skipme, a/skipfile, fifo, sock
		t.Fatalf("skipped %d, want 4", s.Skipped())
	}
	checks := map[string]Entry{
		"escape":    {Kind: KindSymlink, Mode: 0o777, Target: filepath.Join(outside, "secret")},
		"escapedir": {Kind: KindSymlink, Mode: 0o777, Target: outside},
		"ro":        {Kind: KindDir, Mode: 0o555},
		"emptydir":  {Kind: KindDir, Mode: 0o700},
		"one":       {Kind: KindFile, Mode: 0o600, Size: 1, Chunks: []string{digestOf("1")}},
		"empty":     {Kind: KindFile, Mode: 0o644},
	}
	for p, w := range checks {
		e, _ := m.Lookup(p)
		w.Path = p
		if e.Kind != w.Kind || e.Mode != w.Mode || e.Size != w.Size || e.Target != w.Target || strings.Join(e.Chunks, ",") != strings.Join(w.Chunks, ",") {
			t.Errorf("%s: got %+v, want %+v", p, e, w)
		}
	}
	big, _ := m.Lookup("a/b/c/big")
	if len(big.Chunks) != 4 || big.Size != 3*ChunkSize+5 {
		t.Fatalf("big: %d bytes in %d chunks", big.Size, len(big.Chunks))
	}
	data, err := s.Read(big.Chunks[3])
	if err != nil || !bytes.Equal(data, content(3, 3*ChunkSize+5)[3*ChunkSize:]) {
		t.Fatalf("Read of the last chunk: %d bytes, %v", len(data), err)
	}
	if files, n := s.Hashed(); files != 7 || n != 1+ChunkSize-1+ChunkSize+3*ChunkSize+5+ChunkSize+13 {
		t.Fatalf("hashed %d files, %d bytes", files, n)
	}
	if _, err := s.Read(digestOf("outside")); errcode.Of(err) != errcode.NotFound {
		t.Fatalf("Read of a digest not in the scan: got %v, want not_found", err)
	}
	// The sandbox changes the file after the scan: Read says so.
	mkfile(t, dir, "a/b/c/big", content(4, 3*ChunkSize+5), 0o644)
	if _, err := s.Read(big.Chunks[3]); errcode.Of(err) != errcode.ConcurrencyConflict {
		t.Fatalf("Read of a changed chunk: got %v, want concurrency_conflict", err)
	}
	// ... or replaces it by a symlink to a file outside that holds the chunk.
	mkfile(t, outside, "copy", content(3, 3*ChunkSize+5), 0o644)
	os.Remove(filepath.Join(dir, "a/b/c/big"))
	if err := os.Symlink(filepath.Join(outside, "copy"), filepath.Join(dir, "a/b/c/big")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(big.Chunks[3]); errcode.Of(err) != errcode.ConcurrencyConflict {
		t.Fatalf("Read through a symlink leading outside: got %v, want concurrency_conflict", err)
	}
}

func TestScanNotUTF8(t *testing.T) {
	dir := t.TempDir()
	mkfile(t, dir, "bad\xff", []byte("x"), 0o644)
	if _, err := Scan(context.Background(), dir, nil, nil); errcode.Of(err) != errcode.InvalidPath {
		t.Fatalf("got %v, want invalid_path", err)
	}
}

// TestHashCacheHonesty: the cache saves reading unchanged files, and never
// hides a change: not one that keeps size and mtime (ctime moves), not a
// rewrite in the same second as the scan that hashed the file.
func TestHashCacheHonesty(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	mkfile(t, dir, "f", []byte("version 1"), 0o644)
	mkfile(t, dir, "g", []byte("unchanged"), 0o644)
	cache := NewHashCache()
	later := func(d time.Duration) time.Time { return time.Now().Add(d) }

	// Written just now: racily clean for a scan starting now, so the next
	// scan reads both files again however unchanged they look.
	s1, err := scanAt(ctx, dir, nil, cache, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := s1.Hashed(); f != 2 {
		t.Fatalf("first scan hashed %d files, want 2", f)
	}
	s2, err := scanAt(ctx, dir, nil, cache, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := s2.Hashed(); f != 2 {
		t.Fatalf("racily clean files were trusted: hashed %d, want 2", f)
	}
	// A scan 2 s after the writes trusts what it hashed; the next one reads nothing.
	if _, err := scanAt(ctx, dir, nil, cache, later(2*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	s4, err := scanAt(ctx, dir, nil, cache, later(3*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	if f, n := s4.Hashed(); f != 0 || n != 0 {
		t.Fatalf("unchanged files were read again: %d files, %d bytes", f, n)
	}
	if s4.Manifest.Root() != s1.Manifest.Root() {
		t.Fatal("the cached scan's root differs")
	}
	if _, err := s4.Read(digestOf("unchanged")); err != nil {
		t.Fatalf("Read of a chunk the cache vouched for: %v", err)
	}

	// Same size, mtime put back: ctime still moves.
	fi, _ := os.Stat(filepath.Join(dir, "f"))
	mkfile(t, dir, "f", []byte("version 2"), 0o644)
	if err := os.Chtimes(filepath.Join(dir, "f"), fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	s5, err := scanAt(ctx, dir, nil, cache, later(4*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := s5.Manifest.Lookup("f"); e.Chunks[0] != digestOf("version 2") {
		t.Fatal("a change that kept size and mtime was hidden by the cache")
	}
	if f, _ := s5.Hashed(); f != 1 {
		t.Fatalf("hashed %d files, want 1 (f)", f)
	}

	// A rewrite in the same second as the scan that hashed it, mtime
	// put back to the same second: seen.
	mkfile(t, dir, "h", []byte("same second A"), 0o644)
	s6, err := scanAt(ctx, dir, nil, cache, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	hi, _ := os.Stat(filepath.Join(dir, "h"))
	mkfile(t, dir, "h", []byte("same second B"), 0o644)
	if err := os.Chtimes(filepath.Join(dir, "h"), hi.ModTime(), hi.ModTime()); err != nil {
		t.Fatal(err)
	}
	s7, err := scanAt(ctx, dir, nil, cache, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := s6.Manifest.Lookup("h")
	b, _ := s7.Manifest.Lookup("h")
	if a.Chunks[0] != digestOf("same second A") || b.Chunks[0] != digestOf("same second B") {
		t.Fatalf("same-second rewrite: got %s then %s", a.Chunks[0], b.Chunks[0])
	}
	// Removed files leave the cache and the manifest.
	os.Remove(filepath.Join(dir, "g"))
	s8, err := scanAt(ctx, dir, nil, cache, later(5*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s8.Manifest.Lookup("g"); ok {
		t.Fatal("a removed file is still in the manifest")
	}
	cache.mu.Lock()
	_, ok := cache.files["g"]
	cache.mu.Unlock()
	if ok {
		t.Fatal("a removed file is still in the cache")
	}
}

// TestHashCacheRacilyCleanByKey: an entry whose key matches but that was
// hashed racily clean is not trusted, even though nothing about the file
// moved (what a coarse-timestamp file system would show after a rewrite).
func TestHashCacheRacilyCleanByKey(t *testing.T) {
	dir := t.TempDir()
	mkfile(t, dir, "f", []byte("real"), 0o644)
	cache := NewHashCache()
	if _, err := scanAt(context.Background(), dir, nil, cache, time.Now(), nil); err != nil {
		t.Fatal(err)
	}
	// Poison the untrusted entry as a same-tick rewrite would leave it:
	// same key, other content.
	cache.mu.Lock()
	e := cache.files["f"]
	e.chunks = []string{digestOf("stale")}
	cache.files["f"] = e
	cache.mu.Unlock()
	s, err := scanAt(context.Background(), dir, nil, cache, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Manifest.Lookup("f"); got.Chunks[0] != digestOf("real") {
		t.Fatal("a racily clean cache entry was trusted")
	}
}

// TestScanRace is an attack: while scans run, the sandbox swaps a file
// for a symlink to a secret outside the workspace, for a FIFO, and a
// directory for a symlink to the host's root. No scan may read the
// secret, follow the link, hang on the FIFO or fail with anything but
// concurrency_conflict.
func TestScanRace(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	secret := []byte("the host's secret")
	mkfile(t, outside, "secret", secret, 0o644)
	mkfile(t, dir, "f", []byte("file"), 0o644)
	mkfile(t, dir, "d/inner", []byte("inner"), 0o644)
	mkfile(t, dir, "spare/inner", []byte("inner"), 0o644)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			tmp := filepath.Join(dir, ".tmp")
			os.RemoveAll(tmp)
			switch i % 4 {
			case 0:
				_ = os.Symlink(filepath.Join(outside, "secret"), tmp)
			case 1:
				_ = syscall.Mkfifo(tmp, 0o644)
			default:
				_ = os.WriteFile(tmp, []byte("file"), 0o644)
			}
			_ = os.Rename(tmp, filepath.Join(dir, "f"))
			// d flips between a directory and a symlink to "/".
			if i%2 == 0 {
				_ = os.Rename(filepath.Join(dir, "d"), filepath.Join(dir, "spare2"))
				_ = os.Symlink("/", filepath.Join(dir, "d"))
			} else {
				_ = os.Remove(filepath.Join(dir, "d"))
				_ = os.Rename(filepath.Join(dir, "spare2"), filepath.Join(dir, "d"))
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	ok, conflicts := 0, 0
	for range 300 {
		s, err := Scan(context.Background(), dir, nil, NewHashCache())
		if err != nil {
			if errcode.Of(err) != errcode.ConcurrencyConflict {
				t.Fatalf("scan under attack: %v", err)
			}
			conflicts++
			continue
		}
		ok++
		for _, e := range s.Manifest.Entries {
			if strings.HasPrefix(e.Path, "d/") && e.Path != "d/inner" {
				t.Fatalf("the scan followed d to %s", e.Path)
			}
			for _, c := range e.Chunks {
				if c == digestOf(string(secret)) {
					t.Fatalf("the scan read the secret through %s", e.Path)
				}
			}
		}
		if _, err := Decode(s.Manifest.Encode(), Limits{}); err != nil {
			t.Fatalf("a scan under attack made an invalid manifest: %v", err)
		}
	}
	t.Logf("%d scans succeeded, %d were conflicts", ok, conflicts)
	if ok == 0 {
		t.Fatal("no scan succeeded")
	}
}

// TestScanFileChangingWhileHashed: a file that changes while it is read
// is read once more; one that changes again makes the scan a conflict.
func TestScanFileChangingWhileHashed(t *testing.T) {
	dir := t.TempDir()
	mkfile(t, dir, "f", content(10, 2*ChunkSize), 0o644)
	mkfile(t, dir, "g", []byte("steady"), 0o644)
	rewrite := func(seed uint64) {
		f, err := os.OpenFile(filepath.Join(dir, "f"), os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		// Same size, another mtime: what a write during the read leaves.
		_, _ = f.WriteAt(content(seed, 2*ChunkSize), 0)
		mt := time.Now().Add(time.Duration(seed) * time.Second)
		_ = f.Sync()
		_ = os.Chtimes(f.Name(), mt, mt)
	}
	// Changed during the first read only: the second read is the result.
	s, err := scanAt(context.Background(), dir, nil, nil, time.Now(), func(rel string, attempt int) {
		if rel == "f" && attempt == 0 {
			rewrite(11)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := s.Manifest.Lookup("f")
	if want := digestOf(string(content(11, 2*ChunkSize)[ChunkSize:])); e.Chunks[1] != want {
		t.Fatal("the scan kept the digests of a read the file changed under")
	}
	if f, _ := s.Hashed(); f != 2 {
		t.Fatalf("hashed %d files, want 2", f)
	}
	// Changed during both reads: concurrency_conflict.
	_, err = scanAt(context.Background(), dir, nil, nil, time.Now(), func(rel string, attempt int) {
		if rel == "f" {
			rewrite(uint64(20 + attempt))
		}
	})
	if !errors.Is(err, errcode.ErrConcurrencyConflict) || !errcode.Of(err).Retryable() {
		t.Fatalf("a file changing under every read: got %v, want concurrency_conflict", err)
	}
	// A file that grows while read is a change too.
	_, err = scanAt(context.Background(), dir, nil, nil, time.Now(), func(rel string, attempt int) {
		if rel == "g" {
			f, _ := os.OpenFile(filepath.Join(dir, "g"), os.O_WRONLY|os.O_APPEND, 0)
			_, _ = f.Write([]byte("+"))
			f.Close()
		}
	})
	if !errors.Is(err, errcode.ErrConcurrencyConflict) {
		t.Fatalf("a file growing under every read: got %v, want concurrency_conflict", err)
	}
}

func TestScanCancelled(t *testing.T) {
	dir := testTree(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Scan(ctx, dir, nil, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled scan: got %v, want context.Canceled", err)
	}
	if _, err := Scan(context.Background(), filepath.Join(dir, "nope"), nil, nil); errcode.Of(err) != errcode.RuntimeError {
		t.Fatalf("missing directory: got %v, want runtime_error", err)
	}
	// A cancelled FromTar stops too.
	if _, err := FromTar(ctx, bytes.NewReader(exportTar(t, dir, nil)), nil, archive.Limits{}, newChunkStore().put); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled FromTar: got %v, want context.Canceled", err)
	}
}

// TestHashCacheSeed: a cache seeded with a tree's manifest lets the next
// scan hash nothing, and the same manifest comes out; a file changed
// after the seeding (same size, mtime set back) is hashed again and
// recorded as it is; a file not of the manifest's size, and every file
// changed within the racy window of the seeding, is not trusted.
func TestHashCacheSeed(t *testing.T) {
	dir := testTree(t)
	want := mustScan(t, dir, nil).Manifest
	c := NewHashCache()
	if err := c.Seed(dir, want, time.Now().Add(2*racyWindow)); err != nil {
		t.Fatal(err)
	}
	s := mustScan(t, dir, c)
	if files, _ := s.Hashed(); files != 0 || s.Manifest.Root() != want.Root() {
		t.Fatalf("scan after the seed hashed %d files, root %s; want 0, %s", files, s.Manifest.Root(), want.Root())
	}
	// Changed after the seed, its mtime set back: its ctime moved.
	p := filepath.Join(dir, "a", "below")
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Seed(dir, want, time.Now().Add(2*racyWindow)); err != nil {
		t.Fatal(err)
	}
	mkfile(t, dir, "a/below", content(9, ChunkSize-1), 0o644)
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	s = mustScan(t, dir, c)
	if files, _ := s.Hashed(); files != 1 {
		t.Fatalf("scan after a change hashed %d files; want 1", files)
	}
	if e, _ := s.Manifest.Lookup("a/below"); e.Chunks[0] == mustLookup(t, want, "a/below").Chunks[0] {
		t.Fatal("the changed file was recorded with the seeded digest")
	}
	// A manifest whose sizes are not the files': nothing trusted.
	other := mustScan(t, testTree(t), nil).Manifest
	for i := range other.Entries {
		other.Entries[i].Size++
	}
	if err := c.Seed(dir, other, time.Now().Add(2*racyWindow)); err != nil {
		t.Fatal(err)
	}
	if files, _ := mustScan(t, dir, c).Hashed(); files != 7 {
		t.Fatalf("scan after a seed of wrong sizes hashed %d files; want all 7", files)
	}
	// Seeded at the files' own time: racily clean, not trusted.
	fresh := testTree(t)
	m := mustScan(t, fresh, nil).Manifest
	c2 := NewHashCache()
	if err := c2.Seed(fresh, m, time.Now()); err != nil {
		t.Fatal(err)
	}
	if files, _ := mustScan(t, fresh, c2).Hashed(); files != 7 {
		t.Fatalf("scan after a racy seed hashed %d files; want all 7", files)
	}
}

func mustLookup(t *testing.T, m *Manifest, p string) Entry {
	t.Helper()
	e, ok := m.Lookup(p)
	if !ok {
		t.Fatalf("%s not in the manifest", p)
	}
	return e
}
