package runsc_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/runsc"
	"github.com/paddock-dev/paddock/testenv"
)

// sandboxDirs returns the sandbox directories under a runtime's dir.
func sandboxDirs(t *testing.T, dir string) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(dir, "sandboxes", "sb-*"))
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// waitNoProcesses waits until no host process names dir.
func waitNoProcesses(t *testing.T, dir string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		if p := processesUnder(dir); len(p) > 0 {
			return fmt.Errorf("processes left: %q", p)
		}
		return nil
	})
}

// TestFindSandboxesAfterRestart: a sandbox and one restored from its
// checkpoint (under a container id of its own), each with a counter kept
// in memory, are found by a second runtime on the same directory (the
// node restarted) with their session, epoch and secret environment; exec,
// files and the counters work through the found Sandboxes; Shutdown of
// the found ones leaves no process, directory, workspace or cgroup.
func TestFindSandboxesAfterRestart(t *testing.T) {
	rt1, dir := newRuntimeDir(t)
	sp := spec(t, "s")
	sp.Epoch, sp.Env = 3, map[string]string{"SECRET": "s3cret"}
	sb := create(t, rt1, sp)
	pid := startCounter(t, sb)
	before := waitCounter(t, sb, pid, 2)
	ck := t.TempDir()
	if _, err := sb.Checkpoint(t.Context(), ck, true); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	rs := spec(t, "r")
	rs.Epoch = 5
	r, err := rt1.Restore(t.Context(), rs, ck)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	t.Cleanup(func() { shutdown(t, r) })
	ids := map[string]string{"s": sb.ContainerID(), "r": r.(*runsc.Sandbox).ContainerID()}
	for _, d := range sandboxDirs(t, dir) {
		fi, err := os.Stat(filepath.Join(d, runsc.RecordFile))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want a 0600 file", runsc.RecordFile, fi, err)
		}
	}

	// The node restarts: a new runtime on the same directory.
	rt2 := testenv.RunscRuntime(t, dir, t.Name())
	found, err := rt2.FindSandboxes(t.Context())
	if err != nil {
		t.Fatalf("FindSandboxes: %v", err)
	}
	if len(found) != 2 {
		t.Fatalf("FindSandboxes found %d sandboxes (%+v); want 2", len(found), found)
	}
	bySession := map[string]runtime.Found{}
	for _, f := range found {
		bySession[f.SessionID] = f
		if got := f.Sandbox.(*runsc.Sandbox).ContainerID(); got != ids[f.SessionID] {
			t.Errorf("session %s: container %s; want %s", f.SessionID, got, ids[f.SessionID])
		}
		if f.Tenant != "t1" || !f.Running || f.Created.IsZero() {
			t.Errorf("found %+v; want tenant t1, running, a creation time", f)
		}
	}
	fs, fr := bySession["s"], bySession["r"]
	if fs.Epoch != 3 || fr.Epoch != 5 || fs.Env["SECRET"] != "s3cret" {
		t.Errorf("found epochs %d, %d, env %v; want 3, 5 and SECRET", fs.Epoch, fr.Epoch, fs.Env)
	}
	for _, f := range []runtime.Found{fs, fr} {
		// The counter lives on and is reached through the found sandbox.
		waitCounter(t, f.Sandbox, pid, before)
	}
	if res := run(t, fs.Sandbox, "sh", "-c", `echo "$SECRET" && id -u`); string(res.Stdout) != "s3cret\n65534\n" {
		t.Errorf("exec through the found sandbox: out %q, err %q; want the secret and uid 65534", res.Stdout, res.Stderr)
	}
	if err := fr.Sandbox.WriteFile(t.Context(), "w.txt", []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := run(t, fr.Sandbox, "sh", "-c", "cat w.txt && echo x >> w.txt"); res.ExitCode != 0 || string(res.Stdout) != "hi" {
		t.Errorf("a file written through the found sandbox: exit %d, out %q, err %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	// A second pass hands out the same Sandboxes, not second drivers.
	again, err := rt2.FindSandboxes(t.Context())
	if err != nil || len(again) != 2 {
		t.Fatalf("a second FindSandboxes: %d, %v; want 2", len(again), err)
	}
	for _, f := range again {
		if f.Sandbox != bySession[f.SessionID].Sandbox {
			t.Errorf("session %s: a second FindSandboxes made another Sandbox", f.SessionID)
		}
	}

	for _, f := range found {
		if err := f.Sandbox.Shutdown(t.Context()); err != nil {
			t.Fatalf("Shutdown of the found sandbox: %v", err)
		}
	}
	waitNoProcesses(t, dir)
	for _, sub := range []string{"sandboxes", "workspaces/t1"} {
		entries, _ := os.ReadDir(filepath.Join(dir, sub))
		for _, e := range entries {
			t.Errorf("left in %s: %s", sub, e.Name())
		}
	}
	for _, id := range ids {
		if cg, _ := filepath.Glob("/sys/fs/cgroup/*/paddock-runsc/" + id + "-*"); len(cg) > 0 {
			t.Errorf("cgroups left: %q", cg)
		}
		if cg, _ := filepath.Glob("/sys/fs/cgroup/paddock-runsc/" + id + "-*"); len(cg) > 0 {
			t.Errorf("cgroups left: %q", cg)
		}
	}
	if found, err := rt2.FindSandboxes(t.Context()); err != nil || len(found) != 0 {
		t.Errorf("FindSandboxes after Shutdown: %d, %v; want none", len(found), err)
	}
}

// TestFindSandboxesRemovesMalformed: a sandbox directory whose record is
// garbage (its container running), one with no record and no runsc root,
// and a truncated record are not returned and are removed with their
// processes and cgroup, without a panic; a record of an unknown version
// is left alone.
func TestFindSandboxesRemovesMalformed(t *testing.T) {
	rt1, dir := newRuntimeDir(t)
	sb := create(t, rt1, spec(t, "damaged"))
	startCounter(t, sb)
	dirs := sandboxDirs(t, dir)
	if len(dirs) != 1 {
		t.Fatalf("sandbox dirs %q; want 1", dirs)
	}
	damaged := dirs[0]
	if err := os.WriteFile(filepath.Join(damaged, runsc.RecordFile), []byte("\x00garbage{"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(dir, "sandboxes")
	files := map[string]string{
		"sb-empty":     "",
		"sb-truncated": `{"version":1,"tenant":"t1","session_id":"x"}`,
		"sb-future":    `{"version":99,"tenant":"t1"}`,
	}
	for name, rec := range files {
		if err := os.Mkdir(filepath.Join(base, name), 0o700); err != nil {
			t.Fatal(err)
		}
		if rec != "" {
			if err := os.WriteFile(filepath.Join(base, name, runsc.RecordFile), []byte(rec), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}

	rt2 := testenv.RunscRuntime(t, dir, t.Name())
	found, err := rt2.FindSandboxes(t.Context())
	if err != nil || len(found) != 0 {
		t.Fatalf("FindSandboxes = %+v, %v; want none, nil", found, err)
	}
	waitNoProcesses(t, damaged)
	for _, gone := range []string{damaged, filepath.Join(base, "sb-empty"), filepath.Join(base, "sb-truncated")} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s: %v; want it removed", gone, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(base, "sb-future")); err != nil {
		t.Errorf("a record of an unknown version: %v; want it left", err)
	}
	if cg, _ := filepath.Glob("/sys/fs/cgroup/*/paddock-runsc/" + sb.ContainerID() + "-*"); len(cg) > 0 {
		t.Errorf("cgroups left: %q", cg)
	}
	// The first runtime's sandbox has no container any more.
	if res, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"true"}, Timeout: time.Minute}); err == nil && res.ExitCode == 0 {
		t.Error("exec in the removed sandbox succeeded")
	}
}

// TestFindSandboxesSparesOnesInTheMaking: passes of FindSandboxes running
// the whole time creates are made (as the node's reaper does) remove none
// of the directories being made: every create succeeds and runs.
func TestFindSandboxesSparesOnesInTheMaking(t *testing.T) {
	rt := newRuntime(t)
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if _, err := rt.FindSandboxes(t.Context()); err != nil {
				done <- err
				return
			}
		}
	}()
	for i := range 3 {
		sb := create(t, rt, spec(t, fmt.Sprint("m", i)))
		if res := run(t, sb, "true"); res.ExitCode != 0 {
			t.Errorf("sandbox %d: exit %d", i, res.ExitCode)
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("FindSandboxes: %v", err)
	}
	found, err := rt.FindSandboxes(t.Context())
	if err != nil || len(found) != 3 {
		t.Fatalf("FindSandboxes = %d, %v; want the 3 sandboxes", len(found), err)
	}
}
