package nodes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/testenv"
)

const secret = "s3cr3t-v4lue-ABC"

// TestEndToEnd runs every operation through the client, the scheduler, the
// node agent and the local runtime, then checks the session's audit trail.
func TestEndToEnd(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Node: nodes.Config{Capture: nodes.Capture{Limit: 1024}}})
	ctx := testenv.Context(t, 60*time.Second)
	c := st.Client

	created, err := c.Create(ctx, commands.CreateArgs{
		Env:       map[string]string{"GREETING": "hello"},
		SecretEnv: map[string]string{"API_KEY": secret},
		Labels:    map[string]string{"team": "a"},
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	id := created.SessionID
	if created.Node != "node-1" || created.Runtime != "local" || created.Status != "running" {
		t.Fatalf("create result = %+v, want node-1/local/running", created)
	}

	type step struct {
		op       string
		ok       bool
		code     errcode.Code
		exitCode *int
	}
	var want []step
	want = append(want, step{op: "create", ok: true})
	expectOK := func(op string) { want = append(want, step{op: op, ok: true}) }
	expectErr := func(op string, code errcode.Code) { want = append(want, step{op: op, code: code}) }
	intp := func(i int) *int { return &i }

	// exec: output, env, secret redaction, exit codes, timeout.
	res, err := c.Exec(ctx, id, commands.ExecArgs{Shell: `echo "$GREETING"; echo "key=$API_KEY"; echo oops >&2; exit 3`})
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	// A command that exits non-zero ran: its finish says ok false with its
	// exit code and no error code, as the OpenAI Agents SDK's does.
	want = append(want, step{op: "exec", ok: false, exitCode: intp(3)})
	if res.ExitCode != 3 || string(res.Stdout) != "hello\nkey=[REDACTED]\n" || string(res.Stderr) != "oops\n" {
		t.Fatalf("exec = exit %d stdout %q stderr %q, want 3, hello + redacted key, oops", res.ExitCode, res.Stdout, res.Stderr)
	}
	if _, err := c.Exec(ctx, id, commands.ExecArgs{Argv: []string{"sleep", "30"}, TimeoutMS: 200}); !errors.Is(err, errcode.ErrExecTimeout) {
		t.Fatalf("exec past timeout: got %v, want exec_timeout", err)
	}
	expectErr("exec", errcode.ExecTimeout)
	if _, err := c.Exec(ctx, id, commands.ExecArgs{Argv: []string{"echo", secret}}); err != nil {
		t.Fatal(err)
	}
	want = append(want, step{op: "exec", ok: true, exitCode: intp(0)})

	// files
	if _, err := c.WriteFile(ctx, id, "dir/a.txt", []byte("alpha"), 0o600); err != nil {
		t.Fatalf("write: %v", err)
	}
	expectOK("write")
	got, err := c.ReadFile(ctx, id, "dir/a.txt")
	if err != nil || string(got) != "alpha" {
		t.Fatalf("read = %q, %v; want alpha", got, err)
	}
	expectOK("read")
	if _, err := c.ReadFile(ctx, id, "../../etc/passwd"); !errors.Is(err, errcode.ErrInvalidPath) {
		t.Fatalf("read outside: got %v, want invalid_path", err)
	}
	expectErr("read", errcode.InvalidPath)
	if _, err := c.ReadFile(ctx, id, "missing"); !errors.Is(err, errcode.ErrNotFound) {
		t.Fatalf("read missing: got %v, want not_found", err)
	}
	expectErr("read", errcode.NotFound)
	if err := c.Mkdir(ctx, id, "x/y", true); err != nil {
		t.Fatalf("mkdir -p: %v", err)
	}
	expectOK("mkdir")
	if err := c.Mkdir(ctx, id, "x", false); !errors.Is(err, errcode.ErrAlreadyExists) {
		t.Fatalf("mkdir existing: got %v, want already_exists", err)
	}
	expectErr("mkdir", errcode.AlreadyExists)
	entries, err := c.List(ctx, id, "")
	if err != nil {
		t.Fatalf("ls: %v", err)
	}
	expectOK("ls")
	var names []string
	for _, e := range entries {
		names = append(names, e.Name+":"+e.Type)
	}
	if strings.Join(names, ",") != "dir:dir,x:dir" {
		t.Fatalf("ls = %v, want dir:dir,x:dir", names)
	}
	if err := c.Remove(ctx, id, "x", false, false); !errors.Is(err, errcode.ErrInvalidRequest) {
		t.Fatalf("rm non-empty dir: got %v, want invalid_request", err)
	}
	expectErr("rm", errcode.InvalidRequest)
	if err := c.Remove(ctx, id, "x", true, false); err != nil {
		t.Fatalf("rm -r: %v", err)
	}
	expectOK("rm")
	if err := c.Remove(ctx, id, "x", true, false); !errors.Is(err, errcode.ErrNotFound) {
		t.Fatalf("rm -r of a missing path: got %v, want not_found", err)
	}
	expectErr("rm", errcode.NotFound)
	if err := c.Remove(ctx, id, "x/y/z", true, true); err != nil {
		t.Fatalf("rm -rf of a missing path: got %v, want success as rm -rf has it", err)
	}
	expectOK("rm")

	// lifecycle
	running, err := c.Running(ctx, id)
	if err != nil || !running {
		t.Fatalf("running = %v, %v; want true", running, err)
	}
	expectOK("running")
	if err := c.Stop(ctx, id); err != nil {
		t.Fatalf("stop: %v", err)
	}
	expectOK("stop")
	if running, _ := c.Running(ctx, id); running {
		t.Fatal("running after stop = true, want false")
	}
	expectOK("running")
	if _, err := c.Exec(ctx, id, commands.ExecArgs{Argv: []string{"true"}}); !errors.Is(err, errcode.ErrInvalidState) {
		t.Fatalf("exec on stopped: got %v, want invalid_state", err)
	}
	expectErr("exec", errcode.InvalidState)
	if err := c.Start(ctx, id); err != nil {
		t.Fatalf("start: %v", err)
	}
	expectOK("start")
	if err := c.Shutdown(ctx, id); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	expectOK("shutdown")
	if err := c.Delete(ctx, id); err != nil {
		t.Fatalf("delete: %v", err)
	}
	expectOK("delete")
	if _, err := c.Running(ctx, id); !errors.Is(err, errcode.ErrSessionNotFound) {
		t.Fatalf("running after delete: got %v, want session_not_found", err)
	}

	// The audit trail.
	evs, err := st.Log.Session(ctx, "default", id)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2*len(want) {
		t.Fatalf("got %d events, want %d (one start and one finish for each of %d ops)", len(evs), 2*len(want), len(want))
	}
	starts := map[string]events.Event{}
	var finishes []events.Event
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d, want %d", i, ev.Seq, i+1)
		}
		switch ev.Phase {
		case events.PhaseStart:
			starts[ev.SpanID] = ev
		case events.PhaseFinish:
			if _, ok := starts[ev.SpanID]; !ok {
				t.Fatalf("finish seq %d has no start", ev.Seq)
			}
			finishes = append(finishes, ev)
		}
		if ev.CommandID == "" || ev.Node != "node-1" || ev.Tenant != "default" {
			t.Fatalf("event seq %d lacks command id, node or tenant: %+v", ev.Seq, ev)
		}
	}
	for i, w := range want {
		f := finishes[i]
		if f.Op != w.op || f.OK == nil || *f.OK != w.ok || errcode.Code(f.ErrorCode) != w.code {
			t.Errorf("finish %d = %s ok=%v code=%q, want %s ok=%v code=%q", i, f.Op, deref(f.OK), f.ErrorCode, w.op, w.ok, w.code)
		}
		if w.exitCode != nil && (f.ExitCode == nil || *f.ExitCode != *w.exitCode) {
			t.Errorf("finish %d exit code = %v, want %d", i, f.ExitCode, *w.exitCode)
		}
		if f.DurationMS == nil {
			t.Errorf("finish %d has no duration", i)
		}
	}
	if finishes[1].Stdout != "hello\nkey=[REDACTED]\n" {
		t.Errorf("captured stdout = %q, want the redacted output", finishes[1].Stdout)
	}
	raw, err := json.Marshal(evs)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(secret)) {
		t.Fatal("a secret value appears in the event stream")
	}
	if !bytes.Contains(raw, []byte("API_KEY")) {
		t.Fatal("the secret's name is missing from the create event")
	}
	state, err := projection.Fold(evs)
	if err != nil || state.Status != projection.StatusDeleted || len(state.InFlight) != 0 {
		t.Fatalf("folded state = %s with %d in flight, err %v; want deleted, none in flight", state.Status, len(state.InFlight), err)
	}
	checkHashChain(t, st.Log, "default", id)
}

// checkHashChain reads a session's stored events and checks that each
// carries the hash of the stored bytes of the one before it.
func checkHashChain(t *testing.T, log *events.Log, tenant, session string) {
	t.Helper()
	prev, n := "", 0
	err := log.Read(testenv.Context(t, 10*time.Second), events.ReadOptions{
		Filters: []string{log.Subjects().SessionFilter(tenant, session)},
	}, func(m events.Msg) error {
		ev, err := m.Decode()
		if err != nil {
			return err
		}
		if ev.PrevHash != prev {
			return fmt.Errorf("seq %d has prev_hash %q, want %q", ev.Seq, ev.PrevHash, prev)
		}
		prev = events.Hash(m.Data)
		n++
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("hash chain of %d events: %v", n, err)
	}
}

func deref(b *bool) bool { return b != nil && *b }

// TestBadInput sends malformed and hostile requests; each gets its typed
// error, and a bystander session is untouched.
func TestBadInput(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, 60*time.Second)
	c := st.Client
	bystander, err := c.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(ctx, bystander.SessionID, "keep.txt", []byte("safe"), 0); err != nil {
		t.Fatal(err)
	}
	victim, err := c.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	subj := commands.Subjects{}
	raw := func(subject string, body []byte) (*commands.WireError, error) {
		t.Helper()
		m, err := st.ClientConn.RequestWithContext(ctx, subject, body)
		if err != nil {
			return nil, err
		}
		var rep commands.Reply
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Fatalf("reply is not JSON: %q", m.Data)
		}
		return rep.Error, nil
	}
	vs := func(op string) string { return subj.Session("default", victim.SessionID, commands.Op(op)) }
	cases := []struct {
		name    string
		subject string
		body    []byte
		want    errcode.Code
	}{
		{"malformed json", vs("exec"), []byte(`{"args":`), errcode.InvalidRequest},
		{"not an object", vs("exec"), []byte(`[1,2]`), errcode.InvalidRequest},
		{"unknown envelope field", vs("ls"), []byte(`{"bogus":1}`), errcode.InvalidRequest},
		{"unknown args field", vs("ls"), []byte(`{"args":{"path":".","bogus":true}}`), errcode.InvalidRequest},
		{"trailing data", vs("ls"), []byte(`{} {}`), errcode.InvalidRequest},
		{"unknown op", vs("explode"), []byte(`{}`), errcode.UnknownOp},
		{"exec without command", vs("exec"), []byte(`{"args":{}}`), errcode.InvalidRequest},
		{"exec argv and shell", vs("exec"), []byte(`{"args":{"argv":["true"],"shell":"true"}}`), errcode.InvalidRequest},
		{"negative timeout", vs("exec"), []byte(`{"args":{"argv":["true"],"timeout_ms":-1}}`), errcode.InvalidRequest},
		{"bad command id", vs("ls"), []byte(`{"command_id":"a.>"}`), errcode.InvalidRequest},
		{"path escape", vs("read"), []byte(`{"args":{"path":"../../../etc/passwd"}}`), errcode.InvalidPath},
		{"absolute path outside", vs("read"), []byte(`{"args":{"path":"/etc/passwd"}}`), errcode.InvalidPath},
		{"oversized write", vs("write"), mustJSON(t, commands.Request{Args: mustJSON(t, commands.WriteArgs{Path: "big", Content: make([]byte, commands.InlineLimit+1)})}), errcode.PayloadTooLarge},
		{"create bad tenant spec", subj.Create("default"), []byte(`{"args":{"session_id":"a*b"}}`), errcode.InvalidRequest},
		{"create bad runtime", subj.Create("default"), []byte(`{"args":{"runtime":"vm"}}`), errcode.InvalidRequest},
		{"create absurd memory", subj.Create("default"), []byte(`{"args":{"memory_bytes":-5}}`), errcode.InvalidRequest},
		{"create unknown field", subj.Create("default"), []byte(`{"args":{"imagee":"x"}}`), errcode.InvalidRequest},
		{"create runtime nobody has", subj.Create("default"), []byte(`{"args":{"runtime":"docker"}}`), errcode.NoCapacity},
		{"duplicate create", subj.Create("default"), []byte(`{"args":{"session_id":"` + victim.SessionID + `"}}`), errcode.AlreadyExists},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			we, err := raw(tc.subject, tc.body)
			if err != nil {
				t.Fatalf("request: %v", err)
			}
			if we == nil || we.Code != tc.want {
				t.Fatalf("got error %+v, want code %s", we, tc.want)
			}
			if we.Retryable != tc.want.Retryable() {
				t.Fatalf("retryable = %v, want %v", we.Retryable, tc.want.Retryable())
			}
		})
	}

	// Invalid subject tokens never reach a subject.
	for _, bad := range []string{"", "a.b", "a*", "a>", "a b", ">"} {
		if _, err := c.Running(ctx, bad); !errors.Is(err, errcode.ErrInvalidRequest) {
			t.Errorf("session id %q: got %v, want invalid_request", bad, err)
		}
	}
	// An unknown session.
	if _, err := c.Running(ctx, "no-such-session"); !errors.Is(err, errcode.ErrSessionNotFound) {
		t.Fatalf("unknown session: got %v, want session_not_found", err)
	}
	// A request over the NATS max payload is refused before it is sent
	// (WriteFile would send such content through the workspace bucket).
	if err := c.Do(ctx, victim.SessionID, commands.OpWrite, commands.WriteArgs{Path: "huge", Content: make([]byte, 2<<20)}, nil); !errors.Is(err, errcode.ErrPayloadTooLarge) {
		t.Fatalf("2 MiB inline write: got %v, want payload_too_large", err)
	}
	// Inline content over the inline limit is refused by the node too.
	if err := c.Do(ctx, victim.SessionID, commands.OpWrite, commands.WriteArgs{Path: "big", Content: make([]byte, commands.InlineLimit+1)}, nil); !errors.Is(err, errcode.ErrPayloadTooLarge) {
		t.Fatalf("inline write over the limit: got %v, want payload_too_large", err)
	}
	// An upload that does not exist.
	if err := c.Do(ctx, victim.SessionID, commands.OpWrite, commands.WriteArgs{Path: "big", Upload: "uploads/default/nope", Size: 10}, nil); !errors.Is(err, errcode.ErrNotFound) {
		t.Fatalf("write from a missing upload: got %v, want not_found", err)
	}
	// The bystander is untouched.
	got, err := c.ReadFile(ctx, bystander.SessionID, "keep.txt")
	if err != nil || string(got) != "safe" {
		t.Fatalf("bystander read = %q, %v; want safe", got, err)
	}
	if ok, err := c.Running(ctx, victim.SessionID); err != nil || !ok {
		t.Fatalf("victim running = %v, %v; want true", ok, err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCommandIDRetry shows that a retried command id runs once and gets
// the first result.
func TestCommandIDRetry(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, 30*time.Second)
	c := st.Client
	s, err := c.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	var first, second commands.ExecResult
	args := commands.ExecArgs{Shell: "echo run >> count; wc -l < count"}
	if err := c.Do(ctx, s.SessionID, commands.OpExec, args, &first, client.WithCommandID("cmd-1")); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, s.SessionID, commands.OpExec, args, &second, client.WithCommandID("cmd-1")); err != nil {
		t.Fatal(err)
	}
	if string(first.Stdout) != "1\n" || string(second.Stdout) != "1\n" {
		t.Fatalf("outputs = %q, %q; want the first result twice", first.Stdout, second.Stdout)
	}
	evs, err := st.Log.Session(ctx, "default", s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 4 { // create start/finish, one exec start/finish
		t.Fatalf("got %d events, want 4: the retry must not run again", len(evs))
	}
}

// TestNodeGone shows that a session whose node has stopped fails fast with
// unavailable, not a hang.
func TestNodeGone(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, 30*time.Second)
	s, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := st.Agent.Close(cctx); err != nil {
		t.Fatal(err)
	}
	_, err = st.Client.Running(ctx, s.SessionID)
	if !errors.Is(err, errcode.ErrUnavailable) {
		t.Fatalf("got %v, want unavailable", err)
	}
	var e *errcode.Error
	if !errors.As(err, &e) || !e.Retryable() {
		t.Fatalf("error %v is not a retryable *errcode.Error", err)
	}
}
