package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/scheduler"
	"github.com/paddock-dev/paddock/testenv"
)

// env is a scheduler of its own config on a fresh broker, and a test
// connection that publishes heartbeats and plays fake nodes.
type env struct {
	sched  *scheduler.Scheduler
	engine *nats.Conn // the scheduler's connection
	nc     *nats.Conn // the test's: heartbeats, fake nodes, raw requests
	client *client.Client
	subj   commands.Subjects
	marks  atomic.Int64
}

func startScheduler(t *testing.T, cfg scheduler.Config) *env {
	t.Helper()
	ctx := testenv.Context(t, 20*time.Second)
	b := testenv.StartBroker(t)
	engine, err := b.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(engine.Close)
	js := testenv.JetStream(t, engine)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(engine, events.NewLog(js, "", ""), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	nc := testenv.Connect(t, b.ClientURL())
	c, err := client.New(testenv.Connect(t, b.ClientURL()), client.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &env{sched: s, engine: engine, nc: nc, client: c}
}

// beat publishes a heartbeat for info.Node on its own subject.
func (e *env) beat(t *testing.T, info nodes.Info) {
	t.Helper()
	b, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.nc.Publish(e.subj.Heartbeat(info.Node), b); err != nil {
		t.Fatal(err)
	}
}

// sync publishes a marker heartbeat (a full node, never chosen) after
// whatever the test published before, and waits until the scheduler has
// taken it in: one publisher's messages reach a subscriber in order, so
// every earlier heartbeat has been handled too.
func (e *env) sync(t *testing.T) {
	t.Helper()
	mark := fmt.Sprintf("zz-marker-%d", e.marks.Add(1))
	e.beat(t, nodes.Info{Node: mark, Runtimes: []string{"local", "docker"}, Capacity: 1, Sessions: 1, Status: "up"})
	testenv.Eventually(t, 10*time.Second, func() error {
		if !slices.Contains(nodeIDs(e.sched), mark) {
			return fmt.Errorf("scheduler has not seen %s yet", mark)
		}
		return nil
	})
}

func nodeIDs(s *scheduler.Scheduler) []string {
	var ids []string
	for _, n := range s.Nodes() {
		ids = append(ids, n.Node)
	}
	return ids
}

// placed is what a fake node received.
type placed struct {
	req       commands.Request
	placement commands.Placement
}

// fakeNode answers creates on node id's subject as a node would, and
// reports each placement it got.
func (e *env) fakeNode(t *testing.T, id string) <-chan placed {
	t.Helper()
	got := make(chan placed, 16)
	sub, err := e.nc.Subscribe(e.subj.Node(id, "create"), func(m *nats.Msg) {
		var p commands.Placement
		req, err := commands.DecodeRequest(m.Data, &p)
		if err != nil {
			_ = m.Respond(commands.ErrorReply(err))
			return
		}
		got <- placed{req, p}
		b, _ := commands.ResultReply(commands.CreateResult{SessionID: p.SessionID, Node: id, Runtime: p.Spec.Runtime, Status: "running"})
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return got
}

func up(id string, capacity, sessions int, runtimes ...string) nodes.Info {
	if len(runtimes) == 0 {
		runtimes = []string{"local"}
	}
	return nodes.Info{Node: id, Runtimes: runtimes, Capacity: capacity, Sessions: sessions, Status: "up", TS: time.Now().UTC()}
}

func draining(info nodes.Info) nodes.Info { info.Status = "draining"; return info }

// diskAt gives a node's heartbeat a disk at level.
func diskAt(info nodes.Info, level string) nodes.Info {
	info.Disks = []events.DiskStatus{{Path: "/var/lib/docker", Free: 1 << 20, Total: 1 << 30, Level: level}}
	return info
}

// pooled gives a node's heartbeat free warm-pool sandboxes of image.
func pooled(info nodes.Info, image string, free int) nodes.Info {
	info.Pools = map[string]int{image: free}
	return info
}

// TestPlacement: a create goes to the node that is up, offers the
// requested runtime, has room, and holds the smallest share of its
// capacity; the node gets the placement in the scheduler's contract
// version.
func TestPlacement(t *testing.T) {
	cases := []struct {
		name    string
		runtime string
		beats   []nodes.Info
		want    string
	}{
		{"least loaded by share of capacity", "", []nodes.Info{up("a", 10, 5), up("b", 100, 10)}, "b"},
		{"requested runtime", "docker", []nodes.Info{up("a", 10, 0, "local"), up("b", 10, 8, "local", "docker")}, "b"},
		{"any runtime takes the least loaded", "", []nodes.Info{up("a", 10, 0, "local"), up("b", 10, 8, "local", "docker")}, "a"},
		{"full node skipped", "", []nodes.Info{up("a", 2, 2), up("b", 10, 9)}, "b"},
		{"draining node skipped", "", []nodes.Info{draining(up("a", 10, 0)), up("b", 10, 5)}, "b"},
		{"node with a critical disk skipped", "", []nodes.Info{diskAt(up("a", 10, 0), "critical"), up("b", 10, 5)}, "b"},
		{"a disk low but not critical is no reason", "", []nodes.Info{diskAt(up("a", 10, 0), "warn"), up("b", 10, 5)}, "a"},
		{"node back after its disk was freed", "", []nodes.Info{diskAt(up("a", 10, 0), "critical"), up("b", 10, 5), diskAt(up("a", 10, 0), "ok")}, "a"},
		{"node back up after draining", "", []nodes.Info{draining(up("a", 10, 0)), up("b", 10, 5), up("a", 10, 0)}, "a"},
		{"latest heartbeat counts", "", []nodes.Info{up("a", 10, 0), up("b", 10, 1), up("a", 10, 9)}, "b"},
		{"a free pooled sandbox first", "docker", []nodes.Info{up("a", 10, 0, "docker"), pooled(up("b", 10, 8, "docker"), commands.DefaultImage, 1)}, "b"},
		{"a pool of another image does not count", "docker", []nodes.Info{up("a", 10, 0, "docker"), pooled(up("b", 10, 8, "docker"), "other:1", 3)}, "a"},
		{"an empty pool does not count", "docker", []nodes.Info{up("a", 10, 0, "docker"), pooled(up("b", 10, 8, "docker"), commands.DefaultImage, 0)}, "a"},
		{"pooled nodes by load", "docker", []nodes.Info{pooled(up("a", 10, 5, "docker"), commands.DefaultImage, 1), pooled(up("b", 10, 2, "docker"), commands.DefaultImage, 1), up("c", 10, 0, "docker")}, "b"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := startScheduler(t, scheduler.Config{WaitForNode: 200 * time.Millisecond})
			got := map[string]<-chan placed{}
			for _, b := range tc.beats {
				if got[b.Node] == nil {
					got[b.Node] = e.fakeNode(t, b.Node)
				}
				e.beat(t, b)
			}
			e.sync(t)
			ctx := testenv.Context(t, 10*time.Second)
			res, err := e.client.Create(ctx, commands.CreateArgs{Runtime: tc.runtime, Labels: map[string]string{"case": "x"}})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			if res.Node != tc.want {
				t.Fatalf("placed on %q, want %q", res.Node, tc.want)
			}
			p := <-got[tc.want]
			if p.req.Version != commands.Version {
				t.Errorf("node got version %q, want %q", p.req.Version, commands.Version)
			}
			if p.placement.Tenant != "default" || p.placement.SessionID != res.SessionID {
				t.Errorf("node got tenant %q session %q, want default %q", p.placement.Tenant, p.placement.SessionID, res.SessionID)
			}
			if p.placement.Spec.Runtime != tc.runtime || p.placement.Spec.Labels["case"] != "x" {
				t.Errorf("node got spec %+v, want runtime %q and the labels", p.placement.Spec, tc.runtime)
			}
		})
	}
}

// TestNoCapacity: with no suitable node the create waits WaitForNode and
// fails with no_capacity.
func TestNoCapacity(t *testing.T) {
	cases := []struct {
		name    string
		runtime string
		beats   []nodes.Info
	}{
		{"no node", "", nil},
		{"only full nodes", "", []nodes.Info{up("a", 1, 1), up("b", 3, 4)}},
		{"only draining nodes", "", []nodes.Info{draining(up("a", 10, 0))}},
		{"only nodes with a critical disk", "", []nodes.Info{diskAt(up("a", 10, 0), "critical")}},
		{"no node with the runtime", "docker", []nodes.Info{up("a", 10, 0, "local")}},
	}
	const wait = 300 * time.Millisecond
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := startScheduler(t, scheduler.Config{WaitForNode: wait})
			for _, b := range tc.beats {
				e.fakeNode(t, b.Node)
				e.beat(t, b)
			}
			e.sync(t)
			ctx := testenv.Context(t, 10*time.Second)
			begin := time.Now()
			res, err := e.client.Create(ctx, commands.CreateArgs{Runtime: tc.runtime})
			took := time.Since(begin)
			if !errors.Is(err, errcode.ErrNoCapacity) {
				t.Fatalf("create = %+v, %v; want no_capacity", res, err)
			}
			if took < wait {
				t.Errorf("no_capacity after %s, want after waiting %s for a node", took, wait)
			}
			if !errcode.NoCapacity.Retryable() {
				t.Errorf("no_capacity is not retryable")
			}
		})
	}
}

// TestNodeArrivesDuringWait: a create that finds no node is placed on one
// that heartbeats within WaitForNode.
func TestNodeArrivesDuringWait(t *testing.T) {
	e := startScheduler(t, scheduler.Config{WaitForNode: time.Minute})
	e.fakeNode(t, "late")
	ctx := testenv.Context(t, 30*time.Second)
	type outcome struct {
		res commands.CreateResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := e.client.Create(ctx, commands.CreateArgs{})
		done <- outcome{res, err}
	}()
	var o outcome
	testenv.Eventually(t, 20*time.Second, func() error {
		e.beat(t, up("late", 10, 0))
		select {
		case o = <-done:
			return nil
		default:
			return errors.New("create not answered yet")
		}
	})
	if o.err != nil || o.res.Node != "late" {
		t.Fatalf("create = %+v, %v; want placed on late", o.res, o.err)
	}
}

// TestNodeTTL: a node that stops heartbeating drops out after NodeTTL and
// is not chosen, though it is the least loaded and still answers.
func TestNodeTTL(t *testing.T) {
	// The TTL is long enough for the first check to see quiet on a loaded
	// machine, and short enough to wait for.
	e := startScheduler(t, scheduler.Config{NodeTTL: time.Second, WaitForNode: 200 * time.Millisecond})
	e.fakeNode(t, "quiet")
	e.fakeNode(t, "alive")
	e.beat(t, up("quiet", 10, 0))
	e.beat(t, up("alive", 10, 9))
	e.sync(t)
	if ids := nodeIDs(e.sched); !slices.Contains(ids, "quiet") {
		t.Fatalf("nodes = %v, want quiet among them at first", ids)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		e.beat(t, up("alive", 10, 9))
		ids := nodeIDs(e.sched)
		if slices.Contains(ids, "quiet") || !slices.Contains(ids, "alive") {
			return fmt.Errorf("nodes = %v, want alive and not quiet", ids)
		}
		return nil
	})
	res, err := e.client.Create(testenv.Context(t, 10*time.Second), commands.CreateArgs{})
	if err != nil || res.Node != "alive" {
		t.Fatalf("create = %+v, %v; want placed on alive", res, err)
	}
}

// TestGoneNodeForgotten: a node whose create subject has no responders is
// forgotten and the create goes to another node.
func TestGoneNodeForgotten(t *testing.T) {
	e := startScheduler(t, scheduler.Config{WaitForNode: 200 * time.Millisecond})
	e.fakeNode(t, "live")
	e.beat(t, up("gone", 10, 0)) // least loaded, but nothing serves it
	e.beat(t, up("live", 10, 5))
	e.sync(t)
	res, err := e.client.Create(testenv.Context(t, 10*time.Second), commands.CreateArgs{})
	if err != nil || res.Node != "live" {
		t.Fatalf("create = %+v, %v; want placed on live", res, err)
	}
	if ids := nodeIDs(e.sched); slices.Contains(ids, "gone") {
		t.Fatalf("nodes = %v, want gone forgotten", ids)
	}
}

// TestBadHeartbeatsIgnored: heartbeats that do not decode, name an
// invalid node or another node than their subject do not make a node.
func TestBadHeartbeatsIgnored(t *testing.T) {
	cases := []struct {
		name, subject, body string
	}{
		{"not JSON", "sbx.nodehb.x1", `not json`},
		{"wrong type", "sbx.nodehb.x2", `{"node":"x2","capacity":"ten","status":"up","runtimes":["local"]}`},
		{"empty node", "sbx.nodehb.x3", `{"node":"","capacity":10,"status":"up","runtimes":["local"]}`},
		{"invalid node", "sbx.nodehb.x4", `{"node":"a/b","capacity":10,"status":"up","runtimes":["local"]}`},
		{"another node than the subject", "sbx.nodehb.x5", `{"node":"x6","capacity":10,"status":"up","runtimes":["local"]}`},
		{"empty body", "sbx.nodehb.x7", ``},
	}
	e := startScheduler(t, scheduler.Config{WaitForNode: 200 * time.Millisecond})
	for _, id := range []string{"x1", "x2", "x3", "x4", "x5", "x6", "x7", "a/b"} {
		e.fakeNode(t, id)
	}
	for _, tc := range cases {
		if err := e.nc.Publish(tc.subject, []byte(tc.body)); err != nil {
			t.Fatal(err)
		}
	}
	e.sync(t)
	for _, id := range nodeIDs(e.sched) {
		if !strings.HasPrefix(id, "zz-marker-") {
			t.Errorf("node %q known from a bad heartbeat; want none of %d bad ones taken", id, len(cases))
		}
	}
	res, err := e.client.Create(testenv.Context(t, 10*time.Second), commands.CreateArgs{})
	if !errors.Is(err, errcode.ErrNoCapacity) {
		t.Fatalf("create = %+v, %v; want no_capacity", res, err)
	}
}

// TestInvalidRequests: bad tenants and malformed bodies on the
// scheduler's subjects are answered with their code and go nowhere.
func TestInvalidRequests(t *testing.T) {
	e := startScheduler(t, scheduler.Config{WaitForNode: 200 * time.Millisecond})
	long := strings.Repeat("t", commands.MaxTokenLen+1)
	cases := []struct {
		name, subject, body string
		want                errcode.Code
	}{
		{"tenant with a slash", "sbx.cmd.a/b.create", `{}`, errcode.InvalidRequest},
		{"tenant too long", "sbx.cmd." + long + ".lookup", `{"args":{"session_id":"s"}}`, errcode.InvalidRequest},
		{"tenant with a backslash", `sbx.cmd.a\b.resume`, `{"args":{"session_id":"s"}}`, errcode.InvalidRequest},
		{"malformed JSON", "sbx.cmd.t.create", `{`, errcode.InvalidRequest},
		{"trailing data", "sbx.cmd.t.create", `{}{}`, errcode.InvalidRequest},
		{"unknown envelope field", "sbx.cmd.t.create", `{"argz":{}}`, errcode.InvalidRequest},
		{"unknown args field", "sbx.cmd.t.lookup", `{"args":{"session_id":"s","extra":1}}`, errcode.InvalidRequest},
		{"wrong type", "sbx.cmd.t.create", `{"args":{"cpus":"two"}}`, errcode.InvalidRequest},
		{"not an object", "sbx.cmd.t.resume", `[]`, errcode.InvalidRequest},
		{"lookup without a session", "sbx.cmd.t.lookup", `{"args":{}}`, errcode.InvalidRequest},
		{"lookup of an invalid session id", "sbx.cmd.t.lookup", `{"args":{"session_id":"a>b"}}`, errcode.InvalidRequest},
		{"resume without a session", "sbx.cmd.t.resume", `{}`, errcode.InvalidRequest},
		{"invalid session id to create", "sbx.cmd.t.create", `{"args":{"session_id":"a b"}}`, errcode.InvalidRequest},
		{"bad command id", "sbx.cmd.t.create", `{"command_id":"a*b"}`, errcode.InvalidRequest},
		{"newer major version", "sbx.cmd.t.create", `{"version":"2.0"}`, errcode.UnsupportedVersion},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testenv.Context(t, 10*time.Second)
			m, err := e.nc.RequestWithContext(ctx, tc.subject, []byte(tc.body))
			if err != nil {
				t.Fatalf("request: %v", err)
			}
			var rep commands.Reply
			if err := json.Unmarshal(m.Data, &rep); err != nil {
				t.Fatalf("reply %q: %v", m.Data, err)
			}
			if rep.Error == nil {
				t.Fatalf("got result %s, want error %s", rep.Result, tc.want)
			}
			if rep.Error.Code != tc.want || rep.Error.Retryable {
				t.Fatalf("got %s (retryable %v): %s, want %s, not retryable", rep.Error.Code, rep.Error.Retryable, rep.Error.Message, tc.want)
			}
			if rep.Version != commands.Version {
				t.Errorf("reply version %q, want %q", rep.Version, commands.Version)
			}
		})
	}
}

// TestCloseWaitsForHandlers: Close returns only once the requests in
// flight have been answered, and a second Close is a no-op.
func TestCloseWaitsForHandlers(t *testing.T) {
	e := startScheduler(t, scheduler.Config{WaitForNode: time.Minute})
	reached := make(chan struct{}, 1)
	release := make(chan struct{})
	defer close(release)
	sub, err := e.nc.Subscribe(e.subj.Node("slow", "create"), func(m *nats.Msg) {
		reached <- struct{}{}
		<-release // never answers while the test looks
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	e.beat(t, up("slow", 10, 0))
	e.sync(t)

	// The reply and a marker published after Close on the scheduler's own
	// connection arrive in the order they were published.
	inbox := nats.NewInbox()
	replies, err := e.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(commands.Request{Version: commands.Version})
	if err := e.nc.PublishRequest("sbx.cmd.t.create", inbox, body); err != nil {
		t.Fatal(err)
	}
	select { // the create is in flight, forwarded to the slow node
	case <-reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the create did not reach the node")
	}
	e.sched.Close()
	if err := e.engine.Publish(inbox, []byte("marker")); err != nil {
		t.Fatal(err)
	}
	m, err := replies.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no reply: %v", err)
	}
	var rep commands.Reply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		t.Fatalf("first message after Close is %q, want the create's reply: %v", m.Data, err)
	}
	if rep.Error == nil || rep.Error.Code != errcode.Unavailable {
		t.Fatalf("reply = %s, want unavailable (the forward was cancelled by Close)", m.Data)
	}

	closed := make(chan struct{})
	go func() { e.sched.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("second Close did not return")
	}
	// Unsubscribed: once the server has the unsubscriptions, nobody serves
	// creates.
	if err := e.engine.Flush(); err != nil {
		t.Fatal(err)
	}
	_, err = e.nc.RequestWithContext(testenv.Context(t, 5*time.Second), "sbx.cmd.t.create", body)
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("create after Close: got %v, want no responders", err)
	}
}

// startAgent starts a real node agent with a local runtime on st's server.
func startAgent(t *testing.T, st *testenv.Stack, cfg nodes.Config) *nodes.Agent {
	t.Helper()
	return testenv.StartAgent(t, st.Broker.ClientURL(), cfg)
}

func waitForNodes(t *testing.T, s *scheduler.Scheduler, ids ...string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, func() error {
		got := nodeIDs(s)
		for _, id := range ids {
			if !slices.Contains(got, id) {
				return fmt.Errorf("nodes = %v, want %v among them", got, ids)
			}
		}
		return nil
	})
}

// TestPlacementOnRealNodes: creates sent back to back, faster than nodes
// heartbeat, spread over real node agents by their room, and a runtime no
// node offers is no_capacity.
func TestPlacementOnRealNodes(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	// Heartbeats only at start: every later placement decision rests on
	// the scheduler's own count.
	startAgent(t, st, nodes.Config{ID: "small", Capacity: 1, HeartbeatInterval: time.Hour, Labels: map[string]string{"size": "s"}})
	startAgent(t, st, nodes.Config{ID: "large", Capacity: 3, HeartbeatInterval: time.Hour, Labels: map[string]string{"size": "l"}})
	waitForNodes(t, st.Scheduler, "small", "large")
	ctx := testenv.Context(t, time.Minute)
	count := map[string]int{}
	for i := range 4 {
		res, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "local"})
		if err != nil {
			t.Fatalf("create %d: %v (placed so far: %v)", i, err, count)
		}
		count[res.Node]++
	}
	if count["small"] != 1 || count["large"] != 3 {
		t.Fatalf("placed %v, want small 1, large 3", count)
	}
	_, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker"})
	if !errors.Is(err, errcode.ErrNoCapacity) {
		t.Fatalf("create on docker: got %v, want no_capacity", err)
	}
}

// TestLookup: lookups say session_not_found for a session that never
// existed or was deleted, and the status and node of the others, on the
// wire and in process.
func TestLookup(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, time.Minute)
	create := func() string {
		t.Helper()
		s, err := st.Client.Create(ctx, commands.CreateArgs{})
		if err != nil {
			t.Fatal(err)
		}
		return s.SessionID
	}
	live, stopped, shut, deleted := create(), create(), create(), create()
	if err := st.Client.Stop(ctx, stopped); err != nil {
		t.Fatal(err)
	}
	if err := st.Client.Shutdown(ctx, shut); err != nil {
		t.Fatal(err)
	}
	if err := st.Client.Delete(ctx, deleted); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, id string
		status   projection.Status
		err      error
	}{
		{"unknown", uuid.NewString(), "", errcode.ErrSessionNotFound},
		{"live", live, projection.StatusRunning, nil},
		{"stopped", stopped, projection.StatusStopped, nil},
		{"shut down", shut, projection.StatusShutDown, nil},
		{"deleted", deleted, "", errcode.ErrSessionNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wire, werr := st.Client.Lookup(ctx, tc.id)
			direct, derr := st.Scheduler.Lookup(ctx, "default", tc.id)
			for _, x := range []struct {
				how string
				res commands.LookupResult
				err error
			}{{"client", wire, werr}, {"scheduler", direct, derr}} {
				if tc.err != nil {
					if !errors.Is(x.err, tc.err) {
						t.Errorf("%s: got %+v, %v; want %v", x.how, x.res, x.err, tc.err)
					}
					continue
				}
				if x.err != nil || x.res.Status != string(tc.status) || x.res.Node != "node-1" {
					t.Errorf("%s: got %+v, %v; want status %s on node-1", x.how, x.res, x.err, tc.status)
				}
			}
		})
	}
	// Another tenant does not see the default tenant's sessions.
	if _, err := st.Scheduler.Lookup(ctx, "other", live); !errors.Is(err, errcode.ErrSessionNotFound) {
		t.Errorf("lookup in another tenant: got %v, want session_not_found", err)
	}
}

// TestLookupReadsTheProjection: with the projector caught up, lookups are
// answered from the sessions projection; once it lags behind a session's
// events (stopped), the answer is still right, from a fold.
func TestLookupReadsTheProjection(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, time.Minute)
	p, err := projector.New(st.JS, projector.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	s, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := projector.EnsureBuckets(ctx, st.JS, projector.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tail, err := st.Log.Last(ctx, "default", s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		e, err := kv.Sessions.Get(ctx, projection.SessionKey("default", s.SessionID))
		if err != nil {
			return err
		}
		var rec projection.SessionRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return err
		}
		if rec.StreamSeq < tail.StreamSeq {
			return fmt.Errorf("record at stream seq %d, want %d", rec.StreamSeq, tail.StreamSeq)
		}
		return nil
	})

	lookup := func(want projection.Status) {
		t.Helper()
		res, err := st.Client.Lookup(ctx, s.SessionID)
		if err != nil || res.Status != string(want) || res.Node != "node-1" {
			t.Fatalf("lookup = %+v, %v; want %s on node-1", res, err, want)
		}
	}
	p0, f0 := st.Scheduler.Reads()
	lookup(projection.StatusRunning)
	lookup(projection.StatusRunning)
	p1, f1 := st.Scheduler.Reads()
	if p1 != p0+2 || f1 != f0 {
		t.Fatalf("reads (projected, folded) went from (%d, %d) to (%d, %d); want 2 more projected, no fold", p0, f0, p1, f1)
	}

	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.Close(cctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Client.Stop(ctx, s.SessionID); err != nil { // events the projection has not taken in
		t.Fatal(err)
	}
	lookup(projection.StatusStopped)
	p2, f2 := st.Scheduler.Reads()
	if p2 != p1 || f2 != f1+1 {
		t.Fatalf("reads (projected, folded) went from (%d, %d) to (%d, %d); want one fold, nothing projected", p1, f1, p2, f2)
	}
}

// TestResumeOnAnotherNode: a stopped session whose node is gone is
// placed by the scheduler on another node, which re-creates it at epoch 2
// from its snapshot; resuming an unknown session is session_not_found.
func TestResumeOnAnotherNode(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	ctx := testenv.Context(t, 2*time.Minute)
	a := startAgent(t, st, nodes.Config{ID: "node-a"})
	waitForNodes(t, st.Scheduler, "node-a")
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "local"})
	if err != nil || s.Node != "node-a" {
		t.Fatalf("create = %+v, %v; want on node-a", s, err)
	}
	if _, err := st.Client.WriteFile(ctx, s.SessionID, "notes.md", []byte("progress\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := st.Client.Stop(ctx, s.SessionID); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	startAgent(t, st, nodes.Config{ID: "node-b"})
	waitForNodes(t, st.Scheduler, "node-b")
	p0, f0 := st.Scheduler.Reads()
	res, err := st.Client.Resume(ctx, s.SessionID, nil)
	if err != nil || res.Node != "node-b" || !res.Restored || res.Epoch != 2 {
		t.Fatalf("resume = %+v, %v; want restored on node-b at epoch 2", res, err)
	}
	if p1, f1 := st.Scheduler.Reads(); p1+f1 != p0+f0+1 {
		t.Errorf("reads went from (%d, %d) to (%d, %d); want one session read for the resume", p0, f0, p1, f1)
	}
	got, err := st.Client.ReadFile(ctx, s.SessionID, "notes.md")
	if err != nil || string(got) != "progress\n" {
		t.Fatalf("notes.md on node-b = %q, %v; want %q", got, err, "progress\n")
	}
	if l, err := st.Client.Lookup(ctx, s.SessionID); err != nil || l.Node != "node-b" || l.Status != string(projection.StatusRunning) {
		t.Fatalf("lookup = %+v, %v; want running on node-b", l, err)
	}
	if _, err := st.Client.Resume(ctx, uuid.NewString(), nil); !errors.Is(err, errcode.ErrSessionNotFound) {
		t.Fatalf("resume of an unknown session: got %v, want session_not_found", err)
	}
}

// TestTenantSessionsAcrossNodes: a tenant's sessions are bounded across
// all nodes, not only on each (where this tenant would have room on
// both): the create over the limit is quota_exceeded with the limit in
// the message, another tenant is not held back, and a deleted session
// gives its place back once its node heartbeats.
func TestTenantSessionsAcrossNodes(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true, Tenant: "greedy", Scheduler: scheduler.Config{TenantSessions: 2}})
	startAgent(t, st, nodes.Config{ID: "a", Capacity: 10, HeartbeatInterval: 100 * time.Millisecond})
	startAgent(t, st, nodes.Config{ID: "b", Capacity: 10, HeartbeatInterval: 100 * time.Millisecond})
	waitForNodes(t, st.Scheduler, "a", "b")
	ctx := testenv.Context(t, time.Minute)
	placed := map[string]bool{}
	var first string
	for i := range 2 {
		res, err := st.Client.Create(ctx, commands.CreateArgs{})
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		placed[res.Node] = true
		if first == "" {
			first = res.SessionID
		}
	}
	if len(placed) != 2 {
		t.Fatalf("placed on %v, want both nodes (so that no node's own share stops the third)", placed)
	}
	_, err := st.Client.Create(ctx, commands.CreateArgs{})
	var e *errcode.Error
	if !errors.As(err, &e) || e.Code != errcode.QuotaExceeded || !strings.Contains(e.Message, "limit of 2") || !e.Code.Retryable() {
		t.Fatalf("third create: %v, want a retryable quota_exceeded naming the limit", err)
	}
	other, err := client.New(st.ClientConn, client.Options{Tenant: "modest"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Create(ctx, commands.CreateArgs{}); err != nil {
		t.Fatalf("another tenant's create: %v", err)
	}
	if err := st.Client.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		_, err := st.Client.Create(ctx, commands.CreateArgs{})
		return err
	})
}
