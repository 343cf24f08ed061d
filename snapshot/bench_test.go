package snapshot

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

const (
	benchFiles    = 10_000
	benchFileSize = 100 << 10 // 10,000 x 100 KiB = 1,000 MiB
)

// benchTree writes 10,000 files of 100 KiB in 100 directories and one
// 1 MiB file, unless /tmp lacks the room.
func benchTree(b *testing.B) string {
	b.Helper()
	var fs syscall.Statfs_t
	if err := syscall.Statfs(os.TempDir(), &fs); err != nil || int64(fs.Bavail)*fs.Bsize < 4<<30 {
		b.Skip("less than 4 GiB free under the temp dir")
	}
	dir := b.TempDir()
	buf := content(1, benchFileSize)
	for i := range benchFiles {
		// Each file its own content: put its number in the first bytes.
		copy(buf, fmt.Sprintf("%08d", i))
		mkfile(b, dir, fmt.Sprintf("d%02d/f%04d", i%100, i), buf, 0o644)
	}
	mkfile(b, dir, "big", content(2, ChunkSize), 0o644)
	return dir
}

// BenchmarkScan measures a scan of 1 GiB in 10,000 files: cold (an empty
// hash cache: every file read and hashed) and warm (the cache of the
// previous scan, after rewriting one 1 MiB file). The warm scan reports
// its p50; so does since, the warm scan told which path changed (dirty
// tracking). The scans start, as far as the cache's racily-clean rule is
// concerned, 2 s after the last write.
func BenchmarkScan(b *testing.B) {
	dir := benchTree(b)
	ctx := context.Background()
	logical := int64(benchFiles*benchFileSize + ChunkSize)
	b.Run("cold", func(b *testing.B) {
		b.SetBytes(logical)
		var cpu time.Duration
		n := 0
		for b.Loop() {
			n++
			c0 := processCPU(b)
			s, err := scanAt(ctx, dir, nil, NewHashCache(), time.Now().Add(2*time.Second), nil)
			cpu += processCPU(b) - c0
			if err != nil {
				b.Fatal(err)
			}
			if f, _ := s.Hashed(); f != benchFiles+1 {
				b.Fatalf("hashed %d files", f)
			}
		}
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/op")
	})
	b.Run("warm-1MiB-changed", func(b *testing.B) {
		cache := NewHashCache()
		if _, err := scanAt(ctx, dir, nil, cache, time.Now().Add(2*time.Second), nil); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(logical)
		var times []time.Duration
		var cpu time.Duration
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			mkfile(b, dir, "big", content(uint64(10+i), ChunkSize), 0o644)
			b.StartTimer()
			t0, c0 := time.Now(), processCPU(b)
			s, err := scanAt(ctx, dir, nil, cache, time.Now().Add(2*time.Second), nil)
			times = append(times, time.Since(t0))
			cpu += processCPU(b) - c0
			if err != nil {
				b.Fatal(err)
			}
			if f, n := s.Hashed(); f != 1 || n != ChunkSize {
				b.Fatalf("hashed %d files, %d bytes; want 1, %d", f, n, ChunkSize)
			}
		}
		slices.Sort(times)
		b.ReportMetric(float64(times[len(times)/2].Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(len(times)), "cpu-ns/op")
	})
	// The same as warm, told which path changed (dirty tracking's
	// ScanSince): only the root directory is listed and one file read.
	b.Run("since-1MiB-changed", func(b *testing.B) {
		cache := NewHashCache()
		base, err := scanAt(ctx, dir, nil, cache, time.Now().Add(2*time.Second), nil)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(logical)
		var times []time.Duration
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			mkfile(b, dir, "big", content(uint64(1000+i), ChunkSize), 0o644)
			b.StartTimer()
			t0 := time.Now()
			s, err := scanFrom(ctx, dir, nil, cache, time.Now().Add(2*time.Second), nil, &Since{Manifest: base.Manifest, Changed: []string{"big"}})
			times = append(times, time.Since(t0))
			if err != nil {
				b.Fatal(err)
			}
			if f, _ := s.Hashed(); f != 1 || !s.Incremental {
				b.Fatalf("hashed %d files, incremental %v; want 1, true", f, s.Incremental)
			}
			base = s
		}
		slices.Sort(times)
		b.ReportMetric(float64(times[len(times)/2].Nanoseconds()), "p50-ns")
	})
}

// BenchmarkWriteTar writes 100 MiB (100 files of one 1 MiB chunk) from
// in-memory chunks, 4 gets ahead, to io.Discard.
func BenchmarkWriteTar(b *testing.B) {
	store := newChunkStore()
	m := &Manifest{Version: Version}
	for i := range 100 {
		data := content(uint64(i), ChunkSize)
		d := digestOf(string(data))
		_ = store.put(d, data)
		m.Entries = append(m.Entries, Entry{Path: fmt.Sprintf("f%03d", i), Kind: KindFile, Mode: 0o644, Size: ChunkSize, Chunks: []string{d}})
	}
	b.SetBytes(100 * ChunkSize)
	for b.Loop() {
		if _, err := WriteTar(context.Background(), io.Discard, m, store.get, 4); err != nil {
			b.Fatal(err)
		}
	}
}

// processCPU returns the process's CPU time (user and system) so far:
// on a machine shared with other work, the CPU a scan used tells its cost
// apart from its wait for a CPU.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWriteDir measures WriteDir of 10,000 files (PADDOCK_BENCH_WRITEDIR_KIB
// KiB each, default 100: 1,000 MiB) in 100 directories from in-memory
// chunks, 8 files at a time, chunks taken as verified (as the node's cache
// returns them).
//
//	go test ./snapshot -run '^$' -bench WriteDir -benchtime 3x
func BenchmarkWriteDir(b *testing.B) {
	kib := 100
	if v := os.Getenv("PADDOCK_BENCH_WRITEDIR_KIB"); v != "" {
		fmt.Sscan(v, &kib)
	}
	store := newChunkStore()
	m := &Manifest{Version: Version}
	for i := range 100 {
		m.Entries = append(m.Entries, Entry{Path: fmt.Sprintf("d%02d", i), Kind: KindDir, Mode: 0o755})
	}
	buf := content(1, kib<<10)
	for i := range benchFiles {
		copy(buf, fmt.Sprintf("%08d", i))
		d := digestOf(string(buf))
		_ = store.put(d, buf)
		m.Entries = append(m.Entries, Entry{Path: fmt.Sprintf("d%02d/f%04d", i%100, i), Kind: KindFile, Mode: 0o644, Size: int64(len(buf)), Chunks: []string{d}})
	}
	slices.SortFunc(m.Entries, cmpEntry)
	b.SetBytes(int64(benchFiles) * int64(len(buf)))
	base := b.TempDir()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		out := filepath.Join(base, fmt.Sprint(i))
		if err := os.Mkdir(out, 0o755); err != nil {
			b.Fatal(err)
		}
		root, err := os.OpenRoot(out)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := WriteDir(context.Background(), root, m, store.get, WriteOptions{Parallel: 8, Verified: true}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		root.Close()
		_ = os.RemoveAll(out)
		b.StartTimer()
	}
}
