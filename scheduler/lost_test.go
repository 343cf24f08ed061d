package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nkeys"

	"github.com/paddock-dev/paddock/audit"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/scheduler"
	"github.com/paddock-dev/paddock/testenv"
)

// lossConfig is a scheduler that declares a node lost after a second of
// silence.
var lossConfig = scheduler.Config{NodeTTL: time.Second, LostCheck: 100 * time.Millisecond}

// silentAgent starts a node agent that heartbeats once, at start, and
// then never again while it goes on serving its sessions: a node cut off
// from the engines, or one whose heartbeats are lost, as the engines see
// it. Its local runtime keeps sandboxes under the returned directory.
func silentAgent(t *testing.T, st *testenv.Stack, id string) (*nodes.Agent, string) {
	t.Helper()
	dir := t.TempDir()
	rt, err := local.New(local.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return testenv.StartAgent(t, st.Broker.ClientURL(), nodes.Config{ID: id, HeartbeatInterval: time.Hour}, rt), dir
}

// TestNodeLoss: a node that goes silent past the TTL is declared lost by
// two engines at once, and its sessions' histories are closed once: the
// exec in flight gets one failed finish, the running process a proc_exit
// lost, each session a node_lost, and the projection says lost. The
// client waiting on the exec learns it within seconds (not at the exec's
// timeout), with a retryable error. The node, which still runs, is
// fenced: a command it receives for a lost session is refused before it
// runs (its start cannot be appended) and the node lets the session go.
// The session with a snapshot resumes on another node with its
// workspace; the one without resumes only when asked to start empty.
func TestNodeLoss(t *testing.T) {
	cfg := lossConfig
	cfg.Name = "engine-1"
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true, Scheduler: cfg})
	testenv.StartProjector(t, st.JS)
	second := secondScheduler(t, st, "engine-2")
	ctx := testenv.Context(t, 2*time.Minute)

	_, dirA := silentAgent(t, st, "node-a")
	waitForNodes(t, st.Scheduler, "node-a")
	saved, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "local"})
	if err != nil {
		t.Fatal(err)
	}
	bare, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "local"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.WriteFile(ctx, saved.SessionID, "notes.md", []byte("progress\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.Persist(ctx, saved.SessionID); err != nil {
		t.Fatal(err)
	}
	proc, err := st.Client.ProcStart(ctx, bare.SessionID, commands.ProcStartArgs{Argv: []string{"sleep", "300"}, YieldMS: ms(0)})
	if err != nil {
		t.Fatal(err)
	}

	// An exec that outlives the TTL; its client must not wait for it (the
	// node, which still runs, finishes it and finds its finish refused).
	type result struct {
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	began := time.Now()
	go func() {
		_, err := st.Client.Exec(ctx, saved.SessionID, commands.ExecArgs{Argv: []string{"sleep", "6"}, TimeoutMS: 30_000})
		done <- result{err, time.Since(began)}
	}()
	testenv.Eventually(t, 30*time.Second, func() error {
		if s, _ := projection.Fold(sessionEvents(t, st, saved.SessionID)); len(s.InFlight) == 0 {
			return fmt.Errorf("the exec has not started")
		}
		return nil
	})
	// node-b heartbeats: the engines hear the bus alive while node-a is
	// silent (an engine that hears nobody declares nobody lost), and it is
	// where the sessions resume.
	testenv.StartAgent(t, st.Broker.ClientURL(), nodes.Config{ID: "node-b", HeartbeatInterval: 200 * time.Millisecond})
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		t.Fatal("the exec on the lost node never returned")
	}
	if errcode.Of(res.err) != errcode.Unavailable || !errcode.Of(res.err).Retryable() || !strings.Contains(res.err.Error(), "declared lost") {
		t.Fatalf("exec on a lost node: %v; want unavailable (retryable) saying the node was declared lost", res.err)
	}
	t.Logf("the client learnt of the loss after %s (TTL %s, the exec runs 6s)", res.took.Round(time.Millisecond), cfg.NodeTTL)

	// The histories, closed once although two engines declared the loss.
	savedEvs := sessionEvents(t, st, saved.SessionID)
	if n := countOp(savedEvs, "node_lost"); n != 2 {
		t.Fatalf("saved session has %d node_lost events, want one start and one finish:\n%s", n, describe(savedEvs))
	}
	if f := finishOf(savedEvs, "exec"); f == nil || f.ErrorCode != string(errcode.Unavailable) || f.Node == "node-a" {
		t.Fatalf("exec finish %+v; want one failed finish (unavailable) written by an engine", f)
	}
	bareEvs := sessionEvents(t, st, bare.SessionID)
	exit := finishOf(bareEvs, string(commands.OpProcExit))
	if exit == nil {
		t.Fatalf("no proc_exit for the running process:\n%s", describe(bareEvs))
	}
	if d, err := events.DecodeData[events.ProcExitFinish](*exit); err != nil || d.ProcessID != proc.ProcessID || d.Reason != "lost" {
		t.Fatalf("proc_exit %+v, %v; want process %d lost", d, err, proc.ProcessID)
	}
	lost := finishOf(bareEvs, "node_lost")
	if d, err := events.DecodeData[events.NodeLostFinish](*lost); err != nil || d.SnapshotID != "" || len(d.Processes) != 1 {
		t.Fatalf("node_lost finish %+v, %v; want no snapshot and one process", d, err)
	}
	for _, evs := range [][]events.Event{savedEvs, bareEvs} {
		s, err := projection.Fold(evs)
		if err != nil || s.Status != projection.StatusLost || len(s.InFlight) != 0 {
			t.Fatalf("folded %s: status %s, in flight %v, %v; want lost with nothing open", s.ID, s.Status, s.InFlight, err)
		}
	}
	if l, err := st.Client.Lookup(ctx, bare.SessionID); err != nil || l.Status != "lost" || l.Node != "node-a" {
		t.Fatalf("lookup = %+v, %v; want lost on node-a", l, err)
	}
	nodeLost(t, st, "node-a")

	// Fencing: node-a still serves bare's subject, but cannot record the
	// command's start, so it does not run it, and lets the session go.
	_, err = st.Client.Exec(ctx, bare.SessionID, commands.ExecArgs{Argv: []string{"touch", "fenced"}})
	if errcode.Of(err) != errcode.Unavailable {
		t.Fatalf("exec on a lost session at its old node: %v; want unavailable", err)
	}
	if found := findFile(t, dirA, "fenced"); found != "" {
		t.Fatalf("the fenced node ran the command: %s exists", found)
	}
	if got := sessionEvents(t, st, bare.SessionID); len(got) != len(bareEvs) {
		t.Fatalf("the fenced command was recorded:\n%s", describe(got[len(bareEvs):]))
	}

	// Resume elsewhere.
	waitForNodes(t, st.Scheduler, "node-b")
	var r commands.ResumeResult
	testenv.Eventually(t, 30*time.Second, func() error {
		// node-a may still hold the subject: its refusal lets it go, and
		// the next attempt reaches the engine.
		r, err = st.Client.Resume(ctx, saved.SessionID, nil)
		return err
	})
	if r.Node != "node-b" || !r.Restored || r.Epoch != 2 {
		t.Fatalf("resume = %+v; want restored on node-b at epoch 2", r)
	}
	if got, err := st.Client.ReadFile(ctx, saved.SessionID, "notes.md"); err != nil || string(got) != "progress\n" {
		t.Fatalf("notes.md after resume = %q, %v", got, err)
	}
	_, err = st.Client.Resume(ctx, bare.SessionID, nil)
	if errcode.Of(err) != errcode.InvalidState || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("resume of a lost session without a snapshot: %v; want invalid_state naming empty", err)
	}
	r, err = st.Client.ResumeWith(ctx, bare.SessionID, commands.ResumeArgs{Empty: true})
	if err != nil || r.Node != "node-b" || r.Restored {
		t.Fatalf("resume empty = %+v, %v; want on node-b, nothing restored", r, err)
	}
	if ls, err := st.Client.List(ctx, bare.SessionID, "."); err != nil || len(ls) != 0 {
		t.Fatalf("workspace after an empty resume: %v, %v; want empty", ls, err)
	}
	if _, err := st.Client.Exec(ctx, saved.SessionID, commands.ExecArgs{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if f := finishOf(sessionEvents(t, st, saved.SessionID), "exec"); f == nil || f.Node != "node-b" {
		t.Fatalf("last exec finish %+v; want node-b's", f)
	}
	auditClean(t, st)
	_ = second // it declared the loss too: the histories show one of each
}

// TestAutoResume: with AutoResume, the engine resumes a lost node's
// sessions that have a snapshot on a node that is up, and leaves the one
// without a snapshot lost.
func TestAutoResume(t *testing.T) {
	cfg := lossConfig
	cfg.AutoResume = true
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true, Scheduler: cfg})
	ctx := testenv.Context(t, 2*time.Minute)
	saved, bare := sessionsOnASilentNode(t, st)
	testenv.Eventually(t, 30*time.Second, func() error {
		l, err := st.Client.Lookup(ctx, saved.SessionID)
		if err != nil || l.Status != "running" || l.Node != "node-b" {
			return fmt.Errorf("lookup = %+v, %v; want running on node-b", l, err)
		}
		return nil
	})
	if got, err := st.Client.ReadFile(ctx, saved.SessionID, "notes.md"); err != nil || string(got) != "kept\n" {
		t.Fatalf("notes.md after auto-resume = %q, %v", got, err)
	}
	if l, err := st.Client.Lookup(ctx, bare.SessionID); err != nil || l.Status != "lost" {
		t.Fatalf("lookup of the session without a snapshot = %+v, %v; want lost", l, err)
	}

	// A lost session is deleted by the engine (no node serves it); a
	// session its node serves is not.
	if err := st.Client.Delete(ctx, bare.SessionID); err != nil {
		t.Fatalf("delete of a lost session: %v", err)
	}
	if _, err := st.Client.Lookup(ctx, bare.SessionID); errcode.Of(err) != errcode.SessionNotFound {
		t.Fatalf("lookup after delete: %v; want session_not_found", err)
	}
	evs := sessionEvents(t, st, bare.SessionID)
	if f := finishOf(evs, "delete"); f == nil || f.Node != "engine" || *f.OK != true {
		t.Fatalf("delete finish %+v; want recorded ok by the engine", f)
	}
	var res commands.StatusResult
	body := commands.DeleteRequest{SessionID: saved.SessionID}
	if err := requestTenant(t, st, "delete", body, &res); errcode.Of(err) != errcode.InvalidState {
		t.Fatalf("engine delete of a session its node serves: %v; want invalid_state", err)
	}
	if l, err := st.Client.Lookup(ctx, saved.SessionID); err != nil || l.Status != "running" {
		t.Fatalf("the served session after a refused engine delete: %+v, %v", l, err)
	}
	auditClean(t, st)
}

// sessionsOnASilentNode starts a projector, a silent node-a and two
// sessions on it (saved, with notes.md persisted; bare, never persisted),
// then a node-b that heartbeats.
func sessionsOnASilentNode(t *testing.T, st *testenv.Stack) (saved, bare commands.CreateResult) {
	t.Helper()
	testenv.StartProjector(t, st.JS)
	ctx := testenv.Context(t, time.Minute)
	silentAgent(t, st, "node-a")
	waitForNodes(t, st.Scheduler, "node-a")
	var err error
	if saved, err = st.Client.Create(ctx, commands.CreateArgs{Runtime: "local"}); err != nil {
		t.Fatal(err)
	}
	if bare, err = st.Client.Create(ctx, commands.CreateArgs{Runtime: "local"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.WriteFile(ctx, saved.SessionID, "notes.md", []byte("kept\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.Persist(ctx, saved.SessionID); err != nil {
		t.Fatal(err)
	}
	testenv.StartAgent(t, st.Broker.ClientURL(), nodes.Config{ID: "node-b", HeartbeatInterval: 200 * time.Millisecond})
	return saved, bare
}

// TestSweepResumesLostSessions: a session whose loss no resume followed
// (the engine that recorded it did not auto-resume; in a fleet it died
// first) is resumed by another engine's sweep, once; the session without
// a snapshot is left lost.
func TestSweepResumesLostSessions(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true, Scheduler: lossConfig})
	ctx := testenv.Context(t, 2*time.Minute)
	saved, bare := sessionsOnASilentNode(t, st)
	for _, id := range []string{saved.SessionID, bare.SessionID} {
		testenv.Eventually(t, 30*time.Second, func() error {
			l, err := st.Client.Lookup(ctx, id)
			if err != nil || l.Status != "lost" {
				return fmt.Errorf("lookup = %+v, %v; want lost", l, err)
			}
			return nil
		})
	}
	cfg := lossConfig
	cfg.Name, cfg.AutoResume, cfg.LostSweep = "engine-2", true, 200*time.Millisecond
	sweeper := startSecond(t, st, cfg)
	testenv.Eventually(t, 30*time.Second, func() error {
		l, err := st.Client.Lookup(ctx, saved.SessionID)
		if err != nil || l.Status != "running" || l.Node != "node-b" {
			return fmt.Errorf("lookup = %+v, %v; want running on node-b", l, err)
		}
		return nil
	})
	if got, err := st.Client.ReadFile(ctx, saved.SessionID, "notes.md"); err != nil || string(got) != "kept\n" {
		t.Fatalf("notes.md after the sweep's resume = %q, %v", got, err)
	}
	// Sweeps go on: after three more, the running session was not
	// resumed again, and the bare one stays lost.
	after := sweeper.Sweeps()
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := sweeper.Sweeps(); n < after+3 {
			return fmt.Errorf("%d sweeps since the resume; want 3", n-after)
		}
		return nil
	})
	if n := countOp(sessionEvents(t, st, saved.SessionID), "resume"); n != 2 {
		t.Fatalf("resume events of the swept session = %d; want one start and one finish", n)
	}
	if l, err := st.Client.Lookup(ctx, bare.SessionID); err != nil || l.Status != "lost" {
		t.Fatalf("lookup of the session without a snapshot = %+v, %v; want lost", l, err)
	}
	auditClean(t, st)
}

// requestTenant sends a tenant-level op straight to the engine.
func requestTenant(t *testing.T, st *testenv.Stack, op string, args, out any) error {
	t.Helper()
	b, _ := json.Marshal(commands.Request{Version: commands.Version, Args: mustJSON(t, args)})
	m, err := st.ClientConn.Request("sbx.cmd.default."+op, b, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep commands.Reply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Error != nil {
		return rep.Error.Err()
	}
	return json.Unmarshal(rep.Result, out)
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStoppedNodeNotLost: a node that stops (and says so) is not declared
// lost when its heartbeats end.
func TestStoppedNodeNotLost(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true, Scheduler: lossConfig})
	ctx := testenv.Context(t, time.Minute)
	a := testenv.StartAgent(t, st.Broker.ClientURL(), nodes.Config{ID: "node-a", HeartbeatInterval: 100 * time.Millisecond})
	waitForNodes(t, st.Scheduler, "node-a")
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// A node that goes silent while another heartbeats is declared lost:
	// the proof that the loop runs, and the deadline of the check above.
	testenv.StartAgent(t, st.Broker.ClientURL(), nodes.Config{ID: "node-b", HeartbeatInterval: time.Hour})
	testenv.StartAgent(t, st.Broker.ClientURL(), nodes.Config{ID: "node-c", HeartbeatInterval: 100 * time.Millisecond})
	nodeLost(t, st, "node-b")
	if kinds := nodeEventKinds(t, st, "node-a"); strings.Contains(kinds, "lost") {
		t.Fatalf("node-a's events %s; a stopped node is not lost", kinds)
	}
}

func secondScheduler(t *testing.T, st *testenv.Stack, name string) *scheduler.Scheduler {
	t.Helper()
	cfg := lossConfig
	cfg.Name = name
	return startSecond(t, st, cfg)
}

// startSecond starts another scheduler with cfg on st's broker.
func startSecond(t *testing.T, st *testenv.Stack, cfg scheduler.Config) *scheduler.Scheduler {
	t.Helper()
	nc := testenv.Connect(t, st.Broker.ClientURL())
	s, err := scheduler.New(nc, events.NewLog(testenv.JetStream(t, nc), "", ""), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(testenv.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func sessionEvents(t *testing.T, st *testenv.Stack, id string) []events.Event {
	t.Helper()
	evs, err := st.Log.Session(testenv.Context(t, 10*time.Second), "default", id)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func countOp(evs []events.Event, op string) int {
	n := 0
	for _, ev := range evs {
		if ev.Op == op {
			n++
		}
	}
	return n
}

// finishOf returns the last finish of op in evs, nil when none.
func finishOf(evs []events.Event, op string) *events.Event {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Op == op && evs[i].Phase == events.PhaseFinish {
			return &evs[i]
		}
	}
	return nil
}

func describe(evs []events.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "  %d %s %s node=%s code=%s\n", ev.Seq, ev.Op, ev.Phase, ev.Node, ev.ErrorCode)
	}
	return b.String()
}

// nodeLost waits until node's lost event is in the stream.
func nodeLost(t *testing.T, st *testenv.Stack, node string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		if k := nodeEventKinds(t, st, node); !strings.Contains(k, "lost") {
			return fmt.Errorf("node %s events: %s", node, k)
		}
		return nil
	})
}

// nodeEventKinds returns the kinds of node's events, in order.
func nodeEventKinds(t *testing.T, st *testenv.Stack, node string) string {
	t.Helper()
	ctx := testenv.Context(t, 10*time.Second)
	var kinds []string
	err := st.Log.Read(ctx, events.ReadOptions{Filters: []string{st.Log.Subjects().Node(node, "*")}}, func(m events.Msg) error {
		ev, err := events.ParseNode(m.Data)
		if err != nil {
			return err
		}
		kinds = append(kinds, ev.Kind)
		return nil
	})
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	return strings.Join(kinds, ",")
}

// findFile returns the path of a file named name under dir, "" if none.
func findFile(t *testing.T, dir, name string) string {
	t.Helper()
	found := ""
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == name {
			found = p
		}
		return nil
	})
	return found
}

func ms(v int64) *int64 { return &v }

// TestCutOffEngineDeclaresNobody: an engine that hears no node at all (cut
// off from the bus, or every node silent at once) declares no node lost.
func TestCutOffEngineDeclaresNobody(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true, Scheduler: lossConfig})
	testenv.StartAgent(t, st.Broker.ClientURL(), nodes.Config{ID: "node-a", HeartbeatInterval: time.Hour})
	testenv.StartAgent(t, st.Broker.ClientURL(), nodes.Config{ID: "node-b", HeartbeatInterval: time.Hour})
	waitForNodes(t, st.Scheduler, "node-a", "node-b")
	// Both are silent past the TTL, heard at the same moment: then node-c
	// heartbeats, and both are declared lost; before it, neither was.
	// A quiet period is observed, not waited for: the loop checks every
	// LostCheck, forty times in it.
	quiet := time.NewTimer(4 * lossConfig.NodeTTL)
	defer quiet.Stop()
	tick := time.NewTicker(lossConfig.LostCheck)
	defer tick.Stop()
	for done := false; !done; {
		if k := nodeEventKinds(t, st, "node-a") + nodeEventKinds(t, st, "node-b"); strings.Contains(k, "lost") {
			t.Fatalf("a node was declared lost while the engine heard no node: %s", k)
		}
		select {
		case <-quiet.C:
			done = true
		case <-tick.C:
		}
	}
	testenv.StartAgent(t, st.Broker.ClientURL(), nodes.Config{ID: "node-c", HeartbeatInterval: 100 * time.Millisecond})
	nodeLost(t, st, "node-a")
	nodeLost(t, st, "node-b")
}

// auditClean checks every session's history as engine audit verify does
// (signatures required, nodes' and engines' keys as they declared them)
// and fails on any finding.
func auditClean(t *testing.T, st *testenv.Stack) {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	info, err := st.Log.StreamInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := audit.NewChecker(st.Log.Subjects(), info.State.FirstSeq)
	c.SetTrust(audit.Trust{RequireSigned: true})
	err = st.Log.Read(ctx, events.ReadOptions{Filters: []string{st.Log.Subjects().AllSessions(), st.Log.Subjects().AllNodes()}}, func(m events.Msg) error {
		c.Check(m)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Report(); len(r.Findings) > 0 {
		var b strings.Builder
		for _, f := range r.Findings {
			fmt.Fprintf(&b, "  %s/%s seq %d: %s: %s\n", f.Tenant, f.Session, f.Seq, f.Kind, f.Detail)
		}
		t.Fatalf("audit: %d findings:\n%s", len(r.Findings), b.String())
	}
}

// TestNodeCannotDeclareLoss: a node (not an engine) that writes node_lost
// on a session another node holds, signed with its own registered key, is
// named by audit (not_holder): only an engine may end a node's hold.
func TestNodeCannotDeclareLoss(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Scheduler: lossConfig})
	ctx := testenv.Context(t, time.Minute)
	s, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	rogue, err := st.Log.Signed(kp)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := json.Marshal(events.NodeInfo{Node: "rogue", SigningKey: rogue.SigningKey()})
	if err := rogue.AppendNode(ctx, &events.NodeEvent{Version: events.Version, EventID: uuid.NewString(), TS: time.Now().UTC(), Node: "rogue", Kind: "registered", Data: info}); err != nil {
		t.Fatal(err)
	}
	tail, err := st.Log.Last(ctx, "default", s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	ev := &events.Event{Version: events.Version, EventID: uuid.NewString(), TS: time.Now().UTC(), Tenant: "default", SessionID: s.SessionID,
		Seq: tail.Event.Seq + 1, Op: string(commands.OpNodeLost), Phase: events.PhaseStart, SpanID: "rogue1", Node: "rogue", PrevHash: tail.Hash}
	if _, err := rogue.Append(ctx, ev, tail.StreamSeq); err != nil {
		t.Fatal(err)
	}
	info2, err := st.Log.StreamInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := audit.NewChecker(st.Log.Subjects(), info2.State.FirstSeq)
	c.SetTrust(audit.Trust{RequireSigned: true})
	if err := st.Log.Read(ctx, events.ReadOptions{Filters: []string{st.Log.Subjects().AllSessions(), st.Log.Subjects().AllNodes()}}, func(m events.Msg) error {
		c.Check(m)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var holder bool
	for _, f := range c.Report().Findings {
		holder = holder || f.Kind == audit.NotHolder && f.Seq == ev.Seq
	}
	if !holder {
		t.Fatalf("audit findings %+v; want not_holder for the node's node_lost", c.Report().Findings)
	}
}

// TestLossLeavesATakeOverToItsTaker: a lost node's session on which a
// node that is up has an open resume start is left to that node (the
// resume brings the session back; a loss recorded under it would fence
// it out, as CI once saw), and marked lost once that resume ended without
// moving it. A session whose taker is gone too gets the taker's start
// closed with the rest.
func TestLossLeavesATakeOverToItsTaker(t *testing.T) {
	cfg := lossConfig
	cfg.Name = "engine-1"
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true, Scheduler: cfg})
	testenv.StartProjector(t, st.JS)
	ctx := testenv.Context(t, 2*time.Minute)
	silentAgent(t, st, "node-a")
	waitForNodes(t, st.Scheduler, "node-a")
	taken, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "local"})
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "local"})
	if err != nil {
		t.Fatal(err)
	}
	// node-b is up and has begun a resume of one session; node-c, never
	// heard from, of the other.
	testenv.StartAgent(t, st.Broker.ClientURL(), nodes.Config{ID: "node-b", HeartbeatInterval: 200 * time.Millisecond})
	waitForNodes(t, st.Scheduler, "node-b")
	appendAs(t, st, taken.SessionID, "node-b", "resume", events.PhaseStart, "take-1", nil)
	appendAs(t, st, orphan.SessionID, "node-c", "resume", events.PhaseStart, "take-2", nil)

	nodeLost(t, st, "node-a")
	testenv.Eventually(t, 30*time.Second, func() error {
		if evs := sessionEvents(t, st, orphan.SessionID); countOp(evs, "node_lost") != 2 {
			return fmt.Errorf("the session whose taker is gone is not closed:\n%s", describe(evs))
		}
		return nil
	})
	evs := sessionEvents(t, st, orphan.SessionID)
	if f := finishOf(evs, "resume"); f == nil || f.ErrorCode != string(errcode.Unavailable) || f.Node != "engine-1" {
		t.Fatalf("the gone taker's resume finish: %+v; want a failed finish (unavailable) by engine-1", f)
	}
	if evs := sessionEvents(t, st, taken.SessionID); countOp(evs, "node_lost") != 0 || finishOf(evs, "resume") != nil {
		t.Fatalf("the session node-b is taking over was closed under it:\n%s", describe(evs))
	}

	// node-b's resume fails: the session stays on node-a, which is lost.
	no := false
	appendAs(t, st, taken.SessionID, "node-b", "resume", events.PhaseFinish, "take-1", &no)
	testenv.Eventually(t, 30*time.Second, func() error {
		evs := sessionEvents(t, st, taken.SessionID)
		if s, _ := projection.Fold(evs); s.Status != projection.StatusLost {
			return fmt.Errorf("session after node-b's failed resume: %s\n%s", s.Status, describe(evs))
		}
		return nil
	})
}

// appendAs appends one event to a session's history as node wrote it
// (unsigned: what a test stack's nodes accept), after its last event.
func appendAs(t *testing.T, st *testenv.Stack, id, node, op string, phase events.Phase, span string, ok *bool) {
	t.Helper()
	ctx := testenv.Context(t, 10*time.Second)
	tail, err := st.Log.Last(ctx, "default", id)
	if err != nil || tail.Event == nil {
		t.Fatalf("last event of %s: %+v, %v", id, tail, err)
	}
	ev := &events.Event{
		Version: events.Version, EventID: uuid.NewString(), TS: time.Now().UTC(), Tenant: "default", SessionID: id,
		Seq: tail.Event.Seq + 1, Op: op, Phase: phase, SpanID: span, Node: node, PrevHash: tail.Hash, OK: ok,
	}
	if phase == events.PhaseFinish && ok != nil && !*ok {
		ev.ErrorCode = string(errcode.Unavailable)
	}
	data, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Log.AppendRaw(ctx, ev, data, tail.StreamSeq); err != nil {
		t.Fatalf("append %s %s as %s: %v", op, phase, node, err)
	}
}

// TestLossWhileProjectionLags: a node lost while no projector runs (the
// sessions projection cannot name its sessions) is looked at again, and
// once a projector has caught up its session gets its node_lost. (A loss
// declared from a lagging projection used to be final: the session stayed
// running for good, as in CI's TestSites.)
func TestLossWhileProjectionLags(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true, Scheduler: lossConfig})
	ctx := testenv.Context(t, 2*time.Minute)
	silentAgent(t, st, "node-a")
	waitForNodes(t, st.Scheduler, "node-a")
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "local"})
	if err != nil {
		t.Fatal(err)
	}
	// node-b heartbeats, node-a is silent: the engine declares node-a lost
	// with no projector running, so from a projection that names nothing.
	testenv.StartAgent(t, st.Broker.ClientURL(), nodes.Config{ID: "node-b", HeartbeatInterval: 200 * time.Millisecond})
	testenv.Eventually(t, 30*time.Second, func() error {
		stream, err := st.JS.Stream(ctx, events.DefaultStream)
		if err != nil {
			return err
		}
		_, err = stream.GetLastMsgForSubject(ctx, st.Log.Subjects().Node("node-a", projection.KindLost))
		return err
	})
	if n := countOp(sessionEvents(t, st, s.SessionID), "node_lost"); n != 0 {
		t.Fatalf("the session has %d node_lost events with no projector running; the test proves nothing", n)
	}
	testenv.StartProjector(t, st.JS)
	testenv.Eventually(t, time.Minute, func() error {
		evs := sessionEvents(t, st, s.SessionID)
		if n := countOp(evs, "node_lost"); n != 2 {
			return fmt.Errorf("%d node_lost events, want a start and a finish:\n%s", n, describe(evs))
		}
		return nil
	})
}
