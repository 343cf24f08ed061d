package runtimes

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	flag "github.com/spf13/pflag"

	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

func TestCheckStatic(t *testing.T) {
	if err := checkStatic(testenv.SupervisorBinary(t)); err != nil {
		t.Errorf("the supervisor built by testenv: %v", err)
	}
	if err := checkStatic("/bin/sh"); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("/bin/sh (dynamic on Debian): got %v, want dynamically linked", err)
	}
	script := filepath.Join(t.TempDir(), "sup")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := checkStatic(script); err == nil {
		t.Error("a shell script: no error")
	}
}

func TestSupervisorConfig(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	bin, dir, err := DockerFlags{Supervisor: "off"}.supervisorConfig(t.Context(), "n", logger)
	if bin != "" || dir != "" || err != nil {
		t.Errorf("off: got %q, %q, %v", bin, dir, err)
	}
	if _, _, err := (DockerFlags{Supervisor: filepath.Join(t.TempDir(), "missing")}).supervisorConfig(t.Context(), "n", logger); err == nil {
		t.Error("a named binary that is missing: no error")
	}
	long := "/tmp/" + strings.Repeat("d", 90)
	if _, _, err := (DockerFlags{Supervisor: testenv.SupervisorBinary(t), SupervisorDir: long}).supervisorConfig(t.Context(), "n", logger); err == nil {
		t.Error("a socket directory too long for unix sockets: no error")
	}
	sockets := t.TempDir()
	bin, dir, err = DockerFlags{Supervisor: testenv.SupervisorBinary(t), SupervisorDir: sockets}.supervisorConfig(t.Context(), "n", logger)
	if err != nil || bin != testenv.SupervisorBinary(t) || dir != sockets {
		t.Errorf("a named binary: got %q, %q, %v", bin, dir, err)
	}
	if d := defaultSupervisorDir(strings.Repeat("n", 200)); len(d) > 80 {
		t.Errorf("default directory for a long node id: %q is over 80 bytes", d)
	}
}

func TestParsePool(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want docker.PoolSpec
		ok   bool
	}{
		{"img:1=2", docker.PoolSpec{Image: "img:1", Size: 2}, true},
		{"img=2,cpus=0.5,memory=256m,pids=100", docker.PoolSpec{Image: "img", Size: 2, CPUs: 0.5, MemoryBytes: 256 << 20, PidsLimit: 100}, true},
		{"img=2,cpus=0", docker.PoolSpec{}, false},
		{"img=2,cpus=NaN", docker.PoolSpec{}, false},
		{"img=2,memory=-1", docker.PoolSpec{}, false},
		{"img=2,pids=x", docker.PoolSpec{}, false},
		{"img=2,gpus=1", docker.PoolSpec{}, false},
		{"img=2,", docker.PoolSpec{}, false},
		{"img,cpus=1", docker.PoolSpec{}, false},
	} {
		got, err := ParsePool(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParsePool(%q) = %+v, %v; want %+v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestDiskFlags(t *testing.T) {
	parse := func(args ...string) (*DockerFlags, error) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := RegisterDockerFlags(fs)
		return f, fs.Parse(args)
	}
	f, err := parse()
	if err != nil || f.DefaultDiskBytes != docker.DefaultDiskBytes {
		t.Fatalf("default: %d, %v; want %d", f.DefaultDiskBytes, err, docker.DefaultDiskBytes)
	}
	if dir, err := f.diskDir("n1"); err != nil || !filepath.IsAbs(dir) || filepath.Base(dir) != "n1" {
		t.Fatalf("default disk dir %q, %v", dir, err)
	}
	if f, err = parse("--default-disk", "4g", "--disk-dir", "/srv/disks"); err != nil || f.DefaultDiskBytes != 4<<30 || f.DiskDir != "/srv/disks" {
		t.Fatalf("--default-disk 4g: %+v, %v", f, err)
	}
	for _, bad := range []string{"0", "1k", "-2g", "lots"} {
		if _, err := parse("--default-disk", bad); err == nil {
			t.Errorf("--default-disk %s: accepted", bad)
		}
	}
}
