package scheduler_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/audit"
	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/scheduler"
	"github.com/paddock-dev/paddock/snapshot"
	"github.com/paddock-dev/paddock/testenv"
)

// forkStack is a whole Paddock with auth (the node signs with its issued
// key, the client is a tenant's) and the projector.
func forkStack(t *testing.T, maxForks int) *testenv.Stack {
	t.Helper()
	st := testenv.StartStack(t, testenv.StackOptions{Auth: true, OtherTenants: []string{"other"}, Scheduler: scheduler.Config{MaxForks: maxForks}})
	testenv.StartProjector(t, st.JS)
	return st
}

func forkWantCode(t *testing.T, what string, err error, code errcode.Code) {
	t.Helper()
	if errcode.Of(err) != code {
		t.Fatalf("%s: got %v, want %s", what, err, code)
	}
}

// forkEvents returns one session's events.
func forkEvents(t *testing.T, st *testenv.Stack, tenant, id string) []events.Event {
	t.Helper()
	evs, err := st.Log.Session(testenv.Context(t, 10*time.Second), tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// auditAll runs audit verify over the whole stream, trusting the keys the
// auth store issued, as engine audit verify does.
func auditAll(t *testing.T, st *testenv.Stack) audit.Report {
	t.Helper()
	ctx := testenv.Context(t, 20*time.Second)
	info, err := st.Log.StreamInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	issued, engines, _, err := auth.TrustedNodeKeys("", st.Auth.Dir())
	if err != nil {
		t.Fatal(err)
	}
	c := audit.NewChecker(st.Log.Subjects(), info.State.FirstSeq)
	c.SetTrust(audit.Trust{Issued: issued, Engines: engines})
	check := func(m events.Msg) error { c.Check(m); return nil }
	if err := st.Log.Read(ctx, events.ReadOptions{Filters: []string{st.Log.Subjects().AllNodes()}}, check); err != nil {
		t.Fatal(err)
	}
	if err := st.Log.Read(ctx, events.ReadOptions{Filters: []string{">"}}, check); err != nil {
		t.Fatal(err)
	}
	return c.Report()
}

func failures(r audit.Report) []audit.Finding {
	var out []audit.Finding
	for _, f := range r.Findings {
		if f.Kind.Failure() {
			out = append(out, f)
		}
	}
	return out
}

// TestForkEight forks a session into 8 children on a real node: every
// child runs with the parent's files, its create start records the
// parent point, the parent's fork finish lists them, the sessions
// projection knows parent and children, and audit verify passes; a
// forged child that claims a root the parent never recorded (signed with
// the node's own key) fails it, named.
func TestForkEight(t *testing.T) {
	st := forkStack(t, 0)
	ctx := testenv.Context(t, 2*time.Minute)
	c := st.Client
	parent, err := c.Create(ctx, commands.CreateArgs{Env: map[string]string{"FLAVOUR": "plum"}, Labels: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"a.txt": "alpha", "dir/b.txt": "beta", "dir/deeper/c.bin": strings.Repeat("c", 300_000)}
	for p, body := range files {
		if _, err := c.WriteFile(ctx, parent.SessionID, p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, err := c.Fork(ctx, parent.SessionID, commands.ForkRequest{N: 8})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Children) != 8 || len(res.Failed) != 0 {
		t.Fatalf("fork: %d children, failed %+v; want 8, none", len(res.Children), res.Failed)
	}
	pt := res.Parent
	if pt.SessionID != parent.SessionID || pt.Snapshot == "" || pt.RootSHA256 == "" || pt.Seq == 0 {
		t.Fatalf("fork point %+v", pt)
	}
	for _, child := range res.Children {
		for p, body := range files {
			got, err := c.ReadFile(ctx, child, p)
			if err != nil || string(got) != body {
				t.Fatalf("child %s %s: got %d bytes (%v), want the parent's %d", child, p, len(got), err, len(body))
			}
		}
		out, err := c.Exec(ctx, child, commands.ExecArgs{Shell: "echo $FLAVOUR"})
		if err != nil || strings.TrimSpace(string(out.Stdout)) != "plum" {
			t.Fatalf("child %s env: %q %v, want the parent's", child, out.Stdout, err)
		}
		evs := forkEvents(t, st, "default", child)
		cs, err := events.DecodeData[events.CreateStart](evs[0])
		if err != nil || cs.Parent == nil || *cs.Parent != pt {
			t.Fatalf("child %s create start parent %+v (%v), want %+v", child, cs.Parent, err, pt)
		}
		if cs.Labels["team"] != "a" {
			t.Fatalf("child %s labels %v, want the parent's", child, cs.Labels)
		}
	}
	// The parent's chain records the fork: its start seq is the point, its
	// finish lists the children and carries the snapshot.
	var fin *events.ForkFinish
	for _, ev := range forkEvents(t, st, "default", parent.SessionID) {
		if ev.Op == string(commands.OpFork) && ev.Phase == events.PhaseFinish {
			d, err := events.DecodeData[events.ForkFinish](ev)
			if err != nil {
				t.Fatal(err)
			}
			fin = &d
		}
	}
	if fin == nil || !slices.Equal(fin.Children, res.Children) || fin.Snapshot == nil || fin.Snapshot.Seq != pt.Seq || fin.Parent != pt ||
		fin.Snapshot.Format != snapshot.Format || fin.Snapshot.RootSHA256 != pt.RootSHA256 {
		t.Fatalf("parent's fork finish %+v, want children %v and the snapshot at seq %d", fin, res.Children, pt.Seq)
	}
	// The projection: parent ↔ children.
	ss, err := projector.OpenSessions(ctx, st.JS)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		rec, ok, err := ss.Get(ctx, "default", parent.SessionID)
		if err != nil || !ok || !slices.Equal(rec.Children, res.Children) {
			return fmt.Errorf("parent's record children %v (%v), want %v", rec.Children, err, res.Children)
		}
		for _, child := range res.Children {
			rec, ok, err := ss.Get(ctx, "default", child)
			if err != nil || !ok || rec.Parent == nil || *rec.Parent != pt {
				return fmt.Errorf("child %s record parent %+v (%v)", child, rec.Parent, err)
			}
		}
		return nil
	})
	if f := failures(auditAll(t, st)); len(f) > 0 {
		t.Fatalf("audit verify after the fork: %v", f)
	}

	// A forged child: signed with the node's issued key, claiming the
	// parent's snapshot with a root the parent never recorded.
	creds, err := auth.LoadCreds(st.Auth.CredsPath("node-1"))
	if err != nil {
		t.Fatal(err)
	}
	kp, err := creds.KeyPair()
	if err != nil {
		t.Fatal(err)
	}
	signed, err := st.Log.Signed(kp)
	if err != nil {
		t.Fatal(err)
	}
	forged := pt
	forged.RootSHA256 = strings.Repeat("0", 64)
	data, _ := json.Marshal(events.CreateStart{Runtime: "local", WorkspaceRoot: "/workspace", Epoch: 1, Parent: &forged})
	ch := events.NewChain(signed, "default", "forged-child", "node-1", events.Position{}, events.ChainConfig{})
	ev := events.Event{Version: events.Version, EventID: "e-forged", TS: time.Now().UTC(), Tenant: "default", SessionID: "forged-child",
		Op: "create", Phase: events.PhaseStart, SpanID: "s-forged", Node: "node-1", Data: data}
	if err := ch.Append(ctx, &ev); err != nil {
		t.Fatal(err)
	}
	f := failures(auditAll(t, st))
	if len(f) != 1 || f[0].Kind != audit.Lineage || f[0].Session != "forged-child" || !strings.Contains(f[0].Detail, forged.RootSHA256) {
		t.Fatalf("audit verify with a forged lineage: %v, want one lineage failure naming forged-child", f)
	}
}

// TestForkPoints forks from a named snapshot and from a seq: the children
// get that point's workspace, not the parent's newer one.
func TestForkPoints(t *testing.T) {
	st := forkStack(t, 0)
	ctx := testenv.Context(t, time.Minute)
	c := st.Client
	p, err := c.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(ctx, p.SessionID, "v.txt", []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	var first commands.SnapshotResult
	if err := c.Do(ctx, p.SessionID, commands.OpPersist, nil, &first); err != nil {
		t.Fatal(err)
	}
	at := forkEvents(t, st, "default", p.SessionID)
	atSeq := at[len(at)-1].Seq // the persist's finish
	if _, err := c.WriteFile(ctx, p.SessionID, "v.txt", []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	var second commands.SnapshotResult
	if err := c.Do(ctx, p.SessionID, commands.OpPersist, nil, &second); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  commands.ForkRequest
		want string
		snap *commands.Snapshot
	}{
		{"from", commands.ForkRequest{N: 1, SnapshotID: first.Snapshot.ID}, "one", first.Snapshot},
		{"at", commands.ForkRequest{N: 2, AtSeq: atSeq}, "one", first.Snapshot},
		{"at-latest", commands.ForkRequest{N: 1, AtSeq: atSeq + 100}, "two", second.Snapshot},
	} {
		res, err := c.Fork(ctx, p.SessionID, tc.req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if res.Parent.Snapshot != tc.snap.ID || res.Parent.Seq != tc.snap.Seq || res.Parent.RootSHA256 != commands.LineageRoot(tc.snap) {
			t.Fatalf("%s: point %+v, want snapshot %s at seq %d", tc.name, res.Parent, tc.snap.ID, tc.snap.Seq)
		}
		for _, child := range res.Children {
			got, err := c.ReadFile(ctx, child, "v.txt")
			if err != nil || string(got) != tc.want {
				t.Fatalf("%s: child reads %q (%v), want %q", tc.name, got, err, tc.want)
			}
		}
	}
	// A retried fork (same command id) names the same children and makes
	// no others.
	r1, err := c.Fork(ctx, p.SessionID, commands.ForkRequest{N: 2}, client.WithCommandID("fork-retry-1"))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.Fork(ctx, p.SessionID, commands.ForkRequest{N: 2}, client.WithCommandID("fork-retry-1"))
	if err != nil || !slices.Equal(r1.Children, r2.Children) || r1.Parent != r2.Parent {
		t.Fatalf("retried fork: %v %+v, first %+v", err, r2, r1)
	}
	// A stopped parent forks too (its workspace persisted as it was).
	if err := c.Stop(ctx, p.SessionID); err != nil {
		t.Fatal(err)
	}
	stopped, err := c.Fork(ctx, p.SessionID, commands.ForkRequest{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.ReadFile(ctx, stopped.Children[0], "v.txt"); err != nil || string(got) != "two" {
		t.Fatalf("child of a stopped parent reads %q (%v), want two", got, err)
	}
	forks := 0
	for _, ev := range forkEvents(t, st, "default", p.SessionID) {
		if ev.Op == string(commands.OpFork) && ev.Phase == events.PhaseStart {
			forks++
		}
	}
	if forks != 5 {
		t.Fatalf("parent recorded %d fork starts, want 5 (the retry runs nothing)", forks)
	}
	if f := failures(auditAll(t, st)); len(f) > 0 {
		t.Fatalf("audit verify after forks from recorded points: %v", f)
	}
}

// TestForkRefused: the fork requests that must fail, each with its code,
// and the attacks on lineage that must fail.
func TestForkRefused(t *testing.T) {
	st := forkStack(t, 10)
	ctx := testenv.Context(t, time.Minute)
	c := st.Client
	p, err := c.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	raw := func(subj string, args any) error {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"version": commands.Version, "args": args})
		m, err := st.ClientConn.Request(subj, body, 20*time.Second)
		if err != nil {
			return err
		}
		rep, err := client.DecodeReply(m.Data)
		if err != nil {
			return err
		}
		return client.ReplyResult(rep, nil)
	}
	subj := commands.Subjects{}
	// N outside 1..max, on the wire (the client refuses them before).
	forkWantCode(t, "n 0", raw(subj.Fork("default"), commands.ForkRequest{SessionID: p.SessionID}), errcode.InvalidRequest)
	forkWantCode(t, "n 101", raw(subj.Fork("default"), commands.ForkRequest{SessionID: p.SessionID, N: 101}), errcode.PolicyDenied)
	forkWantCode(t, "n over the operator's 10", raw(subj.Fork("default"), commands.ForkRequest{SessionID: p.SessionID, N: 11}), errcode.PolicyDenied)
	_, err = c.Fork(ctx, p.SessionID, commands.ForkRequest{N: 0})
	forkWantCode(t, "client n 0", err, errcode.InvalidRequest)
	_, err = c.Fork(ctx, p.SessionID, commands.ForkRequest{N: 1, SnapshotID: "nope"})
	forkWantCode(t, "unknown snapshot", err, errcode.SnapshotNotFound)
	_, err = c.Fork(ctx, p.SessionID, commands.ForkRequest{N: 1, AtSeq: 1})
	forkWantCode(t, "no snapshot at or before seq 1", err, errcode.SnapshotNotFound)
	_, err = c.Fork(ctx, p.SessionID, commands.ForkRequest{N: 1, AtSeq: 1, SnapshotID: "x"})
	forkWantCode(t, "both snapshot and seq", err, errcode.InvalidRequest)

	// Another tenant cannot fork this tenant's session: it does not exist
	// for it.
	other, err := client.New(testenv.ConnectAs(t, st.Broker.ClientURL(), st.Auth.CredsPath("other")).Conn, client.Options{Tenant: "other"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = other.Fork(ctx, p.SessionID, commands.ForkRequest{N: 1})
	forkWantCode(t, "other tenant's session", err, errcode.SessionNotFound)

	// A tenant sending the session op fork to its own session's node
	// directly (to record children nobody placed) is refused.
	var pt commands.ForkPoint
	err = c.Do(ctx, p.SessionID, commands.OpFork, commands.ForkArgs{Children: []string{"made-up"}}, &pt)
	forkWantCode(t, "tenant's session op fork", err, errcode.PermissionDenied)

	// A tenant's create cannot carry a parent: strictly decoded it is an
	// unknown member; from a newer minor version it is dropped.
	claim := map[string]any{"session_id": "claims-parent", "parent": commands.Parent{SessionID: p.SessionID, Seq: 1, Snapshot: "s", RootSHA256: strings.Repeat("1", 64)}}
	forkWantCode(t, "create with parent", raw(subj.Create("default"), claim), errcode.InvalidRequest)
	body, _ := json.Marshal(map[string]any{"version": fmt.Sprintf("%d.%d", commands.ContractMajor, commands.ContractMinor+1), "args": claim})
	m, err := st.ClientConn.Request(subj.Create("default"), body, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := client.DecodeReply(m.Data); err != nil || rep.Error != nil {
		t.Fatalf("lenient create: %+v %v", rep.Error, err)
	}
	evs := forkEvents(t, st, "default", "claims-parent")
	if cs, err := events.DecodeData[events.CreateStart](evs[0]); err != nil || cs.Parent != nil || strings.Contains(string(evs[0].Data), "parent") {
		t.Fatalf("a tenant's create recorded a parent: %s (%v)", evs[0].Data, err)
	}

	// A parent that is shut down forks no more: resume it first.
	if err := c.Shutdown(ctx, p.SessionID); err != nil {
		t.Fatal(err)
	}
	_, err = c.Fork(ctx, p.SessionID, commands.ForkRequest{N: 1})
	forkWantCode(t, "shut-down parent", err, errcode.InvalidState)
}

// TestForkLineageMismatch: a placement whose parent point names a root
// other than the snapshot's (sent as the scheduler would, on the node's
// create subject) fails the child's create with internal "lineage
// mismatch", and no sandbox stays.
func TestForkLineageMismatch(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, time.Minute)
	p, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := st.Client.Persist(ctx, p.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		point commands.Parent
		code  errcode.Code
	}{
		{"forged root", commands.Parent{SessionID: p.SessionID, Seq: snap.Seq, Snapshot: snap.ID, RootSHA256: strings.Repeat("f", 64)}, errcode.Internal},
		{"no such snapshot", commands.Parent{SessionID: p.SessionID, Seq: snap.Seq, Snapshot: "nope", RootSHA256: commands.LineageRoot(&snap)}, errcode.SnapshotNotFound},
	} {
		child := "child-" + strings.ReplaceAll(tc.name, " ", "-")
		body, _ := json.Marshal(map[string]any{"version": commands.Version, "args": commands.Placement{Tenant: "default", SessionID: child, Parent: &tc.point}})
		m, err := st.Engine.Request(commands.Subjects{}.Node("node-1", "create"), body, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := client.DecodeReply(m.Data)
		if err != nil || rep.Error == nil || rep.Error.Code != tc.code {
			t.Fatalf("%s: reply %+v (%v), want %s", tc.name, rep.Error, err, tc.code)
		}
		if tc.code == errcode.Internal && !strings.Contains(rep.Error.Message, "lineage mismatch") {
			t.Fatalf("%s: %q, want lineage mismatch", tc.name, rep.Error.Message)
		}
		if slices.Contains(st.Agent.Sessions(), "default/"+child) {
			t.Fatalf("%s: the node still holds the child", tc.name)
		}
	}
}
