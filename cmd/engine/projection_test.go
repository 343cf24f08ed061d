package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/paddock-dev/paddock/auth"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/testenv"
)

var readyRE = regexp.MustCompile(`paddock engine ready" nats=(\S+)`)

// startServeBinary starts the engine binary bin as `serve` with args, killed
// and reaped when the test ends, and returns its NATS URL once it says it
// is ready (within ready), the process and its log.
func startServeBinary(t *testing.T, bin string, ready time.Duration, args ...string) (string, *exec.Cmd, *testenv.SyncBuffer) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve"}, args...)...)
	logs := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(waited) }() // reaps the process; the cleanup waits for it
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-waited
		// Killed, it could not unmount its sandboxes' overlays.
		if i := slices.Index(args, "--sandbox-dir"); i >= 0 && i+1 < len(args) {
			testenv.UnmountOverlays(t, args[i+1])
		}
	})
	var url string
	testenv.Eventually(t, ready, func() error {
		m := readyRE.FindStringSubmatch(logs.String())
		if m == nil {
			return fmt.Errorf("engine not ready:\n%s", logs.String())
		}
		url = m[1]
		return nil
	})
	return url, cmd, logs
}

// serveStoppable runs `engine serve args...` in-process until stop is
// called or the test ends, and returns its log once it is ready.
func serveStoppable(t *testing.T, args ...string) (*testenv.SyncBuffer, func()) {
	t.Helper()
	if !slices.Contains(args, "--sandbox-dir") {
		args = append(args, "--sandbox-dir", t.TempDir()) // never the user's cache dir
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs := &testenv.SyncBuffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"serve"}, args...), nil, logs, logs) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case code := <-done:
				if code != 0 {
					t.Errorf("serve exited %d; log:\n%s", code, logs.String())
				}
			case <-time.After(60 * time.Second):
				t.Errorf("serve did not stop within 60s")
			}
		})
	}
	t.Cleanup(stop)
	testenv.Eventually(t, 30*time.Second, func() error {
		select {
		case code := <-done:
			done <- code
			return fmt.Errorf("serve exited early with %d:\n%s", code, logs.String())
		default:
		}
		if !strings.Contains(logs.String(), "paddock engine ready") {
			return fmt.Errorf("not ready yet")
		}
		return nil
	})
	// The CLI calls of the test use the admin credentials this engine
	// made (auth is on by default), never the user's.
	if m := adminCredsRE.FindStringSubmatch(logs.String()); m != nil {
		t.Setenv("PADDOCK_CREDS", m[1])
	}
	return logs, stop
}

var adminCredsRE = regexp.MustCompile(`msg=credentials admin=(\S+)`)

// serveFor is serveStoppable returning the engine's client URL.
func serveFor(t *testing.T, args ...string) (string, func()) {
	t.Helper()
	logs, stop := serveStoppable(t, args...)
	m := readyRE.FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no client URL in the log:\n%s", logs.String())
	}
	return m[1], stop
}

// waitProjected waits until `engine projector status` shows no lag.
func waitProjected(t *testing.T, url string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		code, out, errs := cli(t, url, "", "projector", "status", "--json")
		if code != 0 {
			return fmt.Errorf("projector status: exit %d: %s", code, errs)
		}
		var st struct {
			StreamLastSeq uint64             `json:"stream_last_seq"`
			Projectors    []projector.Status `json:"projectors"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			return err
		}
		if len(st.Projectors) == 0 || st.Projectors[0].Lag > 0 {
			return fmt.Errorf("projector behind: %s", out)
		}
		return nil
	})
}

func newClient(t *testing.T, url string) *client.Client {
	t.Helper()
	c, err := client.New(testenv.Connect(t, url), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sessionsInEveryState creates a session in each status a fleet can leave
// one in and returns the status each should have.
func sessionsInEveryState(t *testing.T, c *client.Client) map[string]projection.Status {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	want := map[string]projection.Status{}
	mk := func(id string, st projection.Status, then ...func(string) error) {
		t.Helper()
		if _, err := c.Create(ctx, commands.CreateArgs{SessionID: id, Runtime: "local", Labels: map[string]string{"state": string(st)}}); err != nil {
			t.Fatal(err)
		}
		for _, f := range then {
			if err := f(id); err != nil {
				t.Fatal(err)
			}
		}
		want[id] = st
	}
	exec := func(id string) error {
		_, err := c.Exec(ctx, id, commands.ExecArgs{Argv: []string{"true"}})
		return err
	}
	stop := func(id string) error { return c.Stop(ctx, id) }
	start := func(id string) error { return c.Start(ctx, id) }
	mk("s-running", projection.StatusRunning, exec)
	mk("s-stopped", projection.StatusStopped, exec, stop)
	mk("s-restarted", projection.StatusRunning, stop, start)
	mk("s-shutdown", projection.StatusShutDown, func(id string) error { return c.Shutdown(ctx, id) })
	mk("s-deleted", projection.StatusDeleted, func(id string) error { return c.Delete(ctx, id) })
	if _, err := c.Create(ctx, commands.CreateArgs{SessionID: "s-failed", Runtime: "local", User: "nobody"}); err == nil {
		t.Fatal("create as another user on the local runtime succeeded")
	}
	want["s-failed"] = projection.StatusFailed
	return want
}

func listJSON(t *testing.T, url string, args ...string) map[string]projection.SessionRecord {
	t.Helper()
	out := mustCLI(t, url, "", append([]string{"sandbox", "list", "--json"}, args...)...)
	var recs []projection.SessionRecord
	if err := json.Unmarshal([]byte(out), &recs); err != nil {
		t.Fatalf("sandbox list --json = %s: %v", out, err)
	}
	m := map[string]projection.SessionRecord{}
	for _, r := range recs {
		m[r.ID] = r
	}
	return m
}

// TestListAfterRestart: `sandbox list` shows every session in the status
// its events give, after the engine restarted on the same state dir; the
// projection verifies against a replay and the audit passes.
func TestListAfterRestart(t *testing.T) {
	dir := t.TempDir()
	serveArgs := []string{"--state-dir", dir, "--listen", "127.0.0.1:0", "--node-id", "n1", "--runtime", "local"}
	url, stop := serveFor(t, serveArgs...)
	want := sessionsInEveryState(t, newClient(t, url))
	waitProjected(t, url)
	stop()

	url, _ = serveFor(t, serveArgs...)
	waitProjected(t, url)
	got := listJSON(t, url, "--all")
	if len(got) != len(want) {
		t.Fatalf("sandbox list --all shows %d sessions, want %d", len(got), len(want))
	}
	if live := listJSON(t, url); len(live) != len(want)-1 || live["s-deleted"].ID != "" {
		t.Fatalf("sandbox list shows %d sessions (deleted among them: %v), want all but the deleted one", len(live), live["s-deleted"].ID != "")
	}
	for id, st := range want {
		if r := got[id]; r.Status != st || r.Node != "n1" || r.Applied != r.LastSeq || r.ProblemCount != 0 {
			t.Errorf("%s: %s on %q, applied %d of %d, %d problems; want %s on n1", id, r.Status, r.Node, r.Applied, r.LastSeq, r.ProblemCount, st)
		}
	}
	if stopped := listJSON(t, url, "--status", "stopped"); len(stopped) != 1 || stopped["s-stopped"].ID == "" {
		t.Errorf("list --status stopped = %v, want s-stopped only", stopped)
	}
	if lab := listJSON(t, url, "--label", "state=shut_down"); len(lab) != 1 || lab["s-shutdown"].ID == "" {
		t.Errorf("list --label state=shut_down = %v, want s-shutdown only", lab)
	}
	table := mustCLI(t, url, "", "sandbox", "list", "--all")
	for id, st := range want {
		if !regexp.MustCompile(`(?m)^` + id + `\s+` + string(st) + `\s+n1\s+`).MatchString(table) {
			t.Errorf("sandbox list table has no row %s %s n1:\n%s", id, st, table)
		}
	}
	out := mustCLI(t, url, "", "sandbox", "inspect", "s-failed")
	if !strings.Contains(out, "status:") || !regexp.MustCompile(`last error:\s+create at seq 2: invalid_request`).MatchString(out) {
		t.Errorf("inspect s-failed =\n%s\nwant its status and the create's error", out)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"sandbox", "inspect", "nope"}, exitFailure, "error: session_not_found: "},
		{[]string{"sandbox", "list", "--status", "weird"}, 2, "error: invalid_request: "},
		{[]string{"replay", "--verify", "--at", "3"}, 2, "error: invalid_request: "},
		{[]string{"replay", "--session", "nope"}, exitFailure, "error: session_not_found: "},
		{[]string{"events", "tail", "--since", "whenever"}, 2, "error: invalid_request: "},
	} {
		code, _, errs := cli(t, url, "", tc.args...)
		if code != tc.code || !strings.HasPrefix(errs, tc.want) {
			t.Errorf("engine %s = exit %d, %q; want %d and %q", strings.Join(tc.args, " "), code, errs, tc.code, tc.want)
		}
	}
	if out := mustCLI(t, url, "", "replay", "--verify"); !strings.HasPrefix(out, "verified: ") {
		t.Errorf("replay --verify = %q", out)
	}
	if out := mustCLI(t, url, "", "audit", "verify"); !strings.Contains(out, " 0 failures, 0 open operations") {
		t.Errorf("audit verify = %q, want no failures and nothing open", out)
	}
	// A projection edited behind the projector's back no longer verifies.
	js := testenv.JetStream(t, testenv.Connect(t, url))
	ctx := testenv.Context(t, 10*time.Second)
	kv, err := js.KeyValue(ctx, projector.SessionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	edited := got["s-running"]
	edited.Status = projection.StatusStopped
	b, _ := json.Marshal(edited)
	if _, err := kv.Put(ctx, projection.SessionKey("default", "s-running"), b); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(projection.SessionRecord{Session: projection.Session{Tenant: "default", ID: "ghost", Status: projection.StatusRunning}})
	if _, err := kv.Put(ctx, projection.SessionKey("default", "ghost"), b); err != nil {
		t.Fatal(err)
	}
	code, vout, _ := cli(t, url, "", "replay", "--verify")
	for _, want := range []string{
		`DIFFERENT session default/s-running (key default.s-running): status: kv "stopped", replay "running"`,
		`DIFFERENT session default/ghost (key default.ghost): kv present, replay missing`,
		"replay --verify: 2 differences",
	} {
		if !strings.Contains(vout, want) {
			t.Errorf("replay --verify output lacks %q:\n%s", want, vout)
		}
	}
	if code != 1 {
		t.Errorf("replay --verify of an edited projection = exit %d, want 1", code)
	}

	out = mustCLI(t, url, "", "replay", "--session", "s-restarted")
	if !strings.Contains(out, "=> running on n1 (epoch 1), seq 6") || strings.Count(out, "\n") != 7 {
		t.Errorf("replay --session s-restarted =\n%s\nwant 6 events and the running state", out)
	}
	// The state as of an earlier point: s-restarted was stopped after its
	// 4th event, which was stored before the 5th was made.
	var start events.Event
	if err := json.Unmarshal([]byte(strings.Split(mustCLI(t, url, "", "replay", "--session", "s-restarted", "--json"), "\n")[4]), &start); err != nil {
		t.Fatal(err)
	}
	out = mustCLI(t, url, "", "replay", "--session", "s-restarted", "--at", start.TS.Format(time.RFC3339Nano))
	if !strings.Contains(out, "=> stopped on n1 (epoch 1), seq 4, 0 in flight") {
		t.Errorf("replay --session s-restarted --at <time of its 5th event> =\n%s\nwant stopped at seq 4", out)
	}
}

// TestKill9UnderLoad: the engine binary is killed with SIGKILL while
// fleets drive it; after a restart on the same state dir the projector
// resumes, `replay --verify` is clean and no event was applied twice.
func TestKill9UnderLoad(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/engine")
	dir, sandboxes := t.TempDir(), t.TempDir()
	startEngine := func() (string, *exec.Cmd, *testenv.SyncBuffer) {
		t.Helper()
		return startServeBinary(t, bin, 30*time.Second, "--state-dir", dir, "--sandbox-dir", sandboxes, "--listen", "127.0.0.1:0", "--node-id", "n1", "--runtime", "local")
	}
	url, cmd, _ := startEngine()
	t.Setenv("PADDOCK_CREDS", auth.Open(auth.DirIn(dir)).CredsPath("admin"))
	nc := testenv.Connect(t, url)
	js := testenv.JetStream(t, nc)
	c, err := client.New(nc, client.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	loadCtx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() { // ends at its first error: the engine's death
			defer wg.Done()
			ctx := loadCtx
			id := fmt.Sprintf("load-%d", i)
			if _, err := c.Create(ctx, commands.CreateArgs{SessionID: id, Runtime: "local"}); err != nil {
				return
			}
			for {
				if _, err := c.Exec(ctx, id, commands.ExecArgs{Argv: []string{"true"}}); err != nil {
					return
				}
			}
		}()
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		s, err := js.Stream(context.Background(), events.DefaultStream)
		if err != nil {
			return err
		}
		if n := s.CachedInfo().State.LastSeq; n < 600 {
			return fmt.Errorf("%d events so far", n)
		}
		return nil
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	stopLoad() // requests in flight to the dead engine end now
	wg.Wait()
	nc.Close()

	url, _, logs := startEngine()
	waitProjected(t, url)
	if code, out, errs := cli(t, url, "", "replay", "--verify"); code != 0 {
		t.Fatalf("replay --verify after kill -9: exit %d\n%s%s", code, out, errs)
	}
	// Each session's record took in every event of its subject exactly once.
	nc2 := testenv.Connect(t, url)
	js2 := testenv.JetStream(t, nc2)
	ctx := testenv.Context(t, 20*time.Second)
	kv, err := js2.KeyValue(ctx, projector.SessionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := projector.ReadAll[projection.SessionRecord](ctx, kv, ">")
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js2.Stream(ctx, events.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	for k, r := range recs {
		last, err := stream.GetLastMsgForSubject(ctx, events.Subjects{}.SessionFilter(r.Tenant, r.ID))
		if err != nil {
			t.Fatal(err)
		}
		if r.Applied != r.LastSeq || r.ProblemCount != 0 || r.StreamSeq != last.Sequence {
			t.Errorf("%s: applied %d events for seq %d, %d problems, stream seq %d of %d: want each event applied once", k, r.Applied, r.LastSeq, r.ProblemCount, r.StreamSeq, last.Sequence)
		}
	}
	if len(recs) != 4 {
		t.Errorf("%d sessions projected, want 4", len(recs))
	}
	if m := regexp.MustCompile(`projector started.*checkpoint=(\d+)`).FindStringSubmatch(logs.String()); m != nil {
		t.Logf("the restarted projector resumed after checkpoint %s; the stream holds %d events", m[1], stream.CachedInfo().State.LastSeq)
	}
	if strings.Contains(logs.String(), "event not applied") {
		t.Errorf("the restarted projector recorded problems:\n%s", logs.String())
	}
	// The kill may cut operations short (open), never the chain.
	code, out, _ := cli(t, url, "", "audit", "verify")
	if code != 0 {
		t.Errorf("audit verify after kill -9: exit %d\n%s", code, out)
	}
}

// TestForgedEventFailsAudit: an event published straight into the stream
// on a session's subject (a fake finish, or an altered copy) fails
// `audit verify` with the session and seq named; the projector records it
// as a problem and goes on, and replay reports the same.
func TestForgedEventFailsAudit(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	url := st.Broker.ClientURL()
	p, err := projector.New(st.JS, projector.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, 30*time.Second)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	for _, id := range []string{"victim", "bystander"} {
		if _, err := st.Client.Create(ctx, commands.CreateArgs{SessionID: id, Runtime: "local"}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Client.Exec(ctx, id, commands.ExecArgs{Argv: []string{"sh", "-c", "exit 3"}}); err != nil {
			t.Fatal(err)
		}
	}
	if out := mustCLI(t, url, "", "audit", "verify"); !strings.Contains(out, " 0 failures") {
		t.Fatalf("audit verify before forging = %q", out)
	}
	evs, err := st.Log.Session(ctx, "default", "victim")
	if err != nil || len(evs) != 4 {
		t.Fatalf("victim has %d events, %v", len(evs), err)
	}
	publish := func(ev events.Event) {
		t.Helper()
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.JS.Publish(ctx, st.Log.Subjects().Session(ev.Tenant, ev.SessionID, ev.Op, ev.Phase), b); err != nil {
			t.Fatal(err)
		}
	}
	// An altered copy of the exec finish (exit 0 instead of 3), republished.
	altered := evs[3]
	zero := 0
	altered.ExitCode, altered.EventID = &zero, "altered-copy"
	publish(altered)
	// A fake finish with a made-up prev_hash, as the next seq.
	fake := evs[3]
	fake.Seq, fake.EventID, fake.SpanID, fake.PrevHash = 6, "fake", "made-up", strings.Repeat("ab", 32)
	publish(fake)
	// The bystander goes on.
	if _, err := st.Client.Exec(ctx, "bystander", commands.ExecArgs{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}

	testenv.Eventually(t, 20*time.Second, func() error {
		if lag, err := p.Lag(ctx); err != nil || lag > 0 {
			return fmt.Errorf("lag %d, %v", lag, err)
		}
		return nil
	})
	code, out, _ := cli(t, url, "", "audit", "verify")
	for _, want := range []string{
		"FAIL session default/victim seq 4 (stream seq ", "seq 4 follows seq 4",
		"FAIL session default/victim seq 6 (stream seq ", "broken_chain",
		"recorded by the projector",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("audit verify output lacks %q:\n%s", want, out)
		}
	}
	if code != 1 || strings.Contains(out, "bystander") {
		t.Errorf("audit verify = exit %d, want 1 naming only the victim:\n%s", code, out)
	}
	if code, out, _ := cli(t, url, "", "audit", "verify", "--session", "bystander"); code != 0 {
		t.Errorf("audit verify --session bystander = exit %d:\n%s", code, out)
	}
	if code, _, _ := cli(t, url, "", "audit", "verify", "--session", "victim"); code != 1 {
		t.Errorf("audit verify --session victim = exit %d, want 1", code)
	}
	if s := p.Stats(); s.Problems != 2 {
		t.Errorf("projector stats %+v, want 2 problems", s)
	}
	// Replay finds the same two problems, so the projection verifies.
	if out := mustCLI(t, url, "", "replay", "--verify"); !strings.HasPrefix(out, "verified: ") {
		t.Errorf("replay --verify = %q", out)
	}
	out = mustCLI(t, url, "", "replay")
	if strings.Count(out, "problem: session default/victim") != 2 {
		t.Errorf("replay shows %d victim problems, want 2:\n%s", strings.Count(out, "problem: session default/victim"), out)
	}
	if out := mustCLI(t, url, "", "sandbox", "inspect", "victim"); !strings.Contains(out, "problems:") {
		t.Errorf("inspect victim shows no problems:\n%s", out)
	}
}

// TestEventsExportAndAuditors: export writes the stored events; tail
// --since starts where asked; tail --durable resumes where the auditor
// left off.
func TestEventsExportAndAuditors(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	url := st.Broker.ClientURL()
	ctx := testenv.Context(t, 30*time.Second)
	res, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "local"})
	if err != nil {
		t.Fatal(err)
	}
	id := res.SessionID
	if _, err := st.Client.Exec(ctx, id, commands.ExecArgs{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	var stored [][]byte
	var seqs []uint64
	if err := st.Log.Read(ctx, events.ReadOptions{Filters: []string{st.Log.Subjects().SessionFilter("default", id)}}, func(m events.Msg) error {
		stored = append(stored, m.Data)
		seqs = append(seqs, m.StreamSeq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	out := mustCLI(t, url, "", "events", "export", "--session", id)
	if want := string(bytes.Join(stored, []byte("\n"))) + "\n"; out != want {
		t.Fatalf("export =\n%s\nwant the stored bytes\n%s", out, want)
	}
	lines := func(out string) int { return strings.Count(out, "\n") }
	if n := lines(mustCLI(t, url, "", "events", "tail", "--json", "--no-follow", "--since", fmt.Sprint(seqs[2]))); n != 2 {
		t.Errorf("tail --since %d printed %d events, want 2", seqs[2], n)
	}
	if n := lines(mustCLI(t, url, "", "events", "tail", "--json", "--no-follow", "--since", "1h")); n != 4 {
		t.Errorf("tail --since 1h printed %d events, want 4", n)
	}
	if n := lines(mustCLI(t, url, "", "events", "tail", "--json", "--no-follow", "--since", time.Now().Add(time.Hour).Format(time.RFC3339))); n != 0 {
		t.Errorf("tail --since <an hour ahead> printed %d events, want 0", n)
	}
	if n := lines(mustCLI(t, url, "", "--tenant", "other", "events", "tail", "--json", "--no-follow")); n != 0 {
		t.Errorf("tail of another tenant printed %d events, want 0", n)
	}
	if n := lines(mustCLI(t, url, "", "--tenant", "other", "events", "tail", "--json", "--no-follow", "--all-tenants")); n != 4 {
		t.Errorf("tail --all-tenants printed %d events, want 4", n)
	}
	// A durable auditor: everything once, then only what is new.
	if n := lines(mustCLI(t, url, "", "events", "tail", "--durable", "auditor-1", "--json", "--no-follow")); n != 4 {
		t.Errorf("first durable tail printed %d events, want 4", n)
	}
	if n := lines(mustCLI(t, url, "", "events", "tail", "--durable", "auditor-1", "--json", "--no-follow")); n != 0 {
		t.Errorf("second durable tail printed %d events, want 0", n)
	}
	if _, err := st.Client.Exec(ctx, id, commands.ExecArgs{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	out = mustCLI(t, url, "", "events", "tail", "--durable", "auditor-1", "--json", "--no-follow")
	if n := lines(out); n != 2 || !strings.Contains(out, `"seq":5`) {
		t.Errorf("third durable tail printed %d events, want the 2 new ones:\n%s", n, out)
	}
	if code, _, errs := cli(t, url, "", "events", "tail", "--durable", "auditor-1", "--since", "1", "--no-follow"); code != 2 || !strings.HasPrefix(errs, "error: invalid_request: ") {
		t.Errorf("--since on an existing durable = exit %d, %q; want invalid_request", code, errs)
	}
	// A new durable starting at a sequence.
	if n := lines(mustCLI(t, url, "", "events", "tail", "--durable", "auditor-2", "--since", fmt.Sprint(seqs[3]), "--json", "--no-follow")); n != 3 {
		t.Errorf("durable from seq %d printed %d events, want 3", seqs[3], n)
	}
	info, err := st.JS.Consumer(ctx, events.DefaultStream, "auditor-1")
	if err != nil {
		t.Fatal(err)
	}
	if ci := info.CachedInfo(); ci.Config.AckPolicy != jetstream.AckExplicitPolicy {
		t.Errorf("auditor consumer ack policy %v, want explicit", ci.Config.AckPolicy)
	}
}
