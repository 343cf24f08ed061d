package docker

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/snapshot"
	"github.com/paddock-dev/paddock/testenv"
)

// BenchmarkLoopfsImageClone measures what a per-snapshot disk image cache
// (issue 25's approach A for a warm restore) would cost against the file
// path it would replace, on a workspace of PADDOCK_BENCH_CLONE_MIB MiB
// (default 1024) in 10,000 files, with the images in the temp directory's
// file system (testenv.DiskDir; set TMPDIR to measure another one):
//
//	write    snapshot.WriteDir of the manifest into a fresh, mounted loopfs
//	         image's workspace, chunks from memory, taken as verified: the
//	         floor of today's warm restore (no cache reads, no hashing)
//	copy     a sparse copy of a quiescent image holding that workspace
//	         (SEEK_DATA/SEEK_HOLE, copy_file_range), then its mount
//	reflink  a clone of that image (FICLONE), then its mount: only on a
//	         file system with reflinks (XFS reflink=1, btrfs); else not
//	         reported
//
// The three alternate within each run and each reports its p50 (ms).
// Needs root, loop devices and mkfs.ext4.
//
//	go test ./nodes/runtime/docker -run '^$' -bench LoopfsImageClone -benchtime 3x -timeout 30m
//	TMPDIR=/xfs/with/reflinks go test ./nodes/runtime/docker -run '^$' -bench LoopfsImageClone -benchtime 3x -timeout 30m
func BenchmarkLoopfsImageClone(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("loop devices and mounts need root")
	}
	if _, err := lookTool("mkfs.ext4"); err != nil {
		b.Skip(err)
	}
	mib := 1024
	if v := os.Getenv("PADDOCK_BENCH_CLONE_MIB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 10 {
			b.Fatalf("PADDOCK_BENCH_CLONE_MIB=%q", v)
		}
		mib = n
	}
	ctx := context.Background()
	base := testenv.DiskDir(b)
	m, get := cloneBenchManifest(b, mib)
	size := int64(mib)<<21 + 1<<30 // room for the tree twice over, as the nodes benchmark's disks
	n := 0
	newDisk := func() disk {
		n++
		d := disk{mechanism: runtime.DiskLoopFS, bytes: size, dir: filepath.Join(base, fmt.Sprintf("d%d", n))}
		if err := os.Mkdir(d.dir, 0o700); err != nil {
			b.Fatal(err)
		}
		return d
	}
	release := func(d disk) {
		if err := releaseDisk(d); err != nil {
			b.Fatal(err)
		}
	}
	writeTree := func(d disk) time.Duration {
		root, err := os.OpenRoot(filepath.Join(d.mnt(), diskWorkspace))
		if err != nil {
			b.Fatal(err)
		}
		defer root.Close()
		t0 := time.Now()
		if _, err := snapshot.WriteDir(ctx, root, m, get, snapshot.WriteOptions{Parallel: 8, Verified: true, Limits: archive.Limits{MaxMembers: 1 << 20, MaxExtractedBytes: 1 << 40, MaxArchiveBytes: 1 << 40}}); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}

	// mountCopy mounts d, an image copied or cloned since t0, checks that
	// it holds the tree and releases it: the time from t0 to its mount.
	mountCopy := func(d disk, t0 time.Time) time.Duration {
		if err := os.Mkdir(d.mnt(), 0o700); err != nil {
			b.Fatal(err)
		}
		if err := mountLoopFS(ctx, d); err != nil {
			b.Fatal(err)
		}
		took := time.Since(t0)
		checkTree(b, d)
		release(d)
		return took
	}

	// The cached image: the tree written once, then unmounted (quiescent).
	src := newDisk()
	makeBenchImage(b, ctx, src)
	writeTree(src)
	if err := unix.Unmount(src.mnt(), 0); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := releaseDisk(src); err != nil {
			b.Error(err)
		}
	})
	reflink := true
	var write, cp, clone []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// write: the file path into a fresh image.
		d := newDisk()
		makeBenchImage(b, ctx, d)
		write = append(write, writeTree(d))
		release(d)

		// copy: a sparse copy, then the mount.
		d = newDisk()
		t0 := time.Now()
		if err := sparseCopy(src.img(), d.img()); err != nil {
			b.Fatal(err)
		}
		cp = append(cp, mountCopy(d, t0))

		// reflink: a clone, then the mount.
		if !reflink {
			continue
		}
		d = newDisk()
		t0 = time.Now()
		err := cloneFile(src.img(), d.img())
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY) {
			reflink = false
			b.Logf("no reflinks under %s: %v", base, err)
			release(d)
			continue
		}
		if err != nil {
			b.Fatal(err)
		}
		clone = append(clone, mountCopy(d, t0))
	}
	b.StopTimer()
	p50 := testenv.P50Millis
	b.ReportMetric(p50(write), "write-p50-ms")
	b.ReportMetric(p50(cp), "copy-mount-p50-ms")
	if len(clone) > 0 {
		b.ReportMetric(p50(clone), "reflink-mount-p50-ms")
	}
	b.ReportMetric(float64(mib), "MiB")
}

// cloneBenchManifest returns a manifest of 10,000 files of mib MiB in all
// in 100 directories, every file the same random content (the file system
// writes each anyway), and the get that serves its one chunk.
func cloneBenchManifest(b *testing.B, mib int) (*snapshot.Manifest, func(context.Context, string) ([]byte, error)) {
	const files = 10_000
	data := make([]byte, mib<<20/files)
	_, _ = rand.Read(data)
	sum := sha256.Sum256(data)
	digest := hex.EncodeToString(sum[:])
	m := &snapshot.Manifest{Version: snapshot.Version}
	for d := range 100 {
		dir := fmt.Sprintf("d%02d", d)
		m.Entries = append(m.Entries, snapshot.Entry{Path: dir, Kind: snapshot.KindDir, Mode: 0o755})
		for f := range files / 100 {
			m.Entries = append(m.Entries, snapshot.Entry{Path: fmt.Sprintf("%s/f%03d", dir, f), Kind: snapshot.KindFile,
				Mode: 0o644, Size: int64(len(data)), Chunks: []string{digest}})
		}
	}
	return m, func(context.Context, string) ([]byte, error) { return data, nil }
}

// makeBenchImage makes d's image and mounts it as a sandbox's disk is made
// (makeLoopFS without the container's name check).
func makeBenchImage(b *testing.B, ctx context.Context, d disk) {
	b.Helper()
	f, err := os.OpenFile(d.img(), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	err = f.Truncate(d.bytes)
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	if err := runTool(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-L", "paddock",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,root_owner=0:0", d.img()); err != nil {
		b.Fatal(err)
	}
	if err := os.Mkdir(d.mnt(), 0o700); err != nil {
		b.Fatal(err)
	}
	if err := mountLoopFS(ctx, d); err != nil {
		b.Fatal(err)
	}
}

// checkTree fails unless d's workspace holds the benchmark's 100
// directories: the copy is a file system that mounts and reads.
func checkTree(b *testing.B, d disk) {
	b.Helper()
	entries, err := os.ReadDir(filepath.Join(d.mnt(), diskWorkspace))
	if err != nil || len(entries) != 100 {
		b.Fatalf("the copied image's workspace holds %d entries (%v); want 100", len(entries), err)
	}
}

// sparseCopy copies the file src to a new file dst, only its data
// (SEEK_DATA/SEEK_HOLE), in the kernel (copy_file_range).
func sparseCopy(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	for off := int64(0); off < fi.Size(); {
		data, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // holes to the end
		}
		if err != nil {
			return fmt.Errorf("seek data: %w", err)
		}
		hole, err := unix.Seek(int(in.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		for ioff, ooff := data, data; ioff < hole; {
			k, err := unix.CopyFileRange(int(in.Fd()), &ioff, int(out.Fd()), &ooff, int(hole-ioff), 0)
			if err != nil {
				return fmt.Errorf("copy_file_range: %w", err)
			}
			if k == 0 {
				return io.ErrUnexpectedEOF
			}
		}
		off = hole
	}
	if err := out.Truncate(fi.Size()); err != nil {
		return err
	}
	return out.Close()
}

// cloneFile makes dst a reflink clone of src (FICLONE): EOPNOTSUPP (or
// EXDEV, EINVAL) where the file system has no reflinks.
func cloneFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	if err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())); err != nil {
		return fmt.Errorf("FICLONE: %w", err)
	}
	return out.Close()
}
