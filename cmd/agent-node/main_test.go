package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/testenv"
)

// TestSIGTERMDrains starts the agent-node binary against a stack with no
// other node, runs a command on it, sends SIGTERM mid-command, and checks
// that the command still finishes, the process exits 0, and the session
// then answers unavailable.
func TestSIGTERMDrains(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	bin := testenv.BuildBinary(t, "./cmd/agent-node")
	cmd := exec.Command(bin, "--nats-url", st.Broker.ClientURL(), "--id", "proc-node", "--dir", t.TempDir(), "--drain-timeout", "20s")
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

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--runtime", "vm"}, {"--labels", "novalue"}, {"extra"}, {"--id", "a.b", "--nats-url", "nats://127.0.0.1:1"}} {
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
