package docker_test

import (
	"archive/tar"
	"bytes"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// limitedRuntime is a supervised runtime whose sandboxes get loopfs (or
// storage-opt) disks; it skips the test on a host that offers neither.
func limitedRuntime(t *testing.T) (*docker.Runtime, string) {
	t.Helper()
	dir := testenv.DiskDir(t)
	rt := newRuntimeWith(t, docker.Config{Supervisor: testenv.SupervisorBinary(t), SupervisorDir: testenv.SupervisorDir(t), DiskDir: dir})
	ds, err := rt.ProbeDisk(t.Context(), testenv.SandboxBaseImage(t))
	if err != nil {
		t.Fatal(err)
	}
	if ds.Mechanism == runtime.DiskNone {
		t.Skipf("this host offers no disk limit: %s", ds.Why)
	}
	return rt, dir
}

// run runs a shell script as user ("" for the sandbox's) and returns its
// exit code and stderr.
func run(t *testing.T, sb runtime.Sandbox, user, script string) (int, string) {
	t.Helper()
	res, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"sh", "-c", script}, User: user, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatalf("sh -c %q: %v", script, err)
	}
	return res.ExitCode, string(res.Stderr)
}

// TestDiskLimitAttack: a sandbox that writes past its disk gets ENOSPC,
// in its workspace, in /tmp, in /var/tmp and in the hydrate's holder
// (every writable place), and cannot write anywhere else: the root file
// system is read-only, for root too. The image on the host holds no more
// than the limit, and another sandbox of the same node writes on.
func TestDiskLimitAttack(t *testing.T) {
	rt, dir := limitedRuntime(t)
	image := testenv.SandboxBaseImage(t)
	sp := spec(rt, image)
	sp.DiskBytes = 64 << 20
	sb := create(t, rt, sp)
	other := create(t, rt, spec(rt, image))
	bytes, mech := sb.DiskLimit()
	if bytes != 64<<20 || mech == runtime.DiskNone {
		t.Fatalf("DiskLimit() = %d, %s; want 64 MiB by a mechanism", bytes, mech)
	}
	if b, m := other.DiskLimit(); b != docker.DefaultDiskBytes || m != mech {
		t.Fatalf("default DiskLimit() = %d, %s; want %d, %s", b, m, docker.DefaultDiskBytes, mech)
	}
	t.Logf("mechanism %s", mech)

	for _, p := range []string{"/workspace/big", "/tmp/big", "/var/tmp/big", "/.paddock/big", "/workspace/sub/dir/big"} {
		code, stderr := run(t, sb, "", "mkdir -p $(dirname "+p+") && dd if=/dev/zero of="+p+" bs=1M count=100")
		if code == 0 || !strings.Contains(stderr, "No space left on device") {
			t.Errorf("dd of 100 MiB to %s in a 64 MiB sandbox: exit %d, %q; want ENOSPC", p, code, stderr)
		}
		if code, stderr := run(t, sb, "", "rm -rf "+p+" /workspace/sub"); code != 0 {
			t.Fatalf("rm %s: %s", p, stderr)
		}
	}
	// Many small files run out too (blocks or inodes).
	code, stderr := run(t, sb, "", `i=0; while [ $i -lt 200 ]; do dd if=/dev/zero of=/workspace/f$i bs=1M count=1 2>/dev/null || exit 7; i=$((i+1)); done`)
	if code != 7 {
		t.Errorf("200 files of 1 MiB: exit %d, %q; want a failure", code, stderr)
	}
	if code, stderr := run(t, sb, "", "rm -f /workspace/f*"); code != 0 {
		t.Fatal(stderr)
	}
	if mech == runtime.DiskLoopFS {
		// As root too (no capabilities, but the owner of /): every directory
		// of the root file system refuses a write.
		code, out := run(t, sb, "0", `n=0; root=$(stat -c %d /); for d in $(find / -xdev -type d 2>/dev/null); do
  [ "$(stat -c %d "$d")" = "$root" ] || continue # a mount point: the disk's, or Docker's /dev
  if touch "$d/.paddock-probe" 2>/dev/null; then echo "writable: $d" >&2; n=1; fi
done
touch /etc/x 2>&1 | grep -q "Read-only file system" || { echo "/etc: not read-only" >&2; n=1; }
exit $n`)
		if code != 0 {
			t.Errorf("the root file system takes writes: %s", out)
		}
		matches, _ := filepath.Glob(filepath.Join(dir, "*", "disk.img"))
		if len(matches) != 2 {
			t.Fatalf("disk images %v, want two", matches)
		}
		for _, m := range matches {
			var st unix.Stat_t
			if err := unix.Stat(m, &st); err != nil {
				t.Fatal(err)
			}
			// The sparse image holds what was written, within its size.
			if used := st.Blocks * 512; used > 80<<20 && st.Size == 64<<20 {
				t.Errorf("%s (64 MiB) holds %d bytes on the host", m, used)
			}
		}
	}
	// The sandbox still works once it has room again, and so does the
	// other one.
	sh(t, sb, "dd if=/dev/zero of=/workspace/ok bs=1M count=8 2>/dev/null && rm /workspace/ok")
	sh(t, other, "dd if=/dev/zero of=/workspace/big bs=1M count=100 2>/dev/null && rm /workspace/big")
}

// TestDiskLimitArchive: the archive API (hydrate, the file operations'
// fallback, persist) works on a read-only root when its target is on the
// disk: files written and read back, the workspace exported and imported.
func TestDiskLimitArchive(t *testing.T) {
	rt, _ := limitedRuntime(t)
	sp := spec(rt, testenv.SandboxBaseImage(t))
	sp.DiskBytes = 64 << 20
	// Without the supervisor every file operation takes the archive API.
	plain := newRuntimeWith(t, docker.Config{DiskDir: testenv.DiskDir(t)})
	psp := spec(plain, testenv.SandboxBaseImage(t))
	psp.DiskBytes = 64 << 20
	for name, sb := range map[string]*docker.Sandbox{"supervised": create(t, rt, sp), "docker api": create(t, plain, psp)} {
		ctx := t.Context()
		if err := sb.WriteFile(ctx, "a/b.txt", []byte("hello"), 0o600); err != nil {
			t.Fatalf("%s: WriteFile: %v", name, err)
		}
		if got, mode, err := sb.ReadFile(ctx, "a/b.txt", 1<<20); err != nil || string(got) != "hello" || mode.Perm() != 0o600 {
			t.Fatalf("%s: ReadFile = %q, %v, %v", name, got, mode, err)
		}
		if err := sb.Mkdir(ctx, "d/e", true); err != nil {
			t.Fatalf("%s: Mkdir: %v", name, err)
		}
		var tarball bytes.Buffer
		if _, err := sb.ExportWorkspace(ctx, &tarball, nil); err != nil {
			t.Fatalf("%s: ExportWorkspace: %v", name, err)
		}
		sh(t, sb, "rm -rf /workspace/a /workspace/d && echo new > /workspace/new")
		st, err := sb.ImportWorkspace(ctx, bytes.NewReader(tarball.Bytes()), archive.DefaultLimits())
		if err != nil {
			t.Fatalf("%s: ImportWorkspace: %v", name, err)
		}
		if st.Members < 1 {
			t.Fatalf("%s: imported %+v", name, st)
		}
		if out := sh(t, sb, "cat /workspace/a/b.txt; test -d /workspace/d/e && echo dir; test -e /workspace/new || echo gone; stat -c %U /workspace/a/b.txt"); out != "hellodir\ngone\nnobody\n" {
			t.Fatalf("%s: after import: %q", name, out)
		}
		// A hydrate larger than the disk fails, and the workspace stays.
		big := tarOf(t, "big", 80<<20)
		if _, err := sb.ImportWorkspace(ctx, bytes.NewReader(big.Bytes()), archive.DefaultLimits()); err == nil {
			t.Fatalf("%s: an 80 MiB hydrate into 64 MiB succeeded", name)
		}
		if got, _, err := sb.ReadFile(ctx, "a/b.txt", 1<<20); err != nil || string(got) != "hello" {
			t.Fatalf("%s: after a failed hydrate: %q, %v", name, got, err)
		}
	}
}

// TestDiskLimitStopStartReattach: a loopfs disk outlives a stop, is
// mounted again by Start after it was unmounted (a host that rebooted),
// and a runtime that finds the sandbox again knows its disk and removes it
// with it; the reaper removes a disk whose container is gone.
func TestDiskLimitStopStartReattach(t *testing.T) {
	rt, dir := limitedRuntime(t)
	ds, _ := rt.ProbeDisk(t.Context(), "")
	if ds.Mechanism != runtime.DiskLoopFS {
		t.Skip("loopfs only")
	}
	ctx := t.Context()
	sp := spec(rt, testenv.SandboxBaseImage(t))
	sp.DiskBytes = 32 << 20
	sb, err := rt.Create(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	sh(t, sb, "echo kept > /workspace/f")
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	mounts := testenv.MountsUnder(t, dir)
	if len(mounts) != 1 {
		t.Fatalf("mounts %v, want the stopped sandbox's", mounts)
	}
	if err := unix.Unmount(mounts[0], 0); err != nil { // as a reboot would
		t.Fatal(err)
	}
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if out := sh(t, sb, "cat /workspace/f"); out != "kept\n" {
		t.Fatalf("after a remount: %q", out)
	}
	found, err := rt.FindSandboxes(ctx)
	if err != nil || len(found) != 1 {
		t.Fatalf("FindSandboxes = %v, %v", found, err)
	}
	again := found[0].Sandbox.(*docker.Sandbox)
	if b, m := again.DiskLimit(); b != 32<<20 || m != runtime.DiskLoopFS {
		t.Fatalf("found DiskLimit() = %d, %s", b, m)
	}
	if err := again.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if m := testenv.MountsUnder(t, dir); len(m) != 0 {
		t.Fatalf("mounts after Shutdown: %v", m)
	}

	// A crash between the container's removal and the disk's: the reaper
	// removes the disk once it is older than the stale age.
	sp2 := spec(rt, testenv.SandboxBaseImage(t))
	sp2.DiskBytes = 32 << 20
	orphan, err := rt.Create(ctx, sp2)
	if err != nil {
		t.Fatal(err)
	}
	testenv.RemoveContainers(t, testenv.DockerClient(t), docker.LabelSession+"="+sp2.SessionID)
	defer docker.SetStaleAge(0)()
	if n, err := rt.ReapDisks(ctx); err != nil || n != 1 {
		t.Fatalf("ReapDisks = %d, %v; want the orphan's disk", n, err)
	}
	if err := orphan.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestDiskLimitBadSpecs: bad disk sizes are invalid_request before the
// engine is asked.
func TestDiskLimitBadSpecs(t *testing.T) {
	rt := newRuntime(t)
	for _, n := range []int64{-1, 1, 1 << 60} {
		sp := spec(rt, testenv.SandboxBaseImage(t))
		sp.DiskBytes = n
		_, err := rt.Create(t.Context(), sp)
		wantCode(t, "disk "+strconv.FormatInt(n, 10), err, errcode.InvalidRequest)
	}
	if _, err := docker.New(docker.Config{DiskDir: "relative"}); err == nil {
		t.Error("a relative disk directory passed")
	}
	if _, err := docker.New(docker.Config{DiskMechanism: "quota"}); err == nil {
		t.Error("an unknown mechanism passed")
	}
	// Forced none: no bound, said so.
	none := newRuntimeWith(t, docker.Config{DiskMechanism: runtime.DiskNone})
	sb := create(t, none, spec(none, testenv.SandboxBaseImage(t)))
	if b, m := sb.DiskLimit(); b != 0 || m != runtime.DiskNone {
		t.Fatalf("DiskLimit() = %d, %s; want none", b, m)
	}
}

// tarOf is a tar of one file of size zero bytes.
func tarOf(t *testing.T, name string, size int) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(size)}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}
