package nodes_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/testenv"
)

// lastFinish waits until the session's last event is a finish of op and
// returns it.
func lastFinish(t *testing.T, st *testenv.Stack, id string, op commands.Op, within time.Duration) events.Event {
	t.Helper()
	var last events.Event
	testenv.Eventually(t, within, func() error {
		evs, err := st.Log.Session(testenv.Context(t, 10*time.Second), "default", id)
		if err != nil {
			return err
		}
		last = evs[len(evs)-1]
		if last.Op != string(op) || last.Phase != events.PhaseFinish {
			return fmt.Errorf("last event of %s: %s %s", id, last.Op, last.Phase)
		}
		return nil
	})
	return last
}

// TestIdleTimeout: a session with no operation and no running process for
// its idle timeout is stopped by the node (persisted first), recorded with
// the node as actor and reason idle; a session with a running process, and
// one with a long exec in flight, are not, though they were idle as long;
// a create asking more than the operator's maximum is policy_denied.
func TestIdleTimeout(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Node: nodes.Config{
		ExpiryInterval: 50 * time.Millisecond,
		Policy:         nodes.Policy{MaxIdleTimeout: time.Hour},
	}})
	ctx := testenv.Context(t, 2*time.Minute)

	if _, err := st.Client.Create(ctx, commands.CreateArgs{IdleTimeoutS: 2 * 3600}); !errors.Is(err, errcode.ErrPolicyDenied) {
		t.Fatalf("create asking a 2h idle timeout under a 1h maximum: %v, want policy_denied", err)
	}
	if _, err := st.Client.Create(ctx, commands.CreateArgs{IdleTimeoutS: -1}); !errors.Is(err, errcode.ErrInvalidRequest) {
		t.Fatalf("negative idle timeout: %v, want invalid_request", err)
	}
	never, err := st.Client.Create(ctx, commands.CreateArgs{}) // no default here: never idle-stopped
	if err != nil {
		t.Fatal(err)
	}

	create := func() string {
		t.Helper()
		s, err := st.Client.Create(ctx, commands.CreateArgs{IdleTimeoutS: 1})
		if err != nil {
			t.Fatal(err)
		}
		return s.SessionID
	}
	idle, withProc, withExec := create(), create(), create()
	if _, err := st.Client.WriteFile(ctx, idle, "notes.txt", []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	if _, err := st.Client.ProcStart(ctx, withProc, commands.ProcStartArgs{Argv: []string{"sleep", "120"}, YieldMS: &zero}); err != nil {
		t.Fatal(err)
	}
	execDone := make(chan error, 1)
	go func() { // an exec in flight for longer than the idle timeout; the test waits for it below
		_, err := st.Client.Exec(ctx, withExec, commands.ExecArgs{Argv: []string{"sleep", "4"}})
		execDone <- err
	}()

	fin := lastFinish(t, st, idle, commands.OpStop, 30*time.Second)
	d, err := events.DecodeData[events.SnapshotFinish](fin)
	if err != nil || d.Reason != nodes.ReasonIdle || d.Snapshot == nil || fin.Actor != "node:node-1" {
		t.Fatalf("idle stop: %+v by %q (%v); want reason idle, a snapshot, by the node", d, fin.Actor, err)
	}
	// The idle one waited past its timeout; the busy ones were idle (no
	// op) as long, but a process runs in one and an exec in the other.
	for _, id := range []string{withProc, withExec, never.SessionID} {
		if running, err := st.Client.Running(ctx, id); err != nil || !running {
			t.Errorf("session %s: running %v, %v; want it left running", id, running, err)
		}
	}
	if err := <-execDone; err != nil {
		t.Fatalf("the long exec: %v", err)
	}
	// Its exec over, the second one goes idle in turn.
	lastFinish(t, st, withExec, commands.OpStop, 30*time.Second)
	// The stopped session comes back with its files.
	if _, err := st.Client.Resume(ctx, idle, nil); err != nil {
		t.Fatal(err)
	}
	if b, err := st.Client.ReadFile(ctx, idle, "notes.txt"); err != nil || string(b) != "kept" {
		t.Fatalf("after an idle stop and a resume, notes.txt = %q, %v", b, err)
	}
}

// TestStoppedRetention: a session stopped longer than the node's stopped
// retention is shut down (reason retention) and can be resumed from its
// snapshot; a running one is not touched.
func TestStoppedRetention(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Node: nodes.Config{
		ExpiryInterval: 50 * time.Millisecond,
		Policy:         nodes.Policy{StoppedRetention: 500 * time.Millisecond},
	}})
	ctx := testenv.Context(t, time.Minute)
	stopped, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	running, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.WriteFile(ctx, stopped.SessionID, "notes.txt", []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := st.Client.Stop(ctx, stopped.SessionID); err != nil {
		t.Fatal(err)
	}
	fin := lastFinish(t, st, stopped.SessionID, commands.OpShutdown, 30*time.Second)
	if d, err := events.DecodeData[events.StatusFinish](fin); err != nil || d.Reason != nodes.ReasonRetention {
		t.Fatalf("retention shutdown: %+v (%v); want reason retention", d, err)
	}
	if ok, err := st.Client.Running(ctx, running.SessionID); err != nil || !ok {
		t.Errorf("the running session: %v, %v; want it untouched", ok, err)
	}
	if _, err := st.Client.Resume(ctx, stopped.SessionID, nil); err != nil {
		t.Fatal(err)
	}
	if b, err := st.Client.ReadFile(ctx, stopped.SessionID, "notes.txt"); err != nil || string(b) != "kept" {
		t.Fatalf("after the retention shutdown and a resume, notes.txt = %q, %v", b, err)
	}
}
