package nodes_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime/runsc"
	"github.com/paddock-dev/paddock/testenv"
)

// TestRunscNode: a node serving the runsc runtime (agent-node --runtime
// runsc) advertises it, so that the scheduler places a create asking for
// runsc on it and refuses one asking for docker; the session runs on
// gVisor's kernel and its files round-trip through the node.
func TestRunscNode(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	node := "runsc-" + uuid.NewString()[:8]
	rt := testenv.RunscRuntime(t, t.TempDir(), node)
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	ctx := testenv.Context(t, 3*time.Minute)
	startAgent(t, st, nodes.Config{ID: node}, rt)

	if _, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image}); !errors.Is(err, errcode.ErrNoCapacity) {
		t.Errorf("create on docker with only a runsc node: %v; want no_capacity", err)
	}
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: runsc.Name, Image: image})
	if err != nil {
		t.Fatal(err)
	}
	if s.Runtime != runsc.Name || s.Node != node {
		t.Errorf("create = %+v; want runtime runsc on %s", s, node)
	}
	res, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: "uname -r; echo hi > notes.txt"})
	if err != nil || strings.TrimSpace(res.Stdout) != "4.4.0" {
		t.Fatalf("uname -r = %q, %v; want gVisor's 4.4.0", res.Stdout, err)
	}
	if got, err := st.Client.ReadFile(ctx, s.SessionID, "notes.txt"); err != nil || string(got) != "hi\n" {
		t.Errorf("notes.txt = %q, %v", got, err)
	}
	if err := st.Client.Delete(ctx, s.SessionID); err != nil {
		t.Fatal(err)
	}
}
