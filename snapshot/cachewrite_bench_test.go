package snapshot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkWriteDirFromCache measures a warm restore's file path on the
// host, 1 GiB in 10,000 files of 100 KiB whose chunks are in a Cache (as
// a node's warm restore reads them), three ways alternating in one run,
// each reporting its p50 (ms):
//
//	writedir   WriteDir with the cache's Get (what a restore does: read,
//	           hash again, touch, then write)
//	get-write  the same reads into a minimal writer (8 workers, create and
//	           write only): WriteDir's own overhead is the difference
//	copy-range a prototype, not a restore's path: each file copied from its
//	           cache file in the kernel (copy_file_range), not hashed again
//	           nor touched
//
//	go test ./snapshot -run '^$' -bench WriteDirFromCache -benchtime 3x -timeout 30m
func BenchmarkWriteDirFromCache(b *testing.B) {
	c, err := OpenCache(b.TempDir(), 4<<30)
	if err != nil {
		b.Fatal(err)
	}
	m := &Manifest{Version: Version}
	buf := content(1, benchFileSize)
	for d := range 100 {
		m.Entries = append(m.Entries, Entry{Path: fmt.Sprintf("d%02d", d), Kind: KindDir, Mode: 0o755})
		for f := range benchFiles / 100 {
			copy(buf, fmt.Sprintf("%08d", d*100+f))
			dg := digestOf(string(buf))
			if err := c.Put("t", dg, buf); err != nil {
				b.Fatal(err)
			}
			m.Entries = append(m.Entries, Entry{Path: fmt.Sprintf("d%02d/f%03d", d, f), Kind: KindFile, Mode: 0o644, Size: int64(len(buf)), Chunks: []string{dg}})
		}
	}
	get := func(_ context.Context, d string) ([]byte, error) {
		data, ok := c.Get("t", d)
		if !ok {
			return nil, fmt.Errorf("chunk %s missed", d)
		}
		return data, nil
	}
	copyRange := func(dst *os.File, d string, size int64) error {
		p, err := c.name("t", d)
		if err != nil {
			return err
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		for left := size; left > 0; {
			n, err := unix.CopyFileRange(int(src.Fd()), nil, int(dst.Fd()), nil, int(left), 0)
			if err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("chunk %s: short", d)
			}
			left -= int64(n)
		}
		return nil
	}
	base := b.TempDir()
	n := 0
	run := func(how string) time.Duration {
		n++
		out := filepath.Join(base, fmt.Sprint(n))
		if err := os.Mkdir(out, 0o755); err != nil {
			b.Fatal(err)
		}
		root, err := os.OpenRoot(out)
		if err != nil {
			b.Fatal(err)
		}
		defer func() {
			root.Close()
			b.StopTimer()
			_ = os.RemoveAll(out)
			b.StartTimer()
		}()
		t0 := time.Now()
		if how == "writedir" {
			if _, err := WriteDir(context.Background(), root, m, get, WriteOptions{Parallel: 8, Verified: true}); err != nil {
				b.Fatal(err)
			}
			return time.Since(t0)
		}
		minimalWrite(b, root, m, func(f *os.File, e *Entry) error {
			if how == "copy-range" {
				return copyRange(f, e.Chunks[0], e.Size)
			}
			data, err := get(context.Background(), e.Chunks[0])
			if err == nil {
				_, err = f.Write(data)
			}
			return err
		})
		return time.Since(t0)
	}
	var wd, gw, cr []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		wd = append(wd, run("writedir"))
		gw = append(gw, run("get-write"))
		cr = append(cr, run("copy-range"))
	}
	b.StopTimer()
	b.ReportMetric(p50ms(wd), "writedir-p50-ms")
	b.ReportMetric(p50ms(gw), "get-write-p50-ms")
	b.ReportMetric(p50ms(cr), "copy-range-p50-ms")
}

// minimalWrite makes m's directories in root, then creates its files with
// 8 workers, fill writing each one's content.
func minimalWrite(b *testing.B, root *os.Root, m *Manifest, fill func(*os.File, *Entry) error) {
	b.Helper()
	jobs := make(chan *Entry)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range 8 {
		wg.Go(func() {
			for e := range jobs {
				f, err := root.OpenFile(e.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o644)
				if err == nil {
					err = fill(f, e)
					if cerr := f.Close(); err == nil {
						err = cerr
					}
				}
				if err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
				}
			}
		})
	}
	for i := range m.Entries {
		e := &m.Entries[i]
		if e.Kind == KindDir {
			if err := root.Mkdir(e.Path, 0o755); err != nil {
				b.Fatal(err)
			}
			continue
		}
		jobs <- e
	}
	close(jobs)
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}

// p50ms is the lower median of l in milliseconds (testenv.P50Millis,
// which this package's tests cannot import: testenv imports nodes, which
// imports snapshot).
func p50ms(l []time.Duration) float64 {
	l = slices.Clone(l)
	slices.Sort(l)
	return float64(l[(len(l)-1)/2].Microseconds()) / 1000
}
