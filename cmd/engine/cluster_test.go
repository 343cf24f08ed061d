package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/operator"
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
	// A reader of the projection leaves the buckets' replicas as they are.
	mustCLI(t, url, "", "replay", "--verify")
	var rep operator.Report
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
	if rep.Cluster != "paddock-test" || rep.Connected == "" || len(rep.Servers) != 3 {
		t.Errorf("status: connected to %q of cluster %q, servers %+v; want one of the 3 servers of paddock-test", rep.Connected, rep.Cluster, rep.Servers)
	}
	for _, s := range rep.Servers {
		if s.Offline {
			t.Errorf("status: server %s offline with all three up", s.Name)
		}
	}
	if out := mustCLI(t, url, "", "status"); !strings.Contains(out, "SBX_EVENTS") || !strings.Contains(out, "n1") || !strings.Contains(out, "of cluster paddock-test") {
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
	// The readers, right after the server came back, wait for the stream
	// (within --wait) instead of failing on the first timeout.
	testenv.Eventually(t, time.Minute, func() error {
		if code, out, errs := cli(t, url, "", "audit", "verify"); code != 0 || !strings.Contains(out, "0 failures") {
			return fmt.Errorf("audit verify right after a server came back: exit %d\n%s%s", code, out, errs)
		}
		return nil
	})
	// replay --verify reads the projection's buckets: right after a server
	// came back a read can miss records a moment later read finds
	// (docs/faults.md, "What it found"), so it gets a few reads.
	testenv.Eventually(t, time.Minute, func() error {
		if code, out, errs := cli(t, url, "", "replay", "--verify"); code != 0 {
			return fmt.Errorf("replay --verify: exit %d\n%s%s", code, out, errs)
		}
		return nil
	})
}

// TestClusterBalance: on a 3-server cluster whose three event partitions
// all have their leader on s1, `engine cluster balance --json` moves two
// of them and leaves three leaders on three servers; a second run moves
// none.
func TestClusterBalance(t *testing.T) {
	c := testenv.StartCluster(t, 3, broker.Config{})
	url := c.URL()
	t.Setenv("PADDOCK_CREDS", "none") // the cluster runs without auth here
	js := testenv.JetStream(t, testenv.Connect(t, url))
	ctx := testenv.Context(t, 3*time.Minute)
	log := testenv.PartitionedLog(t, js, 3)
	// Gather, balance, check; again if the loaded machine held an election
	// of its own in between.
	testenv.Eventually(t, 2*time.Minute, func() error {
		if err := testenv.GatherLeaders(ctx, js, log, "s1"); err != nil {
			return err
		}
		code, out, errs := cli(t, url, "", "cluster", "balance", "--json")
		if code != 0 {
			return fmt.Errorf("cluster balance: exit %d, stderr %q", code, errs)
		}
		var res clusterBalanceResult
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("cluster balance printed %q: %v", out, err)
		}
		distinct := map[string]bool{}
		for _, l := range res.Leaders {
			distinct[l] = true
		}
		if len(res.Moves) < 2 || len(distinct) != 3 || len(res.Streams) != 3 {
			return fmt.Errorf("cluster balance from all-on-s1: %+v; want 2 moves or more and three leaders on three servers", res)
		}
		if again := mustCLI(t, url, "", "cluster", "balance", "--json"); !strings.Contains(again, `"moves": null`) && !strings.Contains(again, `"moves":null`) {
			return fmt.Errorf("second balance: %s; want no moves", again)
		}
		return nil
	})
}
