package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/operator"
	"github.com/paddock-dev/paddock/testenv"
)

// TestPlacementAndDrainFiveNodes: on five nodes with labels, creates go
// only to nodes that carry the labels they ask and spread by load; a
// label no node has is no_capacity; a cordoned node takes nothing until
// uncordoned; and draining a node moves every session off it (running
// ones running, stopped ones stopped, workspaces kept, node labels
// honoured), after which the history audits clean.
func TestPlacementAndDrainFiveNodes(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	testenv.StartProjector(t, st.JS)
	url := st.Broker.ClientURL()
	labels := map[string]map[string]string{
		"n1": {"zone": "a"}, "n2": {"zone": "a"},
		"n3": {"zone": "b"}, "n4": {"zone": "b"}, "n5": {"zone": "b", "gpu": "yes"},
	}
	agents := map[string]*nodes.Agent{}
	for _, id := range []string{"n1", "n2", "n3", "n4", "n5"} {
		agents[id] = testenv.StartAgent(t, url, nodes.Config{ID: id, Capacity: 6, Labels: labels[id], HeartbeatInterval: 200 * time.Millisecond})
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		if n := len(st.Scheduler.Nodes()); n != 5 {
			return fmt.Errorf("scheduler knows %d nodes", n)
		}
		return nil
	})
	where := map[string]string{} // session → node
	create := func(args ...string) string {
		t.Helper()
		out := mustCLI(t, url, "", append([]string{"sandbox", "create", "--runtime", "local", "--json"}, args...)...)
		var res struct {
			SessionID string `json:"session_id"`
			Node      string `json:"node"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("create output %q: %v", out, err)
		}
		where[res.SessionID] = res.Node
		return res.SessionID
	}
	count := func() map[string]int {
		c := map[string]int{}
		for _, n := range where {
			c[n]++
		}
		return c
	}

	var zoneA []string
	for range 4 {
		id := create("--node-label", "zone=a")
		if n := where[id]; n != "n1" && n != "n2" {
			t.Fatalf("zone=a session placed on %s", n)
		}
		zoneA = append(zoneA, id)
	}
	// Spread by load: the scheduler counts its placements on top of each
	// node's last heartbeat, and a heartbeat sent just before a placement
	// can undo that count for a moment, so the spread is even within one.
	if c := count(); c["n1"] < 1 || c["n2"] < 1 {
		t.Fatalf("zone=a sessions by node %v; want them on both n1 and n2", c)
	}
	for range 2 {
		if id := create("--node-label", "gpu=yes", "--node-label", "zone=b"); where[id] != "n5" {
			t.Fatalf("gpu session placed on %s, want n5", where[id])
		}
	}
	code, _, errs := cli(t, url, "", "sandbox", "create", "--runtime", "local", "--node-label", "zone=c")
	if code == 0 || !strings.Contains(errs, "no_capacity") || !strings.Contains(errs, "zone=c") {
		t.Fatalf("create with a label no node has: exit %d, %q; want no_capacity naming the label", code, errs)
	}
	for range 6 {
		create()
	}
	c := count()
	lo, hi := 6, 0
	for _, id := range []string{"n1", "n2", "n3", "n4", "n5"} {
		lo, hi = min(lo, c[id]), max(hi, c[id])
	}
	if hi-lo > 2 {
		t.Fatalf("sessions by node %v; want them spread by load", c)
	}

	// Cordon: n3 takes nothing until uncordoned.
	mustCLI(t, url, "", "node", "cordon", "n3")
	testenv.Eventually(t, 10*time.Second, func() error {
		if out := mustCLI(t, url, "", "node", "list"); !strings.Contains(out, "cordoned") {
			return fmt.Errorf("node list:\n%s", out)
		}
		return nil
	})
	for range 2 {
		if id := create("--node-label", "zone=b"); where[id] == "n3" {
			t.Fatal("a create was placed on cordoned n3")
		}
	}
	mustCLI(t, url, "", "node", "uncordon", "n3")

	// Drain n1: one stopped session and a file to follow.
	ctx := testenv.Context(t, 2*time.Minute)
	var onN1, all []string
	for _, id := range zoneA {
		if where[id] == "n1" {
			onN1 = append(onN1, id)
		}
	}
	for id, n := range where {
		if n == "n1" {
			all = append(all, id)
		}
	}
	if _, err := st.Client.WriteFile(ctx, onN1[0], "notes.md", []byte("moved\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := st.Client.Stop(ctx, onN1[1]); err != nil {
		t.Fatal(err)
	}
	// The projection must know what n1 holds before drain reads it.
	testenv.Eventually(t, 10*time.Second, func() error {
		out := mustCLI(t, url, "", "sandbox", "inspect", onN1[1], "--json")
		if !strings.Contains(out, `"stopped"`) {
			return fmt.Errorf("inspect: %s", out)
		}
		return nil
	})
	out := mustCLI(t, url, "", "node", "drain", "n1", "--json")
	var rows []operator.DrainRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("drain output %q: %v", out, err)
	}
	if len(rows) != len(all) {
		t.Fatalf("drain moved %d sessions, want %d: %s", len(rows), len(all), out)
	}
	for _, r := range rows {
		if r.Outcome != "moved" || r.Node == "n1" || slices.Contains(onN1, r.Session) && r.Node != "n2" {
			t.Fatalf("drain row %+v; want moved off n1, a zone=a session to n2 (the only other zone=a node)", r)
		}
	}
	if held := agents["n1"].Sessions(); len(held) != 0 {
		t.Fatalf("n1 still serves %v after its drain", held)
	}
	if got, err := st.Client.ReadFile(ctx, onN1[0], "notes.md"); err != nil || string(got) != "moved\n" {
		t.Fatalf("notes.md after the drain = %q, %v", got, err)
	}
	if l, err := st.Client.Lookup(ctx, onN1[1]); err != nil || l.Status != "stopped" || l.Node != "n2" {
		t.Fatalf("the stopped session after the drain: %+v, %v; want stopped on n2", l, err)
	}
	if l, err := st.Client.Lookup(ctx, onN1[0]); err != nil || l.Status != "running" || l.Node != "n2" {
		t.Fatalf("the running session after the drain: %+v, %v; want running on n2", l, err)
	}
	var list []operator.NodeRow
	if err := json.Unmarshal([]byte(mustCLI(t, url, "", "node", "list", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(list, func(r operator.NodeRow) bool { return r.Node == "n1" })
	if i < 0 || !list[i].Cordoned || list[i].Sessions != 0 {
		t.Fatalf("n1 in node list: %+v; want cordoned with no sessions", list)
	}
	if code, out, errs := cli(t, url, "", "audit", "verify"); code != 0 {
		t.Fatalf("audit verify after placement and drain: exit %d\n%s%s", code, out, errs)
	}
}

// TestNodeCommandsBadInput: node commands refuse what they cannot do,
// with typed errors and no hang.
func TestNodeCommandsBadInput(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	url := st.Broker.ClientURL()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"node"}, "list, cordon"},
		{[]string{"node", "explode"}, "unknown node command"},
		{[]string{"node", "cordon"}, "takes a node id"},
		{[]string{"node", "cordon", "a.b"}, "invalid_request"},
		{[]string{"node", "drain", "ghost"}, "does not answer"},
		{[]string{"node", "uncordon", "ghost"}, "does not answer"},
	} {
		code, _, errs := cli(t, url, "", c.args...)
		if code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("engine %s: exit %d, %q; want a failure saying %q", strings.Join(c.args, " "), code, errs, c.want)
		}
	}
}
