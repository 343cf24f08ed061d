package runsc_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
	"github.com/paddock-dev/paddock/nodes/runtime/runsc"
	"github.com/paddock-dev/paddock/testenv"
)

// newRuntime is a runsc runtime with a directory of the test's: one
// "node". It skips without runsc (fails in CI, which installs it).
func newRuntime(t testing.TB) *runsc.Runtime {
	t.Helper()
	rt, _ := newRuntimeDir(t)
	return rt
}

// newRuntimeDir is newRuntime, with its directory.
func newRuntimeDir(t testing.TB) (*runsc.Runtime, string) {
	t.Helper()
	dir := t.TempDir()
	return testenv.RunscRuntime(t, dir, t.Name()), dir
}

// processesUnder returns the host processes whose command line names dir
// (runsc's sandbox, gofer and their helpers name their bundle and root).
func processesUnder(dir string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(data), dir) {
			out = append(out, filepath.Base(filepath.Dir(p))+": "+strings.ReplaceAll(string(data), "\x00", " "))
		}
	}
	return out
}

// TestShutdownLeavesNothing: after Shutdown (also of a sandbox restored
// from a checkpoint) no process of runsc's for it lives on, and its cgroup,
// bundle and workspace are gone.
func TestShutdownLeavesNothing(t *testing.T) {
	rt, dir := newRuntimeDir(t)
	sbx, err := rt.Create(t.Context(), spec(t, "s"))
	if err != nil {
		t.Fatal(err)
	}
	sb := sbx.(*runsc.Sandbox)
	startCounter(t, sb)
	ck := t.TempDir()
	if _, err := sb.Checkpoint(t.Context(), ck, true); err != nil {
		t.Fatal(err)
	}
	r, err := rt.Restore(t.Context(), spec(t, "r"), ck)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []runtime.Sandbox{sb, r} {
		if err := s.Shutdown(t.Context()); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if err := s.Shutdown(t.Context()); err != nil {
			t.Errorf("a second Shutdown: %v; want nil", err)
		}
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if p := processesUnder(dir); len(p) > 0 {
			return fmt.Errorf("processes left: %q", p)
		}
		return nil
	})
	for _, sub := range []string{"sandboxes", "workspaces/t1"} {
		entries, _ := os.ReadDir(filepath.Join(dir, sub))
		for _, e := range entries {
			t.Errorf("left in %s: %s", sub, e.Name())
		}
	}
	if cg, _ := filepath.Glob("/sys/fs/cgroup/*/paddock-runsc/" + sb.ContainerID() + "-*"); len(cg) > 0 {
		t.Errorf("cgroups left: %q", cg)
	}
}

func spec(t testing.TB, session string) runtime.Spec {
	return runtime.Spec{Tenant: "t1", SessionID: session, Image: testenv.SandboxBaseImage(t), MemoryBytes: 256 << 20}
}

func create(t *testing.T, rt *runsc.Runtime, sp runtime.Spec) *runsc.Sandbox {
	t.Helper()
	sb, err := rt.Create(t.Context(), sp)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { shutdown(t, sb) })
	return sb.(*runsc.Sandbox)
}

func shutdown(t testing.TB, sb runtime.Sandbox) {
	// Not t.Context(), which is done by cleanup time.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sb.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func run(t *testing.T, sb runtime.Sandbox, argv ...string) runtime.ExecResult {
	t.Helper()
	res, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: argv, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	return res
}

// counterScript keeps a counter in memory only: it counts up every 0.1 s,
// writes it to the workspace file c on SIGUSR1 and adds 1,000,000 to it on
// SIGUSR2. The exec prints the counter's pid and returns; the counter
// lives on in the background.
const counterScript = `(i=0; trap 'echo $i > c' USR1; trap 'i=$((i+1000000))' USR2; while :; do i=$((i+1)); sleep 0.1; done) </dev/null >/dev/null 2>&1 & echo $!`

func startCounter(t *testing.T, sb runtime.Sandbox) string {
	t.Helper()
	res := run(t, sb, "sh", "-c", counterScript)
	pid := strings.TrimSpace(string(res.Stdout))
	if _, err := strconv.Atoi(pid); err != nil || res.ExitCode != 0 {
		t.Fatalf("start the counter: exit %d, out %q, err %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	return pid
}

// counter asks the counter pid for its value (the file it writes on
// demand), waiting for the answer.
func counter(t *testing.T, sb runtime.Sandbox, pid string) int {
	t.Helper()
	_ = sb.Remove(t.Context(), "c", false)
	if res := run(t, sb, "kill", "-USR1", pid); res.ExitCode != 0 {
		t.Fatalf("kill -USR1 %s: exit %d: %s", pid, res.ExitCode, res.Stderr)
	}
	var n int
	testenv.Eventually(t, 30*time.Second, func() error {
		data, _, err := sb.ReadFile(t.Context(), "c", 64)
		if err != nil {
			return err
		}
		s := strings.TrimSpace(string(data))
		if !strings.HasSuffix(string(data), "\n") {
			return fmt.Errorf("partial answer %q", data)
		}
		n, err = strconv.Atoi(s)
		return err
	})
	return n
}

// waitCounter waits until the counter has passed min.
func waitCounter(t *testing.T, sb runtime.Sandbox, pid string, min int) int {
	t.Helper()
	var n int
	testenv.Eventually(t, time.Minute, func() error {
		if n = counter(t, sb, pid); n <= min {
			return fmt.Errorf("counter %d, want more than %d", n, min)
		}
		return nil
	})
	return n
}

// TestCheckpointRestoreOnAnotherNode: a counter kept only in memory is
// checkpointed with its sandbox (which stops), restored by another runtime
// instance with a directory of its own (another node), and continues from
// where it was, not from zero.
func TestCheckpointRestoreOnAnotherNode(t *testing.T) {
	node1, node2 := newRuntime(t), newRuntime(t)
	sb := create(t, node1, spec(t, "s1"))
	pid := startCounter(t, sb)
	before := waitCounter(t, sb, pid, 5)
	if err := sb.WriteFile(t.Context(), "kept.txt", []byte("files too"), 0o644); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	info, err := sb.Checkpoint(t.Context(), dir, false)
	if err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if info.ImageBytes <= 0 || info.WorkspaceBytes <= 0 || !strings.HasPrefix(info.ImageDigest, "sha256:") {
		t.Errorf("Checkpoint info = %+v; want sizes and digests", info)
	}
	if ok, err := sb.Running(t.Context()); ok || err != nil {
		t.Errorf("Running after a checkpoint = %v, %v; want false, nil", ok, err)
	}

	restored, err := node2.Restore(t.Context(), spec(t, "s1"), dir)
	if err != nil {
		t.Fatalf("Restore on another node: %v", err)
	}
	t.Cleanup(func() { shutdown(t, restored) })
	after := counter(t, restored, pid)
	if after < before {
		t.Fatalf("counter after restore = %d; want it to continue from %d", after, before)
	}
	waitCounter(t, restored, pid, after)
	if data, _, err := restored.ReadFile(t.Context(), "kept.txt", 64); err != nil || string(data) != "files too" {
		t.Errorf("kept.txt after restore = %q, %v; want %q", data, err, "files too")
	}
	// The restored sandbox's user can still write its workspace.
	if res := run(t, restored, "sh", "-c", "echo x > new.txt && id -u"); res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != "65534" {
		t.Errorf("write as the sandbox's user after restore: exit %d, out %q, err %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}

// TestCheckpointLeaveRunningAndFork: a checkpoint that leaves the sandbox
// running, then three restores of it on one node: three running copies
// whose counters are independent (one jumps by a million, the others do
// not).
func TestCheckpointLeaveRunningAndFork(t *testing.T) {
	rt := newRuntime(t)
	sb := create(t, rt, spec(t, "orig"))
	pid := startCounter(t, sb)
	before := waitCounter(t, sb, pid, 3)
	dir := t.TempDir()
	if _, err := sb.Checkpoint(t.Context(), dir, true); err != nil {
		t.Fatalf("Checkpoint(leave running): %v", err)
	}
	waitCounter(t, sb, pid, before) // the original runs on

	var copies []runtime.Sandbox
	for i := range 3 {
		c, err := rt.Restore(t.Context(), spec(t, fmt.Sprintf("fork%d", i)), dir)
		if err != nil {
			t.Fatalf("Restore copy %d: %v", i, err)
		}
		t.Cleanup(func() { shutdown(t, c) })
		copies = append(copies, c)
	}
	if res := run(t, copies[0], "kill", "-USR2", pid); res.ExitCode != 0 {
		t.Fatalf("kill -USR2: exit %d: %s", res.ExitCode, res.Stderr)
	}
	waitCounter(t, copies[0], pid, 1_000_000)
	for i, c := range copies[1:] {
		if n := counter(t, c, pid); n < before || n >= 1_000_000 {
			t.Errorf("copy %d counter = %d; want at least %d and under 1,000,000 (independent of copy 0)", i+1, n, before)
		}
	}
	if n := counter(t, sb, pid); n >= 1_000_000 {
		t.Errorf("original counter = %d; want it untouched by copy 0", n)
	}
}

// TestRestoreRefusesTampering: a checkpoint whose image or workspace does
// not match its recorded digest is refused with snapshot_corrupt, and
// nothing of the refused restore is left behind.
func TestRestoreRefusesTampering(t *testing.T) {
	rt := newRuntime(t)
	sb := create(t, rt, spec(t, "s"))
	startCounter(t, sb)
	dir := t.TempDir()
	if _, err := sb.Checkpoint(t.Context(), dir, false); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	for _, name := range []string{runsc.ImageFile, runsc.WorkspaceFile} {
		t.Run(name, func(t *testing.T) {
			bad := t.TempDir()
			for _, f := range []string{runsc.ImageFile, runsc.WorkspaceFile, runsc.MetaFile} {
				data, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				if f == name {
					data[len(data)/2] ^= 0xff
				}
				if err := os.WriteFile(filepath.Join(bad, f), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			sb2, err := rt.Restore(t.Context(), spec(t, "tampered"), bad)
			if errcode.Of(err) != errcode.SnapshotCorrupt {
				if sb2 != nil {
					shutdown(t, sb2)
				}
				t.Fatalf("Restore of a tampered %s = %v; want snapshot_corrupt", name, err)
			}
			if _, err := os.Stat(filepath.Join(rt.WorkspaceDirOf("t1", "tampered"))); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused restore left its workspace behind: %v", err)
			}
		})
	}
}

// TestBadInputs: what the runtime refuses, each with its code.
func TestBadInputs(t *testing.T) {
	rt := newRuntime(t)
	ctx := t.Context()

	// Not a checkpoint directory.
	if _, err := rt.Restore(ctx, spec(t, "x"), t.TempDir()); errcode.Of(err) != errcode.InvalidRequest {
		t.Errorf("Restore of an empty directory = %v; want invalid_request", err)
	}
	// A network.
	sp := spec(t, "net")
	sp.Network = true
	if _, err := rt.Create(ctx, sp); errcode.Of(err) != errcode.PolicyDenied {
		t.Errorf("Create with a network = %v; want policy_denied", err)
	}
	// A user by name.
	sp = spec(t, "user")
	sp.User = "root"
	if _, err := rt.Create(ctx, sp); errcode.Of(err) != errcode.InvalidRequest {
		t.Errorf("Create as user %q = %v; want invalid_request", sp.User, err)
	}

	sb := create(t, rt, spec(t, "s"))
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, runsc.ImageFile), []byte("in the way"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Checkpoint(ctx, dir, false); errcode.Of(err) != errcode.AlreadyExists {
		t.Errorf("Checkpoint into a directory holding an image = %v; want already_exists", err)
	}
	// An exec in flight: its caller could not be given it back after a
	// restore, so the checkpoint is refused (and the sandbox runs on).
	ectx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(ectx, runtime.ExecSpec{Argv: []string{"sh", "-c", "echo > started; sleep 600"}})
		done <- err
	}()
	testenv.Eventually(t, time.Minute, func() error {
		_, _, err := sb.ReadFile(ctx, "started", 16)
		return err
	})
	_, err := sb.Checkpoint(ctx, t.TempDir(), false)
	cancel()
	if errcode.Of(err) != errcode.InvalidState {
		t.Errorf("Checkpoint with an exec in flight = %v; want invalid_state", err)
	}
	if err := <-done; errcode.Of(err) != errcode.ExecTimeout {
		t.Errorf("the cancelled exec = %v; want exec_timeout", err)
	}
	if ok, err := sb.Running(ctx); !ok || err != nil {
		t.Errorf("Running after a refused checkpoint = %v, %v; want true", ok, err)
	}

	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Checkpoint(ctx, t.TempDir(), false); errcode.Of(err) != errcode.InvalidState {
		t.Errorf("Checkpoint of a stopped sandbox = %v; want invalid_state", err)
	}
	if _, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"true"}}); errcode.Of(err) != errcode.InvalidState {
		t.Errorf("Exec in a stopped sandbox = %v; want invalid_state", err)
	}

	// A runtime without checkpoints answers policy_denied.
	lrt, err := local.New(local.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	lsb, err := lrt.Create(ctx, runtime.Spec{Tenant: "t1", SessionID: "l"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, lsb) })
	if _, err := runtime.CheckpointOf(ctx, lrt.Name(), lsb, t.TempDir(), false); errcode.Of(err) != errcode.PolicyDenied {
		t.Errorf("checkpoint of a local sandbox = %v; want policy_denied", err)
	}
	if _, err := runtime.RestoreWith(ctx, lrt, runtime.Spec{}, t.TempDir()); errcode.Of(err) != errcode.PolicyDenied {
		t.Errorf("restore with the local runtime = %v; want policy_denied", err)
	}
}

// TestExecAndHardening: exec's exit codes, timeouts (the command is
// killed), and the sandbox's hardening seen from inside.
func TestExecAndHardening(t *testing.T) {
	rt := newRuntime(t)
	sb := create(t, rt, spec(t, "s"))
	ctx := t.Context()

	if res := run(t, sb, "sh", "-c", "echo out; echo err >&2; exit 3"); res.ExitCode != 3 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
		t.Errorf("exec = exit %d, %q, %q; want 3, out, err", res.ExitCode, res.Stdout, res.Stderr)
	}
	if res := run(t, sb, "no-such-program"); res.ExitCode != 127 {
		t.Errorf("exec of a missing program = exit %d; want 127", res.ExitCode)
	}
	_, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"sleep", "1000"}, Timeout: 500 * time.Millisecond})
	if errcode.Of(err) != errcode.ExecTimeout {
		t.Errorf("exec past its timeout = %v; want exec_timeout", err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if res := run(t, sb, "sh", "-c", "ps | grep -v grep | grep 'sleep 1000' || true"); len(res.Stdout) > 0 {
			return fmt.Errorf("the timed-out command still runs: %s", res.Stdout)
		}
		return nil
	})
	res := run(t, sb, "sh", "-c", "id -u; id -g; grep CapEff /proc/self/status; uname -r; touch /etc/x 2>/dev/null && echo rootfs-writable; echo ok > /workspace/w && echo ws-writable")
	want := "65534\n65534\nCapEff:\t0000000000000000\n4.4.0\nws-writable\n"
	if string(res.Stdout) != want {
		t.Errorf("inside the sandbox:\n%s\nwant:\n%s", res.Stdout, want)
	}
	// An attack: a workspace path that leaves the workspace is refused.
	if _, _, err := sb.ReadFile(ctx, "../../../../etc/passwd", 1<<20); errcode.Of(err) != errcode.InvalidPath {
		t.Errorf("ReadFile outside the workspace = %v; want invalid_path", err)
	}
}
