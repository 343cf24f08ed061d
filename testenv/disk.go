package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paddock-dev/paddock/nodes/runtime/overlay"
)

// DiskDir returns a fresh directory for a Docker runtime's loopfs disks
// (docker.Config.DiskDir). When the test ends, after the cleanups
// registered later (which shut the test's sandboxes down), it fails the
// test for anything left under it: a file, a mount, a loop device backed
// by an image in it; and then removes what it found.
func DiskDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "paddock-disks-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, m := range MountsUnder(t, dir) {
			t.Errorf("mount %s left behind", m)
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
		// A lazily detached disk (a container being made held it at its
		// unmount) frees its loop device when the last reference goes.
		Eventually(t, 30*time.Second, func() error {
			if l := LoopDevicesUnder(t, dir); len(l) > 0 {
				return fmt.Errorf("loop devices %v left behind", l)
			}
			return nil
		})
		entries, err := os.ReadDir(dir) // gone is empty: a runtime's Close removes its empty directory
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("read disk directory: %v", err)
		}
		for _, e := range entries {
			t.Errorf("disk directory %s left behind", e.Name())
		}
		if len(MountsUnder(t, dir)) == 0 {
			_ = os.RemoveAll(dir)
		}
	})
	return dir
}

// MountsUnder returns the mount points at or under dir, from
// /proc/self/mountinfo.
func MountsUnder(t testing.TB, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := strings.ReplaceAll(fields[4], `\040`, " ")
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out
}

// LoopDevicesUnder returns the loop devices whose backing file lies under
// dir, from /sys/block/loop*/loop/backing_file.
func LoopDevicesUnder(t testing.TB, dir string) []string {
	t.Helper()
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // detached meanwhile
		}
		if back := strings.TrimSpace(string(b)); strings.HasPrefix(back, dir+"/") {
			out = append(out, filepath.Base(filepath.Dir(filepath.Dir(f)))+" ("+back+")")
		}
	}
	return out
}

// UnmountOverlays unmounts the overlays mounted under dir (restores from
// kept trees) that killed nodes left: a node killed with SIGKILL cannot
// unmount them, and a temporary directory holding a mount cannot be
// removed. Call it after the processes are killed, before dir goes.
func UnmountOverlays(t testing.TB, dir string) {
	t.Helper()
	ms, err := overlay.MountedUnder(dir)
	if err != nil {
		t.Errorf("overlays under %s: %v", dir, err)
		return
	}
	for _, m := range ms {
		if err := overlay.Unmount(m); err != nil {
			t.Errorf("unmount %s: %v", m, err)
		}
	}
}
