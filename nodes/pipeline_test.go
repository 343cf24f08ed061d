package nodes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
	"github.com/paddock-dev/paddock/testenv"
)

// TestPanicFinishesOnceAndIsRemembered: an op that panics ends with
// exactly one finish, internal; a retry of its command id gets that
// outcome and runs nothing; the node goes on serving the session.
func TestPanicFinishesOnceAndIsRemembered(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Runtimes: []runtime.Runtime{newPanicky(t)}})
	ctx := testenv.Context(t, 30*time.Second)
	c := st.Client
	s := mustCreate(t, ctx, c, commands.CreateArgs{})
	for i := range 2 {
		_, err := c.Exec(ctx, s.SessionID, commands.ExecArgs{Argv: []string{"panic"}}, client.WithCommandID("boom"))
		if errcode.Of(err) != errcode.Internal {
			t.Fatalf("panicking exec, try %d: got %v, want internal", i+1, err)
		}
	}
	var starts, finishes int
	for _, ev := range sessionEvents(t, st, "default", s.SessionID) {
		if ev.Op != string(commands.OpExec) {
			continue
		}
		switch ev.Phase {
		case events.PhaseStart:
			starts++
		case events.PhaseFinish:
			finishes++
			if ev.ErrorCode != string(errcode.Internal) || ev.CommandID != "boom" {
				t.Fatalf("exec finish %+v, want internal under command id boom", ev)
			}
		}
	}
	if starts != 1 || finishes != 1 {
		t.Fatalf("exec recorded %d starts, %d finishes; want one of each", starts, finishes)
	}
	res, err := c.Exec(ctx, s.SessionID, commands.ExecArgs{Argv: []string{"echo", "alive"}})
	if err != nil || res.Stdout != "alive\n" {
		t.Fatalf("exec after the panic: %+v, %v; want alive", res, err)
	}
}

// TestCreatePlacementRepeated: a create placement sent again with its
// command id gets the first reply, to the byte, and creates once; another
// command id for the session is already_exists and is not remembered;
// the same id with other args is invalid_request.
func TestCreatePlacementRepeated(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	nc := testenv.Connect(t, st.Broker.ClientURL())
	ctx := testenv.Context(t, 30*time.Second)
	const id = "placed-1"
	place := func(node, commandID string, spec commands.CreateArgs) ([]byte, commands.Reply) {
		t.Helper()
		args, _ := json.Marshal(commands.Placement{Tenant: "default", SessionID: id, Spec: spec})
		body, _ := json.Marshal(commands.Request{Version: commands.Version, CommandID: commandID, Args: args})
		m, err := nc.RequestWithContext(ctx, commands.Subjects{}.Node(node, "create"), body)
		if err != nil {
			t.Fatal(err)
		}
		var rep commands.Reply
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Fatalf("reply is not JSON: %q", m.Data)
		}
		return m.Data, rep
	}
	first, rep := place("node-1", "c-1", commands.CreateArgs{})
	if rep.Error != nil {
		t.Fatalf("create: %+v", rep.Error)
	}
	again, rep := place("node-1", "c-1", commands.CreateArgs{})
	if !bytes.Equal(again, first) || rep.Replayed {
		t.Fatalf("create sent again: %s, want the first reply %s", again, first)
	}
	for i := range 2 { // refused twice: the refusal is not remembered as an outcome
		if _, rep := place("node-1", "c-2", commands.CreateArgs{}); rep.Error == nil || rep.Error.Code != errcode.AlreadyExists {
			t.Fatalf("another command id, try %d: %+v, want already_exists", i+1, rep.Error)
		}
	}
	if _, rep := place("node-1", "c-1", commands.CreateArgs{Labels: map[string]string{"other": "args"}}); rep.Error == nil || rep.Error.Code != errcode.InvalidRequest {
		t.Fatalf("the command id with other args: %+v, want invalid_request", rep.Error)
	}
	if n := len(sessionEvents(t, st, "default", id)); n != 2 {
		t.Fatalf("%d events, want one create's 2", n)
	}
}

// TestTeardownHooks: every teardown runs the hooks once each, in their
// order: a stop, a shutdown and a delete end their sessions' parts, the
// delete then lets its session go, and closing the agent ends the
// processes, forwards and proxies of every session it still holds.
func TestTeardownHooks(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	nc := testenv.Connect(t, st.Broker.ClientURL())
	rt, err := local.New(local.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	a, err := nodes.New(nc, events.NewLog(testenv.JetStream(t, nc), "", ""), nodes.Config{ID: "node-1"}, nil, rt)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := map[string][]string{} // by session: why/hook, in the order run
	nodes.WatchTeardown(a, func(id, hook, why string) {
		mu.Lock()
		defer mu.Unlock()
		runs[id] = append(runs[id], why+"/"+hook)
	})
	ctx := testenv.Context(t, time.Minute)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			// The test's context is done when cleanups run.
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = a.Close(cctx)
		}
	})
	c := st.Client
	stopped := mustCreate(t, ctx, c, commands.CreateArgs{})
	shut := mustCreate(t, ctx, c, commands.CreateArgs{})
	deleted := mustCreate(t, ctx, c, commands.CreateArgs{})
	kept := mustCreate(t, ctx, c, commands.CreateArgs{})
	if err := c.Stop(ctx, stopped.SessionID); err != nil {
		t.Fatal(err)
	}
	if err := c.Shutdown(ctx, shut.SessionID); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, deleted.SessionID); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(a.Sessions(), "default/"+deleted.SessionID) {
		t.Fatalf("the node still holds the deleted session: %v", a.Sessions())
	}
	if _, err := nc.Request(commands.Subjects{}.Session("default", deleted.SessionID, commands.OpExec), nil, time.Second); err != nats.ErrNoResponders {
		t.Fatalf("a command to the deleted session: %v, want no responders (its subject is not served)", err)
	}
	closed = true
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	hooks := nodes.TeardownHooks(a)
	once := func(why string) []string {
		var out []string
		for _, h := range hooks {
			out = append(out, why+"/"+h)
		}
		return out
	}
	const closing = "stopping with its node"
	for _, tc := range []struct {
		name, id string
		want     []string
	}{
		{"stop", stopped.SessionID, slices.Concat(once("stopping"), once(closing))},
		{"shutdown", shut.SessionID, slices.Concat(once("shutting down"), once(closing))},
		{"delete", deleted.SessionID, slices.Concat(once("being deleted"), once(""))},
		{"kept", kept.SessionID, once(closing)},
	} {
		mu.Lock()
		got := runs[tc.id]
		mu.Unlock()
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: hooks ran %q, want %q", tc.name, got, tc.want)
		}
	}
}
