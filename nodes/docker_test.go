package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/testenv"
)

// dockerRuntime returns a Docker runtime for node, on the real engine, and
// checks when the test ends that no container of node is left.
func dockerRuntime(t *testing.T, node string) *docker.Runtime {
	t.Helper()
	return newDockerRuntime(t, docker.Config{Node: node})
}

// newDockerRuntime is dockerRuntime with cfg's runtime settings (GVisor).
func newDockerRuntime(t *testing.T, cfg docker.Config) *docker.Runtime {
	t.Helper()
	node := cfg.Node
	// Every node's sandboxes run the supervisor, as a deployment's do; a
	// node restarted in a test finds its sockets again (one directory per
	// node id).
	// Their disks are loopfs images where the host offers it (the
	// directory's check fails the test for any left behind).
	cfg.Client = testenv.DockerClient(t)
	cfg.Supervisor, cfg.SupervisorDir, cfg.DiskDir = testenv.SupervisorBinary(t), testenv.SupervisorDirFor(t, node), testenv.DiskDir(t)
	rt, err := docker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		found, err := rt.FindSandboxes(ctx)
		if err != nil {
			t.Errorf("list leftovers: %v", err)
			return
		}
		for _, fd := range found {
			t.Errorf("container of session %s/%s left behind", fd.Tenant, fd.SessionID)
			_ = fd.Sandbox.Shutdown(ctx)
		}
	})
	return rt
}

// startAgent starts a node agent with rt on st's server; the test's end
// closes it.
func startAgent(t *testing.T, st *testenv.Stack, cfg nodes.Config, rt runtime.Runtime) *nodes.Agent {
	t.Helper()
	return testenv.StartAgent(t, st.Broker.ClientURL(), cfg, rt)
}

// TestDockerReattach: a node agent that stops (its sandboxes stay) and
// starts again with the same id serves its Docker sessions again, with
// their history continued, secrets still redacted, and running state.
func TestDockerReattach(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	node := "reattach-" + uuid.NewString()[:8]
	rt := dockerRuntime(t, node)
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	ctx := testenv.Context(t, 2*time.Minute)

	first := startAgent(t, st, nodes.Config{ID: node}, rt)
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image, SecretEnv: map[string]string{"TOKEN": "s3cr3t-value"}})
	if err != nil {
		t.Fatal(err)
	}
	stopped, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image})
	if err != nil {
		t.Fatal(err)
	}
	if evs := sessionEvents(t, st, "default", s.SessionID); len(evs) < 2 {
		t.Fatalf("%d events after create", len(evs))
	} else if d, err := events.DecodeData[events.StatusFinish](evs[1]); err != nil || len(d.ContainerID) < 12 {
		t.Fatalf("create finish data = %+v, %v; want the container's id", d, err)
	}
	if _, err := st.Client.WriteFile(ctx, s.SessionID, "notes.txt", []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := st.Client.Stop(ctx, stopped.SessionID); err != nil {
		t.Fatal(err)
	}
	counted := commands.ExecArgs{Shell: "echo ran >> count; wc -l < count"}
	retry, _ := json.Marshal(commands.Request{Version: commands.Version, CommandID: "count-once", Args: mustJSON(t, counted)})
	execSubj := commands.Subjects{}.Session("default", s.SessionID, commands.OpExec)
	if rep := rawReply(t, ctx, st.ClientConn, execSubj, retry); rep.Error != nil || rep.Replayed {
		t.Fatalf("first run of count-once: %+v", rep)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.Running(ctx, s.SessionID); !errors.Is(err, errcode.ErrUnavailable) {
		t.Fatalf("while the node is down: %v, want unavailable", err)
	}

	second := startAgent(t, st, nodes.Config{ID: node}, rt)
	if got := second.Sessions(); len(got) != 2 {
		t.Fatalf("reattached %v, want both sessions", got)
	}
	res, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: "cat notes.txt; echo \" $TOKEN\""})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "kept [REDACTED]\n" {
		t.Fatalf("exec after reattach = %q, want the file and the redacted secret", res.Stdout)
	}
	// A command id the first node ran is not run again by the second: the
	// outcome comes back rebuilt from its finish event.
	rep := rawReply(t, ctx, st.ClientConn, execSubj, retry)
	var again commands.ExecResult
	if rep.Error != nil || !rep.Replayed || json.Unmarshal(rep.Result, &again) != nil || again.ExitCode != 0 || again.StdoutBytes != 2 {
		t.Fatalf("retry of count-once after the restart: %+v (%s); want the replayed outcome", rep, rep.Result)
	}
	if res, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Argv: []string{"wc", "-l", "count"}}); err != nil || !strings.HasPrefix(res.Stdout, "1 ") {
		t.Fatalf("count after the retry = %q, %v; want 1 line: the command ran once", res.Stdout, err)
	}
	if running, err := st.Client.Running(ctx, stopped.SessionID); err != nil || running {
		t.Fatalf("stopped session after reattach: running=%v, %v; want false", running, err)
	}
	if err := st.Client.Start(ctx, stopped.SessionID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{s.SessionID, stopped.SessionID} {
		if err := st.Client.Shutdown(ctx, id); err != nil {
			t.Fatal(err)
		}
		evs, err := st.Log.Session(ctx, "default", id)
		if err != nil {
			t.Fatal(err)
		}
		state, err := projection.Fold(evs)
		if err != nil || state.Status != projection.StatusShutDown {
			t.Fatalf("session %s folds to %s, %v; want shut_down and a consistent history", id, state.Status, err)
		}
		checkHashChain(t, st.Log, "default", id)
	}
}

// TestDockerReaper: a labelled container of this node that no session
// owns is removed once it is older than the grace period; a live session's
// container is not.
func TestDockerReaper(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	node := "reaper-" + uuid.NewString()[:8]
	rt := dockerRuntime(t, node)
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	ctx := testenv.Context(t, 2*time.Minute)
	startAgent(t, st, nodes.Config{ID: node, ReapGrace: time.Millisecond, ReapInterval: 100 * time.Millisecond}, rt)

	live, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image})
	if err != nil {
		t.Fatal(err)
	}
	// An orphan: a container with this node's labels that no session's
	// events mention (as a crashed create or a foreign tool would leave).
	orphanID := uuid.NewString()
	orphan, err := rt.Create(ctx, runtime.Spec{Tenant: "default", SessionID: orphanID, Node: node, Epoch: 1, Image: image})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		found, err := rt.FindSandboxes(ctx)
		if err != nil {
			return err
		}
		for _, fd := range found {
			if fd.SessionID == orphanID {
				return fmt.Errorf("orphan %s not reaped yet", orphanID)
			}
		}
		return nil
	})
	if running, err := orphan.Running(ctx); err != nil || running {
		t.Fatalf("reaped orphan: running=%v, %v", running, err)
	}
	res, err := st.Client.Exec(ctx, live.SessionID, commands.ExecArgs{Argv: []string{"echo", "alive"}})
	if err != nil || string(res.Stdout) != "alive\n" {
		t.Fatalf("live session after reaping = %q, %v", res.Stdout, err)
	}
	if err := st.Client.Shutdown(ctx, live.SessionID); err != nil {
		t.Fatal(err)
	}
}

// TestDockerReattachAfterResume: a session re-created by resume (epoch 2,
// a new container) is reattached by a restarted node at its new epoch,
// not reaped as an orphan.
func TestDockerReattachAfterResume(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	node := "reres-" + uuid.NewString()[:8]
	rt := dockerRuntime(t, node)
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	ctx := testenv.Context(t, 2*time.Minute)
	cfg := nodes.Config{ID: node, ReapGrace: time.Millisecond, ReapInterval: 50 * time.Millisecond}
	first := startAgent(t, st, cfg, rt)
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.WriteFile(ctx, s.SessionID, "f.txt", []byte("epoch one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.Persist(ctx, s.SessionID); err != nil {
		t.Fatal(err)
	}
	if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
		t.Fatal(err)
	}
	if res, err := st.Client.Resume(ctx, s.SessionID, nil); err != nil || res.Epoch != 2 {
		t.Fatalf("resume = %+v, %v", res, err)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	second := startAgent(t, st, cfg, rt)
	if got := second.Sessions(); len(got) != 1 {
		t.Fatalf("reattached %v, want the resumed session", got)
	}
	// The reattached session serves (and, held, is never the reaper's).
	testenv.Eventually(t, 10*time.Second, func() error {
		got, err := st.Client.ReadFile(ctx, s.SessionID, "f.txt")
		if err != nil {
			return err
		}
		if string(got) != "epoch one" {
			return fmt.Errorf("f.txt = %q", got)
		}
		return nil
	})
	found, err := rt.FindSandboxes(ctx)
	if err != nil || len(found) != 1 || found[0].Epoch != 2 {
		t.Fatalf("containers = %+v, %v; want the one at epoch 2", found, err)
	}
	if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
		t.Fatal(err)
	}
}
