package overlay

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestParseLine reads the lower directories of overlay lines of
// /proc/self/mountinfo, and none of other file systems.
func TestParseLine(t *testing.T) {
	for _, c := range []struct {
		line string
		want []string
	}{
		{`120 90 0:52 / /d/mnt/workspace rw,nosuid,nodev,relatime shared:60 - overlay overlay rw,lowerdir=/k/acme/r-0-0/tree,upperdir=/d/mnt/overlay/X/upper,workdir=/d/mnt/overlay/X/work,redirect_dir=on`, []string{"/k/acme/r-0-0/tree"}},
		{`121 90 0:53 / /w rw - overlay overlay rw,lowerdir=/a:/b\040c,upperdir=/u,workdir=/w`, []string{"/a", "/b c"}},
		{`27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,lowerdir=/not`, nil},
		{`garbage`, nil},
	} {
		got, ok := parseLine(c.line)
		if ok != (c.want != nil) {
			t.Errorf("parseLine(%q) ok = %v", c.line, ok)
		}
		if !reflect.DeepEqual(got.lowers, c.want) {
			t.Errorf("parseLine(%q) lowers %q; want %q", c.line, got.lowers, c.want)
		}
	}
	if m, _ := parseLine(`121 90 0:53 / /w\040x rw - overlay overlay rw,lowerdir=/a`); m.target != "/w x" {
		t.Errorf("mount point %q; want %q", m.target, "/w x")
	}
}

// TestMountUnmount mounts an overlay, writes through it (the lower is
// untouched), finds its lower in Lowers, and unmounts it; a path the
// mount options cannot carry is refused.
func TestMountUnmount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("overlay mounts need root")
	}
	d := t.TempDir()
	lower, upper, work, target := filepath.Join(d, "lower"), filepath.Join(d, "upper"), filepath.Join(d, "work"), filepath.Join(d, "target")
	for _, p := range []string{lower, upper, work, target} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(lower, "f"), []byte("lower"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Mount(lower, upper, work, target, false); err != nil {
		t.Fatal(err)
	}
	defer Unmount(target)
	if !Mounted(target) {
		t.Fatal("Mounted = false after Mount")
	}
	if err := os.WriteFile(filepath.Join(target, "f"), []byte("upper"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(lower, "f")); string(b) != "lower" {
		t.Fatalf("lower file = %q after a write through the overlay", b)
	}
	if m, err := MountedUnder(d); err != nil || len(m) != 1 || m[0] != target {
		t.Fatalf("MountedUnder = %v, %v; want [%s]", m, err, target)
	}
	ls, err := Lowers()
	if err != nil || !ls[lower] {
		t.Fatalf("Lowers = %v, %v; want %s in it", ls, err, lower)
	}
	if err := Unmount(target); err != nil {
		t.Fatal(err)
	}
	if Mounted(target) {
		t.Fatal("still mounted after Unmount")
	}
	if err := Unmount(target); err != nil {
		t.Fatalf("Unmount of nothing mounted = %v", err)
	}
	if err := Mount(lower+",upperdir=/etc", upper, work, target, false); err == nil {
		Unmount(target)
		t.Fatal("a lower with a comma was mounted")
	}
}

// TestRecord: a record reads back as written; a malformed one is an
// error; none is not.
func TestRecord(t *testing.T) {
	p := filepath.Join(t.TempDir(), "overlay")
	if _, ok, err := ReadRecord(p); ok || err != nil {
		t.Fatalf("no record: %v, %v", ok, err)
	}
	want := Record{Lower: "/k/t", Upper: "/d/u"}
	if err := WriteRecord(p, want); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := ReadRecord(p); !ok || err != nil || got != want {
		t.Fatalf("ReadRecord = %+v, %v, %v", got, ok, err)
	}
	if err := os.WriteFile(p, []byte("relative\n/u\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadRecord(p); err == nil {
		t.Fatal("a malformed record was read")
	}
}

// TestProbe: where overlays mount, the probe says so and leaves nothing.
func TestProbe(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("overlay mounts need root")
	}
	d := t.TempDir()
	if err := Probe(d); err != nil {
		t.Fatal(err)
	}
	if es, _ := os.ReadDir(d); len(es) != 0 {
		t.Fatalf("the probe left %v", es)
	}
	if m, _ := MountedUnder(d); len(m) != 0 {
		t.Fatalf("the probe left mounts %v", m)
	}
}
