package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/testenv"
)

// TestSIGTERMDrains starts the agent-node binary against a stack with no
// other node, runs a command on it, sends SIGTERM mid-command, and checks
// that the command still finishes, the process exits 0, and the session
// then answers unavailable.
func TestSIGTERMDrains(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	cmd, exited := startNode(t, "--nats-url", st.Broker.ClientURL(), "--id", "proc-node", "--runtime", "local", "--dir", t.TempDir(), "--drain-timeout", "20s")
	ctx := testenv.Context(t, 60*time.Second)
	testenv.Eventually(t, 30*time.Second, func() error {
		if len(st.Scheduler.Nodes()) != 1 {
			return fmt.Errorf("node not registered yet")
		}
		return nil
	})
	s, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Node != "proc-node" {
		t.Fatalf("placed on %q, want proc-node", s.Node)
	}
	type result struct {
		res commands.ExecResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: "sleep 1; echo finished"})
		done <- result{r, err}
	}()
	// Wait until the exec has started (its start event is in the stream).
	testenv.Eventually(t, 10*time.Second, func() error {
		evs, err := st.Log.Session(ctx, "default", s.SessionID)
		if err != nil {
			return err
		}
		if len(evs) < 3 {
			return fmt.Errorf("exec not started yet (%d events)", len(evs))
		}
		return nil
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || string(r.res.Stdout) != "finished\n" {
		t.Fatalf("in-flight exec = %q, %v; want it to finish during the drain", r.res.Stdout, r.err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("agent-node exited with %v, want 0", err)
		}
	case <-ctx.Done():
		t.Fatal("agent-node did not exit after SIGTERM")
	}
	if _, err := st.Client.Running(ctx, s.SessionID); !errors.Is(err, errcode.ErrUnavailable) {
		t.Fatalf("after the node left: got %v, want unavailable", err)
	}
	evs, err := st.Log.Session(ctx, "default", s.SessionID)
	if err != nil || len(evs) != 4 {
		t.Fatalf("got %d events, %v; want create and exec, a start and a finish each", len(evs), err)
	}
}

// startNode starts the agent-node binary with args. exited delivers its
// exit once; the test's end kills it if it still runs.
func startNode(t *testing.T, args ...string) (*exec.Cmd, <-chan error) {
	t.Helper()
	bin := testenv.BuildBinary(t, "./cmd/agent-node")
	cmd := exec.Command(bin, args...)
	cmd.Stderr = &testWriter{t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	waited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		exited <- err
		close(waited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-waited
	})
	return cmd, exited
}

// TestSIGKILLReattach kills the agent-node process with SIGKILL while a
// Docker sandbox runs and a command is in flight, starts it again with the
// same id, and checks that the session answers exec again, that the cut
// short command is recorded as failed (every start has its finish), and
// that an orphaned labelled container is reaped.
func TestSIGKILLReattach(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	cli := testenv.DockerClient(t)
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	node := "kill-" + uuid.NewString()[:8]
	t.Cleanup(func() { testenv.RemoveContainers(t, cli, "paddock.node="+node) })
	args := []string{"--nats-url", st.Broker.ClientURL(), "--id", node, "--runtime", "docker", "--reap-grace", "1s"}
	ctx := testenv.Context(t, 3*time.Minute)
	waitNode := func() {
		testenv.Eventually(t, 30*time.Second, func() error {
			for _, n := range st.Scheduler.Nodes() {
				if n.Node == node && n.Status == "up" {
					return nil
				}
			}
			return fmt.Errorf("node %s not up yet", node)
		})
	}

	cmd, exited := startNode(t, args...)
	waitNode()
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.WriteFile(ctx, s.SessionID, "state.txt", []byte("before"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A command in flight when the node dies.
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, _ = st.Client.Exec(cctx, s.SessionID, commands.ExecArgs{Argv: []string{"sleep", "600"}})
	}()
	testenv.Eventually(t, 20*time.Second, func() error {
		evs, err := st.Log.Session(ctx, "default", s.SessionID)
		if err != nil {
			return err
		}
		if last := evs[len(evs)-1]; last.Op != "exec" || last.Phase != events.PhaseStart {
			return fmt.Errorf("exec not started yet")
		}
		return nil
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited

	startNode(t, args...)
	waitNode()
	testenv.Eventually(t, 30*time.Second, func() error {
		res, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Argv: []string{"cat", "state.txt"}})
		if err != nil {
			return err
		}
		if string(res.Stdout) != "before" {
			return fmt.Errorf("exec after restart printed %q", res.Stdout)
		}
		return nil
	})
	evs, err := st.Log.Session(ctx, "default", s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	state, err := projection.Fold(evs)
	if err != nil || len(state.InFlight) != 0 || state.Status != projection.StatusRunning {
		t.Fatalf("after restart the session folds to %s with %d in flight, %v; want running, none in flight", state.Status, len(state.InFlight), err)
	}
	var cut *events.Event
	for i := range evs {
		if evs[i].Op == "exec" && evs[i].Phase == events.PhaseFinish && evs[i].ErrorCode == string(errcode.Unavailable) {
			cut = &evs[i]
		}
	}
	if cut == nil {
		t.Fatal("no failed finish recorded for the exec the kill cut short")
	}

	// An orphan: a container with this node's labels whose session does
	// not exist. The restarted node's reaper removes it.
	orphan := testenv.StartLabelledContainer(t, cli, image, map[string]string{
		"paddock.node": node, "paddock.tenant": "default", "paddock.session": "orphan-" + uuid.NewString()[:8], "paddock.epoch": "1",
	})
	testenv.Eventually(t, 60*time.Second, func() error {
		if testenv.ContainerExists(t, cli, orphan) {
			return fmt.Errorf("orphan %s not reaped yet", orphan)
		}
		return nil
	})
	if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
		t.Fatal(err)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--runtime", "vm"}, {"--reap-grace", "0s"}, {"--labels", "novalue"}, {"extra"}, {"--id", "a.b", "--nats-url", "nats://127.0.0.1:1"}, {"--otlp-endpoint", "grpc://127.0.0.1:4317"}, {"--egress-cluster-ports", "route"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := run(ctx, args, &testWriter{t})
		cancel()
		if err == nil {
			t.Errorf("agent-node %v: no error", args)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w *testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
