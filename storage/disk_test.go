package storage_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/storage"
	"github.com/paddock-dev/paddock/testenv"
)

// TestThresholdLevels: each threshold is a percentage or a size, whichever
// is smaller; a zero field is not used.
func TestThresholdLevels(t *testing.T) {
	def := storage.DefaultThresholds()
	const GiB = 1 << 30
	for _, tc := range []struct {
		free, total uint64
		t           storage.Thresholds
		want        storage.Level
	}{
		{50 * GiB, 100 * GiB, def, storage.LevelOK},
		{3 * GiB, 100 * GiB, def, storage.LevelOK},         // 3% but 3 GiB: above 2 GiB
		{GiB, 100 * GiB, def, storage.LevelWarn},           // below 2 GiB and 10%
		{400 << 20, 100 * GiB, def, storage.LevelCritical}, // below 512 MiB and 2%
		{900 << 20, 10 * GiB, def, storage.LevelWarn},      // 8.8%, below 2 GiB
		{150 << 20, 10 * GiB, def, storage.LevelCritical},  // 1.5%, below 512 MiB
		{300 << 20, 10 * GiB, def, storage.LevelWarn},      // 2.9%: not yet 2%
		{1 << 20, 64 << 20, def, storage.LevelCritical},
		{5 << 20, 64 << 20, storage.Thresholds{Warn: storage.Threshold{Bytes: 8 << 20}, Critical: storage.Threshold{Bytes: 4 << 20}}, storage.LevelWarn},
		{0, 64 << 20, storage.Thresholds{}, storage.LevelOK},
	} {
		if got := tc.t.Level(tc.free, tc.total); got != tc.want {
			t.Errorf("Level(%d free of %d, %+v) = %s, want %s", tc.free, tc.total, tc.t, got, tc.want)
		}
	}
	if err := (storage.Thresholds{Warn: storage.Threshold{Percent: 101}}).Validate(); err == nil {
		t.Error("a threshold of 101% was accepted")
	}
}

// TestDiskWatcher: on a real small filesystem, the watcher reads the
// level with statfs, says critical once it is filled (logged at ERROR,
// once), and notes when space is back.
func TestDiskWatcher(t *testing.T) {
	dir := testenv.Tmpfs(t, 16<<20)
	var logs testenv.SyncBuffer
	th := storage.Thresholds{Warn: storage.Threshold{Bytes: 8 << 20}, Critical: storage.Threshold{Bytes: 4 << 20}}
	w, err := storage.NewDiskWatcher(storage.DiskWatchConfig{Paths: []string{dir}, Thresholds: &th, Repeat: time.Hour}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if d := w.Disks(); len(d) != 1 || d[0].Level != storage.LevelOK || d[0].Total < 15<<20 {
		t.Fatalf("an empty 16 MiB tmpfs: %+v, want ok and its size", d)
	}
	if _, ok := w.Critical(); ok {
		t.Fatal("an empty filesystem is critical")
	}
	ballast := filepath.Join(dir, "ballast")
	testenv.Fill(t, ballast)
	now := time.Now()
	w.Look(now)
	w.Look(now.Add(time.Minute))
	d, ok := w.Critical()
	if !ok || d.Path != dir || d.Free >= 4<<20 {
		t.Fatalf("a full filesystem: %+v, %v; want critical", d, ok)
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 {
		t.Fatalf("%d ERROR lines for a filesystem full over two looks, want 1:\n%s", n, logs.String())
	}
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	w.Look(now.Add(2 * time.Minute))
	if _, ok := w.Critical(); ok || !strings.Contains(logs.String(), "free space again") {
		t.Fatalf("after the ballast was removed: still critical, or not noted:\n%s", logs.String())
	}
	if _, err := storage.NewDiskWatcher(storage.DiskWatchConfig{}, nil); err == nil {
		t.Fatal("a watcher of no paths was accepted")
	}
}

// TestDiskWatcherRuns: Start looks on its interval, and Close stops it
// (twice is fine).
func TestDiskWatcherRuns(t *testing.T) {
	dir := t.TempDir()
	th := storage.Thresholds{Warn: storage.Threshold{Percent: 100}}
	var logs testenv.SyncBuffer
	w, err := storage.NewDiskWatcher(storage.DiskWatchConfig{Paths: []string{dir, filepath.Join(dir, "missing")}, Thresholds: &th, Interval: 10 * time.Millisecond, Repeat: 10 * time.Millisecond}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, time.Minute)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := strings.Count(logs.String(), "low on free space"); n < 2 {
			return fmt.Errorf("%d warnings so far", n)
		}
		return nil
	})
	if !strings.Contains(logs.String(), "cannot read the free space") {
		t.Errorf("a missing path was not logged:\n%s", logs.String())
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSameFilesystem: a directory and its child share a filesystem; a
// tmpfs mounted inside does not.
func TestSameFilesystem(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	if same, err := storage.SameFilesystem(dir, sub); err != nil || !same {
		t.Fatalf("SameFilesystem(dir, dir/sub) = %v, %v; want true", same, err)
	}
	if _, err := storage.SameFilesystem(dir, filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing path gave no error")
	}
	mnt := testenv.Tmpfs(t, 1<<20)
	if same, err := storage.SameFilesystem(dir, mnt); err != nil || same {
		t.Fatalf("SameFilesystem(dir, a tmpfs) = %v, %v; want false", same, err)
	}
}
