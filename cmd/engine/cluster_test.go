package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/testenv"
)

// TestServeOnCluster: `engine serve --nats-url` on a 3-server cluster with
// --replicas 3 keeps the events stream, the projection's buckets and the
// workspace bucket at three replicas, and sessions go on working when one
// server is killed and comes back.
func TestServeOnCluster(t *testing.T) {
	c := testenv.StartCluster(t, 3, broker.Config{})
	url := c.URL()
	serveFor(t, "--nats-url", url, "--replicas", "3", "--state-dir", t.TempDir(), "--node-id", "n1", "--runtime", "local")
	t.Setenv("PADDOCK_CREDS", "none") // the cluster runs without auth here
	id := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create"))
	mustCLI(t, url, "hello", "sandbox", "write", id, "a.txt")
	mustCLI(t, url, "", "sandbox", "persist", id)

	js := testenv.JetStream(t, testenv.Connect(t, url))
	ctx := testenv.Context(t, time.Minute)
	for _, name := range []string{"SBX_EVENTS", "KV_sbx_sessions", "KV_sbx_nodes", "OBJ_sbx_workspaces"} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("stream %s has %d replicas, want 3", name, r)
		}
	}

	waitProjected(t, url)
	var rep statusReport
	if err := json.Unmarshal([]byte(mustCLI(t, url, "", "status", "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Streams {
		current := 0
		for _, f := range s.Followers {
			if f.Current {
				current++
			}
		}
		if s.Missing || s.Replicas != 3 || s.Leader == "" || current != 2 {
			t.Errorf("status of %s: %+v; want 3 replicas, a leader and two current followers", s.Name, s)
		}
	}
	if len(rep.Nodes) != 1 || rep.Nodes[0].Node != "n1" || rep.Nodes[0].Status != "up" || len(rep.Projectors) != 1 || rep.Projectors[0].Lag != 0 {
		t.Errorf("status: nodes %+v, projectors %+v; want n1 up and one projector caught up", rep.Nodes, rep.Projectors)
	}
	if out := mustCLI(t, url, "", "status"); !strings.Contains(out, "SBX_EVENTS") || !strings.Contains(out, "n1") {
		t.Errorf("engine status:\n%s", out)
	}
	if out := mustCLI(t, url, "", "audit", "verify"); !strings.Contains(out, "0 failures") {
		t.Fatalf("audit verify:\n%s", out)
	}

	c.Stop(0)
	testenv.Eventually(t, 60*time.Second, func() error {
		code, out, errs := cli(t, url, "", "sandbox", "exec", id, "--", "cat", "a.txt")
		if code != 0 || out != "hello" {
			return fmt.Errorf("exec with a server down: exit %d, %q, %s", code, out, errs)
		}
		return nil
	})
	c.Restart(0)
	c.WaitJetStream(60 * time.Second)
	if out := mustCLI(t, url, "", "sandbox", "exec", id, "--", "cat", "a.txt"); out != "hello" {
		t.Fatalf("exec after the server came back: %q", out)
	}
	// Not yet: the CLI's readers (projector status, audit verify) right
	// after a server came back can time out; issue 12 makes them wait for
	// the stream within a bound.
}
