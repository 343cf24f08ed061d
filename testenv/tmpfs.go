package testenv

import (
	"fmt"
	"os"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size bytes on a new temporary directory and
// returns it; it is unmounted when the test ends. A filesystem this small
// is one a test can fill. Mounting takes root: the test is skipped when
// it is not root, except under CI=true (CI runs as root), where that is a
// failure.
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("mounting a tmpfs takes root, and CI runs as root")
		}
		t.Skip("skipped: mounting a tmpfs to fill takes root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Fatalf("mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		// Lazily: a file the test left open must not fail the unmount.
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// Fill writes a ballast file at path until its filesystem is full (the
// write fails with ENOSPC) and returns how many bytes it wrote. Removing
// the file frees the space.
func Fill(t testing.TB, path string) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	var n int64
	for {
		w, err := f.Write(buf)
		n += int64(w)
		if err != nil {
			// The last small bits.
			for len(buf) > 1 {
				buf = buf[:len(buf)/2]
				for {
					w, err := f.Write(buf)
					n += int64(w)
					if err != nil {
						break
					}
				}
			}
			return n
		}
	}
}
