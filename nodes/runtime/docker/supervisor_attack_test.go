package docker_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// The hostile-sandbox tests: code inside a sandbox kills its supervisor or
// dials the node's socket itself and breaks the protocol
// (nodes/runtime/supervisor/internal/evil). Each time the node's calls get typed errors
// within a bound, the node takes the real supervisor back, and the other
// sandboxes of the node never notice.

// evilPath is where the tests put the hostile supervisor in a sandbox.
const evilPath = runtime.DefaultWorkspaceRoot + "/evil"

// killSupervisor kills the sandbox's supervisor (by its process name,
// /.paddock/supervisor's base name), and fails unless there was one.
const killSupervisor = `killall -9 supervisor`

// Bounds of the waits below. They are far above what the node needs (a
// restart comes a second after a supervisor is gone) so that a loaded
// machine does not fail the tests; a hang still fails them.
const (
	callWait    = time.Minute      // the ctx of a call that must fail fast
	recoverWait = 30 * time.Second // for the real supervisor to be back
)

// supervisedIn is supervisedRuntime with the socket directories in dir.
func supervisedIn(t *testing.T, dir string) *docker.Runtime {
	t.Helper()
	return newRuntimeWith(t, docker.Config{Supervisor: testenv.SupervisorBinary(t), SupervisorDir: dir})
}

// asSandboxUser runs a shell script in sb as the sandbox's user through the
// Docker API directly (past the supervisor, which the script may kill) and
// returns its stdout, failing the test unless it exits 0.
func asSandboxUser(t *testing.T, sb *docker.Sandbox, script string) string {
	t.Helper()
	cli := testenv.DockerClient(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ex, err := cli.ContainerExecCreate(ctx, sb.ContainerID(), container.ExecOptions{
		Cmd: []string{"sh", "-c", script}, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		t.Fatalf("exec create: %v", err)
	}
	att, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		t.Fatalf("exec attach: %v", err)
	}
	defer att.Close()
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, att.Reader); err != nil {
		t.Fatalf("exec output: %v", err)
	}
	var code int
	testenv.Eventually(t, 30*time.Second, func() error {
		ins, err := cli.ContainerExecInspect(ctx, ex.ID)
		if err != nil {
			return err
		}
		if ins.Running {
			return fmt.Errorf("the exec still runs")
		}
		code = ins.ExitCode
		return nil
	})
	if code != 0 {
		t.Fatalf("sh -c %q as the sandbox's user: exit %d, stderr %q", script, code, stderr.String())
	}
	return stdout.String()
}

// waitStatus waits up to d for sb's supervisor status to satisfy ok and
// returns it.
func waitStatus(t *testing.T, sb *docker.Sandbox, d time.Duration, what string, ok func(docker.SupervisorStatus) bool) docker.SupervisorStatus {
	t.Helper()
	var st docker.SupervisorStatus
	testenv.Eventually(t, d, func() error {
		if st = sb.Supervisor(); ok(st) {
			return nil
		}
		return fmt.Errorf("%s: the status is %+v", what, st)
	})
	return st
}

func connected(st docker.SupervisorStatus) bool { return st.Connected }

// wantEcho runs `echo ok` in sb and fails the test unless it prints ok.
func wantEcho(t *testing.T, sb *docker.Sandbox) {
	t.Helper()
	if out := sh(t, sb, "echo ok"); out != "ok\n" {
		t.Errorf("echo ok: got %q", out)
	}
}

// wantEmptyDir fails the test unless dir has nothing in it.
func wantEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("%s left behind in the supervisor directory", filepath.Join(dir, e.Name()))
	}
}

// shutdown shuts sb down now (its cleanup's Shutdown then finds it gone).
func shutdown(t *testing.T, sb *docker.Sandbox) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // t.Context may be done in a cleanup
	defer cancel()
	if err := sb.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// exercise runs `echo ok` in sb over and over until the returned stop is
// called, which fails the test if any run failed or none ran.
func exercise(t *testing.T, sb *docker.Sandbox) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background()) // ended by stop
	var wg sync.WaitGroup
	var fails []string
	runs := 0
	wg.Go(func() {
		pace := time.NewTicker(100 * time.Millisecond) // leaves the two cores to the attacks
		defer pace.Stop()
		for {
			cctx, ccancel := context.WithTimeout(ctx, callWait)
			res, err := sb.Exec(cctx, runtime.ExecSpec{Argv: []string{"echo", "ok"}})
			ccancel()
			if ctx.Err() != nil {
				return
			}
			runs++
			if err != nil || string(res.Stdout) != "ok\n" {
				fails = append(fails, fmt.Sprintf("run %d: %q, %v", runs, res.Stdout, err))
			}
			select {
			case <-ctx.Done():
				return
			case <-pace.C:
			}
		}
	})
	return func() {
		t.Helper()
		cancel()
		wg.Wait()
		if runs == 0 {
			t.Errorf("the other sandbox ran nothing")
		}
		for _, f := range fails {
			t.Errorf("the other sandbox failed: %s", f)
		}
		st := sb.Supervisor()
		if !st.Connected || st.Connects != 1 || st.Violations != 0 || st.Restarts != 0 {
			t.Errorf("the other sandbox's supervisor: got %+v, want connected once, no violation, no restart", st)
		}
	}
}

// callOutcome is how a call of the node ended.
type callOutcome struct {
	what string
	err  error
	took time.Duration
}

// callBoth makes two calls on sb at once (an exec and a read) and returns
// how each ended.
func callBoth(t *testing.T, sb *docker.Sandbox) []callOutcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callWait)
	defer cancel()
	out := make([]callOutcome, 2)
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		_, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"true"}})
		out[0] = callOutcome{"exec", err, time.Since(start)}
	})
	wg.Go(func() {
		_, _, err := sb.ReadFile(ctx, "note.txt", 1<<20)
		out[1] = callOutcome{"read", err, time.Since(start)}
	})
	wg.Wait()
	return out
}

// TestSupervisorAttacks: a sandbox kills its supervisor and dials the
// node's socket with a hostile one, in each of its ways. The calls the
// node makes meanwhile fail with typed errors well within their deadline,
// violations are counted, the real supervisor is restarted and serves
// again, and another sandbox of the node works throughout.
func TestSupervisorAttacks(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	dir := testenv.SupervisorDir(t)
	rt := supervisedIn(t, dir)
	victim := create(t, rt, spec(rt, image))
	neighbour := create(t, rt, spec(rt, image))
	for _, sb := range []*docker.Sandbox{victim, neighbour} {
		waitStatus(t, sb, recoverWait, "the supervisor connects", connected)
	}
	if err := victim.WriteFile(t.Context(), "evil", testenv.EvilSupervisor(t), 0o755); err != nil {
		t.Fatalf("write the hostile supervisor: %v", err)
	}
	if err := victim.WriteFile(t.Context(), "note.txt", []byte("a note"), 0o644); err != nil {
		t.Fatal(err)
	}
	stop := exercise(t, neighbour)

	for _, tc := range []struct {
		mode      string
		violation bool          // the node counts one
		bound     time.Duration // the calls fail within it
	}{
		{"flood", true, 10 * time.Second},
		{"window", true, 10 * time.Second},
		{"oversize", true, 10 * time.Second},
		{"call", true, 10 * time.Second},
		{"malformed", false, 10 * time.Second},
		{"silent", true, 20 * time.Second}, // the node gives up after 5 s of silence
	} {
		t.Run(tc.mode, func(t *testing.T) {
			before := waitStatus(t, victim, recoverWait, "the real supervisor is connected", connected)
			asSandboxUser(t, victim, killSupervisor+` && { setsid `+evilPath+` -calls 2 `+tc.mode+` </dev/null >/dev/null 2>&1 & }`)
			evil := waitStatus(t, victim, recoverWait, "the hostile supervisor connects", func(st docker.SupervisorStatus) bool {
				return st.Connected && st.Connects > before.Connects
			})
			if evil.Restarts != before.Restarts {
				t.Fatalf("the node restarted the real supervisor before the hostile one connected: %+v", evil)
			}
			for _, c := range callBoth(t, victim) {
				switch code := errcode.Of(c.err); {
				case c.err == nil:
					t.Errorf("%s: succeeded through the hostile supervisor", c.what)
				case code != errcode.RuntimeError && code != errcode.Unavailable:
					t.Errorf("%s: got %v (code %q), want runtime_error or unavailable", c.what, c.err, code)
				case c.took > tc.bound:
					t.Errorf("%s: failed after %s, want within %s", c.what, c.took, tc.bound)
				default:
					t.Logf("%s: %s after %s", c.what, code, c.took.Round(time.Millisecond))
				}
			}
			after := waitStatus(t, victim, recoverWait, "the real supervisor is back", func(st docker.SupervisorStatus) bool {
				return st.Connected && st.Restarts > before.Restarts
			})
			if tc.violation && after.Violations <= before.Violations {
				t.Errorf("no violation counted: before %+v, after %+v", before, after)
			}
			if after.LastError == "" {
				t.Errorf("no reason kept for the hostile connection's end: %+v", after)
			}
			wantEcho(t, victim)
		})
	}

	// Connections that never say a proper hello are refused; the real
	// supervisor stays connected.
	for _, mode := range []string{"badhello", "mute"} {
		t.Run(mode, func(t *testing.T) {
			before := waitStatus(t, victim, recoverWait, "the real supervisor is connected", connected)
			asSandboxUser(t, victim, `setsid `+evilPath+` `+mode+` </dev/null >/dev/null 2>&1 &`)
			after := waitStatus(t, victim, recoverWait, "the refused hello is counted", func(st docker.SupervisorStatus) bool {
				return st.Violations > before.Violations
			})
			if !after.Connected || after.Connects != before.Connects {
				t.Errorf("the real supervisor was displaced: before %+v, after %+v", before, after)
			}
			wantEcho(t, victim)
		})
	}

	stop()
	shutdown(t, victim)
	shutdown(t, neighbour)
	wantEmptyDir(t, dir)
}

// TestSupervisorKilled: the sandbox's user kills the supervisor. The
// node's calls go on through the Docker API meanwhile, the node restarts
// the supervisor, and a killed supervisor is no violation.
func TestSupervisorKilled(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	dir := testenv.SupervisorDir(t)
	rt := supervisedIn(t, dir)
	sb := create(t, rt, spec(rt, image))
	other := create(t, rt, spec(rt, image))
	before := waitStatus(t, sb, recoverWait, "the supervisor connects", connected)
	waitStatus(t, other, recoverWait, "the other supervisor connects", connected)
	// A process the supervisor started outlives it, and must not keep the
	// next supervisor out (it inherits nothing of the old one's).
	p, err := sb.StartProcess(t.Context(), runtime.ProcessSpec{Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatalf("StartProcess: %v", err)
	}
	defer p.Close()

	asSandboxUser(t, sb, killSupervisor)
	waitStatus(t, sb, recoverWait, "the node sees the supervisor gone", func(st docker.SupervisorStatus) bool { return !st.Connected })
	ctx, cancel := context.WithTimeout(t.Context(), callWait)
	defer cancel()
	if res, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"echo", "fallback"}}); err != nil || string(res.Stdout) != "fallback\n" {
		t.Errorf("exec without a supervisor: got %q, %v", res.Stdout, err)
	}
	if err := sb.WriteFile(ctx, "f.txt", []byte("content"), 0o600); err != nil {
		t.Errorf("write without a supervisor: %v", err)
	}
	if data, mode, err := sb.ReadFile(ctx, "f.txt", 1<<20); err != nil || string(data) != "content" || mode != 0o600 {
		t.Errorf("read without a supervisor: got %q, %v, %v", data, mode, err)
	}

	after := waitStatus(t, sb, recoverWait, "the supervisor is restarted", func(st docker.SupervisorStatus) bool {
		return st.Connected && st.Restarts >= 1 && st.Connects > before.Connects
	})
	if after.Violations != before.Violations {
		t.Errorf("a killed supervisor counted as a violation: before %+v, after %+v", before, after)
	}
	wantEcho(t, sb)
	if data, _, err := sb.ReadFile(ctx, "f.txt", 1<<20); err != nil || string(data) != "content" {
		t.Errorf("read through the restarted supervisor: got %q, %v", data, err)
	}
	if st := other.Supervisor(); !st.Connected || st.Connects != 1 || st.Restarts != 0 {
		t.Errorf("the other sandbox's supervisor: got %+v, want connected once and never restarted", st)
	}
	shutdown(t, sb)
	shutdown(t, other)
	wantEmptyDir(t, dir)
}

// TestSupervisorSecondInstance: a second supervisor in a sandbox (one the
// node restarts while the first is still redialling, or one the sandbox's
// user starts) exits at once and leaves the first one connected. Two that
// each redial when displaced would take the link from each other for ever,
// failing every call in flight each time.
func TestSupervisorSecondInstance(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	dir := testenv.SupervisorDir(t)
	rt := supervisedIn(t, dir)
	sb := create(t, rt, spec(rt, image))
	before := waitStatus(t, sb, recoverWait, "the supervisor connects", connected)
	start := time.Now()
	// Killed after 20 s if it does not exit by itself (TERM would end it
	// cleanly, with status 0).
	asSandboxUser(t, sb, `timeout -s KILL 20 /.paddock/supervisor -socket /.paddock/run/node.sock -root `+runtime.DefaultWorkspaceRoot+` </dev/null`)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the second supervisor ran for %s", took)
	}
	if st := sb.Supervisor(); !st.Connected || st.Connects != before.Connects {
		t.Errorf("the link changed hands: before %+v, after %+v", before, st)
	}
	wantEcho(t, sb)
	shutdown(t, sb)
	wantEmptyDir(t, dir)
}

// TestSupervisorReattach: a node that restarts (a new Runtime on the same
// node and socket directory) finds its sandbox again, and the sandbox's
// supervisor, which kept running, dials the new listener and serves it.
func TestSupervisorReattach(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	dir := testenv.SupervisorDir(t)
	rt := supervisedIn(t, dir)
	sb := create(t, rt, spec(rt, image))
	waitStatus(t, sb, recoverWait, "the supervisor connects", connected)
	sh(t, sb, "echo before > kept.txt")
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if st := sb.Supervisor(); st.Connected {
		t.Errorf("connected after the runtime closed: %+v", st)
	}

	rt2, err := docker.New(docker.Config{
		Client: testenv.DockerClient(t), Node: rt.Node(),
		Supervisor: testenv.SupervisorBinary(t), SupervisorDir: dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt2.Close() })
	found, err := rt2.FindSandboxes(t.Context())
	if err != nil {
		t.Fatalf("FindSandboxes: %v", err)
	}
	if len(found) != 1 {
		t.Fatalf("found %d sandboxes, want 1", len(found))
	}
	again := found[0].Sandbox.(*docker.Sandbox)
	if again.ContainerID() != sb.ContainerID() {
		t.Fatalf("found container %s, want %s", again.ContainerID(), sb.ContainerID())
	}
	st := waitStatus(t, again, recoverWait, "the supervisor dials the new node", connected)
	t.Logf("after the node's restart: %+v", st)
	if out := sh(t, again, "cat kept.txt && echo after"); out != "before\nafter\n" {
		t.Errorf("exec after the node's restart: got %q", out)
	}
	if st := again.Supervisor(); !st.Connected || st.Violations != 0 {
		t.Errorf("after an exec: got %+v, want connected without violations", st)
	}
	shutdown(t, again)
	wantEmptyDir(t, dir)
}

// TestSupervisorFallback: a supervisor binary that does not run (it exits
// at once) costs a create only SupervisorWait; the sandbox says why it has
// no supervisor and works through the Docker API.
func TestSupervisorFallback(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	bin := filepath.Join(t.TempDir(), "not-a-supervisor")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := testenv.SupervisorDir(t)
	rt := newRuntimeWith(t, docker.Config{Supervisor: bin, SupervisorDir: dir, SupervisorWait: time.Second})
	start := time.Now()
	sb := create(t, rt, spec(rt, image))
	t.Logf("create took %s", time.Since(start).Round(time.Millisecond))
	st := sb.Supervisor()
	if !st.Enabled || st.Connected || st.Note == "" {
		t.Errorf("status: got %+v, want enabled, not connected, with a note", st)
	}
	ctx, cancel := context.WithTimeout(t.Context(), callWait)
	defer cancel()
	if res, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"echo", "ok"}}); err != nil || string(res.Stdout) != "ok\n" {
		t.Errorf("exec: got %q, %v", res.Stdout, err)
	}
	if err := sb.WriteFile(ctx, "f.txt", []byte("content"), 0o640); err != nil {
		t.Errorf("write: %v", err)
	}
	if data, mode, err := sb.ReadFile(ctx, "f.txt", 1<<20); err != nil || string(data) != "content" || mode != 0o640 {
		t.Errorf("read: got %q, %v, %v", data, mode, err)
	}
	if st := sb.Supervisor(); st.Connected || st.Violations != 0 {
		t.Errorf("status after the calls: got %+v, want not connected, no violation", st)
	}
	shutdown(t, sb)
	wantEmptyDir(t, dir)
}
