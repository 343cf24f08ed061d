package nodes_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// TestDockerPoolThroughNode: through the whole path, a create that
// matches the node's warm pool claims a pooled sandbox and its finish
// event says so (pooled, claim time, supervisor connected); a create that
// does not match (other limits) is made cold; the node's heartbeats tell
// the scheduler how many pooled sandboxes are free; the session's
// variables and files work through the supervisor.
func TestDockerPoolThroughNode(t *testing.T) {
	pn := startPoolNode(t, "pool", 1)
	st, image := pn.st, pn.image
	ctx := testenv.Context(t, 2*time.Minute)
	poolFree := func() error { return pn.freeIs(1) }
	testenv.Eventually(t, time.Minute, poolFree)

	warm, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image, Env: map[string]string{"WHO": "warm"}})
	if err != nil {
		t.Fatal(err)
	}
	cold, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image, CPUs: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id     string
		pooled bool
	}{{warm.SessionID, true}, {cold.SessionID, false}} {
		var fin events.StatusFinish
		for _, ev := range sessionEvents(t, st, "default", c.id) {
			if ev.Op == string(commands.OpCreate) && ev.Phase == events.PhaseFinish {
				if err := json.Unmarshal(ev.Data, &fin); err != nil {
					t.Fatal(err)
				}
			}
		}
		if fin.Pooled != c.pooled || (c.pooled && fin.ClaimMS <= 0) || fin.Supervisor != "connected" {
			t.Errorf("create finish of %s: %+v; want pooled %v (with a claim time) and supervisor connected", c.id, fin.Made, c.pooled)
		}
	}
	res, err := st.Client.Exec(ctx, warm.SessionID, commands.ExecArgs{Shell: `echo "$WHO" > who.txt; cat who.txt`})
	if err != nil || string(res.Stdout) != "warm\n" {
		t.Errorf("exec in the pooled sandbox: %q, %v", res.Stdout, err)
	}
	if got, err := st.Client.ReadFile(ctx, warm.SessionID, "who.txt"); err != nil || string(got) != "warm\n" {
		t.Errorf("read in the pooled sandbox: %q, %v", got, err)
	}
	testenv.Eventually(t, time.Minute, poolFree) // refilled, and the heartbeat says so
	for _, id := range []string{warm.SessionID, cold.SessionID} {
		if err := st.Client.Delete(ctx, id); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
	}
}

// TestDockerSupervisorFallbackRecorded: a sandbox whose supervisor cannot
// start (here a binary that exits at once) works through the Docker API,
// and its create's finish event says so and why.
func TestDockerSupervisorFallbackRecorded(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	node := "fallback-" + uuid.NewString()[:8]
	bogus := filepath.Join(t.TempDir(), "paddock-supervisor")
	if err := os.WriteFile(bogus, []byte("exit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cli := testenv.DockerClient(t)
	rt, err := docker.New(docker.Config{Client: cli, Node: node, Supervisor: bogus,
		SupervisorDir: testenv.SupervisorDirFor(t, node), SupervisorWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.RemoveContainers(t, cli, docker.LabelNode+"="+node); rt.Close() })
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	ctx := testenv.Context(t, 2*time.Minute)
	startAgent(t, st, nodes.Config{ID: node}, rt)
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image})
	if err != nil {
		t.Fatal(err)
	}
	var fin events.StatusFinish
	for _, ev := range sessionEvents(t, st, "default", s.SessionID) {
		if ev.Op == string(commands.OpCreate) && ev.Phase == events.PhaseFinish {
			if err := json.Unmarshal(ev.Data, &fin); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !strings.HasPrefix(fin.Supervisor, "docker_api: the supervisor did not connect") {
		t.Errorf("create finish: supervisor %q, want docker_api and why", fin.Supervisor)
	}
	res, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: "echo through the daemon"})
	if err != nil || string(res.Stdout) != "through the daemon\n" {
		t.Errorf("exec: %q, %v", res.Stdout, err)
	}
	if err := st.Client.Delete(ctx, s.SessionID); err != nil {
		t.Error(err)
	}
}

// poolNode is a Docker node with a warm pool of the base image, alone on
// a stack of its own.
type poolNode struct {
	st          *testenv.Stack
	rt          *docker.Runtime
	node, image string
}

// startPoolNode starts a node named prefix-<random> whose pool keeps size
// sandboxes ready, and returns without waiting for them.
func startPoolNode(t *testing.T, prefix string, size int) *poolNode {
	t.Helper()
	return startPoolNodeWith(t, prefix, size, nodes.Config{})
}

// startPoolNodeWith is startPoolNode with cfg's node settings (its ID and
// heartbeat are the helper's).
func startPoolNodeWith(t *testing.T, prefix string, size int, cfg nodes.Config) *poolNode {
	t.Helper()
	pn := &poolNode{image: testenv.SandboxBaseImage(t), node: prefix + "-" + uuid.NewString()[:8]}
	pn.rt = dockerRuntime(t, pn.node)
	pn.st = testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	if err := pn.rt.StartPools(testenv.Context(t, time.Minute), docker.PoolConfig{Pools: []docker.PoolSpec{{Image: pn.image, Size: size}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pn.rt.Close() })
	cfg.ID, cfg.HeartbeatInterval = pn.node, 100*time.Millisecond
	startAgent(t, pn.st, cfg, pn.rt)
	return pn
}

// freeIs says whether the scheduler sees want pooled sandboxes free on
// the node, from its heartbeats.
func (pn *poolNode) freeIs(want int) error {
	for _, n := range pn.st.Scheduler.Nodes() {
		if n.Node == pn.node {
			if n.Pools[pn.image] != want {
				return fmt.Errorf("the scheduler sees %d free pooled sandboxes on the node, want %d", n.Pools[pn.image], want)
			}
			return nil
		}
	}
	return fmt.Errorf("the scheduler does not know node %s yet", pn.node)
}
