package nodes_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/egress"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// gvisorRuntime is dockerRuntime under gVisor's runsc (agent-node
// --runtime gvisor).
func gvisorRuntime(t *testing.T, node string) *docker.Runtime {
	t.Helper()
	return newDockerRuntime(t, docker.Config{Node: node, GVisor: testenv.GVisorRuntime(t)})
}

// TestGVisorNode: a node serving the gvisor runtime advertises it, creates
// sessions that report it and run on gVisor's kernel, persists and
// restores their workspace, reattaches them after a restart, and refuses
// with policy_denied what gVisor's netstack cannot serve here: a network
// of the sandbox's own (TestGVisorEgressAndPorts has the allow list and
// exposed ports, which the supervisor tunnels).
func TestGVisorNode(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	node := "gvisor-" + uuid.NewString()[:8]
	rt := gvisorRuntime(t, node)
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	ctx := testenv.Context(t, 3*time.Minute)
	first := startAgent(t, st, nodes.Config{ID: node}, rt)

	if _, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image}); !errors.Is(err, errcode.ErrNoCapacity) {
		t.Errorf("create on docker with only a gvisor node: %v; want no_capacity", err)
	}
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "gvisor", Image: image})
	if err != nil {
		t.Fatal(err)
	}
	if s.Runtime != docker.NameGVisor || s.Node != node {
		t.Errorf("create = %+v; want runtime gvisor on %s", s, node)
	}
	res, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: "uname -r; echo hi > notes.txt"})
	if err != nil || strings.TrimSpace(res.Stdout) != docker.GVisorKernel {
		t.Fatalf("uname -r = %q, %v; want gVisor's %s", res.Stdout, err, docker.GVisorKernel)
	}
	// A create naming no runtime gets the node's only one.
	other, err := st.Client.Create(ctx, commands.CreateArgs{Image: image})
	if err != nil || other.Runtime != docker.NameGVisor {
		t.Errorf("create with no runtime = %+v, %v; want gvisor", other, err)
	}

	for what, spec := range map[string]commands.CreateArgs{
		"network":     {Runtime: "gvisor", Image: image, Network: true},
		"egress open": {Runtime: "gvisor", Image: image, Egress: &commands.Egress{Mode: egress.ModeOpen}},
	} {
		if _, err := st.Client.Create(ctx, spec); !errors.Is(err, errcode.ErrPolicyDenied) {
			t.Errorf("create with %s: %v; want policy_denied", what, err)
		}
	}

	snap, err := st.Client.Persist(ctx, s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	second := startAgent(t, st, nodes.Config{ID: node}, rt)
	if got := second.Sessions(); len(got) != 2 {
		t.Fatalf("reattached %v, want both sessions", got)
	}
	if res, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: "rm notes.txt; uname -r"}); err != nil || strings.TrimSpace(res.Stdout) != docker.GVisorKernel {
		t.Fatalf("exec after reattach = %q, %v", res.Stdout, err)
	}
	if _, err := st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: snap.ID}); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Client.ReadFile(ctx, s.SessionID, "notes.txt"); err != nil || string(got) != "hi\n" {
		t.Errorf("notes.txt after the restore = %q, %v", got, err)
	}
	for _, id := range []string{s.SessionID, other.SessionID} {
		if err := st.Client.Shutdown(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGVisorNodeProcesses is TestProcesses (an interactive shell on a
// terminal, ^C, resizes, floods, signals, secrets) on the gvisor runtime
// through a real node.
func TestGVisorNodeProcesses(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	node := "gvprocs-" + uuid.NewString()[:8]
	rt := gvisorRuntime(t, node)
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	startAgent(t, st, nodes.Config{ID: node, ProcBufferBytes: 64 << 10, MaxProcesses: 4}, rt)
	ctx := testenv.Context(t, 3*time.Minute)
	cr, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "gvisor", Image: image, SecretEnv: map[string]string{"TOKEN": "hunter22"}})
	if err != nil {
		t.Fatal(err)
	}
	testProcesses(t, ctx, st, cr.SessionID, node)
	if err := st.Client.Delete(ctx, cr.SessionID); err != nil {
		t.Fatal(err)
	}
}
