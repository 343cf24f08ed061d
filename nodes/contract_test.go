package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// rawReply sends body to subject on nc and decodes the reply.
func rawReply(t *testing.T, ctx context.Context, nc *nats.Conn, subject string, body []byte) commands.Reply {
	t.Helper()
	m, err := nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	var rep commands.Reply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		t.Fatalf("reply is not JSON: %q", m.Data)
	}
	return rep
}

// mustCreate creates a session through c, failing the test on an error.
func mustCreate(t *testing.T, ctx context.Context, c *client.Client, spec commands.CreateArgs) commands.CreateResult {
	t.Helper()
	res, err := c.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return res
}

// tenantClient returns a client of another tenant on the stack's client
// connection.
func tenantClient(t *testing.T, st *testenv.Stack, tenant string) *client.Client {
	t.Helper()
	c, err := client.New(st.ClientConn, client.Options{Tenant: tenant})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sessionEvents returns a session's stored events.
func sessionEvents(t *testing.T, st *testenv.Stack, tenant, id string) []events.Event {
	t.Helper()
	evs, err := st.Log.Session(testenv.Context(t, 10*time.Second), tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// panicky is a local runtime whose sandboxes panic in Exec when argv[0]
// is "panic", and whose Create blocks while block is set: a test double
// around the real runtime, for the node's own resilience.
type panicky struct {
	*local.Runtime
	mu      sync.Mutex
	block   chan struct{} // Create waits on it when not nil
	entered chan struct{} // closed when a Create starts waiting
}

func (p *panicky) Create(ctx context.Context, spec runtime.Spec) (runtime.Sandbox, error) {
	p.mu.Lock()
	block, entered := p.block, p.entered
	p.mu.Unlock()
	if block != nil {
		close(entered)
		<-block
	}
	sb, err := p.Runtime.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return panickySandbox{sb}, nil
}

type panickySandbox struct{ runtime.Sandbox }

func (s panickySandbox) Exec(ctx context.Context, spec runtime.ExecSpec) (runtime.ExecResult, error) {
	if spec.Argv[0] == "panic" {
		var m map[string]int
		m["boom"]++ // a nil map write: the kind of bug that took a node down
	}
	return s.Sandbox.Exec(ctx, spec)
}

func newPanicky(t *testing.T) *panicky {
	rt, err := local.New(local.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return &panicky{Runtime: rt}
}

// TestPanicIsAnOperationFailure: an op that panics is recorded with an
// internal finish and answered as internal (not retryable, no internal
// text), and the node goes on serving that session and others.
func TestPanicIsAnOperationFailure(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Runtimes: []runtime.Runtime{newPanicky(t)}})
	ctx := testenv.Context(t, 30*time.Second)
	c := st.Client
	a := mustCreate(t, ctx, c, commands.CreateArgs{})
	b := mustCreate(t, ctx, c, commands.CreateArgs{})
	_, err := c.Exec(ctx, a.SessionID, commands.ExecArgs{Argv: []string{"panic"}})
	var e *errcode.Error
	if !errors.As(err, &e) || e.Code != errcode.Internal || e.Retryable() || strings.Contains(e.Message, "nil map") {
		t.Fatalf("panicking exec: got %v, want internal, not retryable, without the panic's text", err)
	}
	for _, id := range []string{a.SessionID, b.SessionID} {
		res, err := c.Exec(ctx, id, commands.ExecArgs{Argv: []string{"echo", "alive"}})
		if err != nil || res.Stdout != "alive\n" {
			t.Fatalf("exec after the panic on %s: %+v, %v; want alive", id, res, err)
		}
	}
	evs := sessionEvents(t, st, "default", a.SessionID)
	fin := evs[3] // create start, finish, exec start, finish
	if fin.Op != "exec" || fin.Phase != events.PhaseFinish || fin.ErrorCode != string(errcode.Internal) {
		t.Fatalf("event 4 = %s %s %s, want the exec's internal finish", fin.Op, fin.Phase, fin.ErrorCode)
	}
}

// TestRepliesFit: replies that would pass the NATS max payload are paged
// (ls) or bounded after redaction (exec output), never dropped.
func TestRepliesFit(t *testing.T) {
	const secret = "Zq9!x7"
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, 90*time.Second)
	c := st.Client
	s := mustCreate(t, ctx, c, commands.CreateArgs{SecretEnv: map[string]string{"S": secret}})
	dir := filepath.Join(st.Local.WorkspaceDir("default", s.SessionID), "many")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 40000
	for i := 0; i < n; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("file-with-a-longish-name-%06d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := c.List(ctx, s.SessionID, "many")
	if err != nil || len(entries) != n {
		t.Fatalf("ls of %d entries: got %d, %v", n, len(entries), err)
	}
	for i := 1; i < len(entries); i++ {
		if entries[i-1].Name >= entries[i].Name {
			t.Fatalf("entries out of order or repeated at %d: %s, %s", i, entries[i-1].Name, entries[i].Name)
		}
	}
	page, err := c.ListPage(ctx, s.SessionID, commands.LsArgs{Path: "many", Limit: 7, After: entries[99].Name})
	if err != nil || len(page.Entries) != 7 || page.Entries[0].Name != entries[100].Name || page.Next != entries[106].Name {
		t.Fatalf("page after entry 99: %+v, %v; want entries 100..106 and next", page, err)
	}

	// 300 kB of a 4-byte secret: redaction makes it 750 kB, which must be
	// cut back to the output cap, and no secret byte must survive.
	res, err := c.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: `yes "$S" | head -c 300000`})
	if err != nil {
		t.Fatalf("exec of redaction-inflated output: %v", err)
	}
	if !res.StdoutTruncated || len(res.Stdout) > commands.MaxOutputBytes || res.StdoutBytes != 300000 || strings.Contains(res.Stdout, secret) {
		t.Fatalf("exec = %d bytes kept, %d counted, truncated %v; want at most %d kept, 300000 counted, truncated, no secret",
			len(res.Stdout), res.StdoutBytes, res.StdoutTruncated, commands.MaxOutputBytes)
	}
	// A secret cut by the cap leaves no prefix of itself.
	res, err = c.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: `printf 'abcdefg%s' "$S"`, MaxOutputBytes: 9})
	if err != nil || res.Stdout != "abcdefg[R" || strings.Contains(res.Stdout, "Zq") {
		t.Fatalf("exec cut inside a secret = %q, %v; want the cut inside [REDACTED]", res.Stdout, err)
	}
}

// TestOversizedEvent: an exec whose start event would pass the server's
// message limit is payload_too_large (not a retryable unavailable), is not
// recorded, and leaves the session serving.
func TestOversizedEvent(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, 30*time.Second)
	c := st.Client
	s := mustCreate(t, ctx, c, commands.CreateArgs{})
	// The request fits (the client checks), its start event does not.
	arg := strings.Repeat("x", commands.MaxRequestBytes-150)
	_, err := c.Exec(ctx, s.SessionID, commands.ExecArgs{Argv: []string{"echo", arg}})
	var e *errcode.Error
	if !errors.As(err, &e) || e.Code != errcode.PayloadTooLarge || e.Retryable() {
		t.Fatalf("exec with a 1 MiB argv: got %v, want payload_too_large, not retryable", err)
	}
	if n := len(sessionEvents(t, st, "default", s.SessionID)); n != 2 {
		t.Fatalf("%d events, want only the create's 2", n)
	}
	if res, err := c.Exec(ctx, s.SessionID, commands.ExecArgs{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec afterwards: %+v, %v", res, err)
	}
}

// TestCommandIDNamesOneOp: a command id reused for another op, or with
// other arguments, is invalid_request and runs nothing.
func TestCommandIDNamesOneOp(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, 30*time.Second)
	c := st.Client
	s := mustCreate(t, ctx, c, commands.CreateArgs{})
	id := client.WithCommandID("cmd-7")
	if err := c.Do(ctx, s.SessionID, commands.OpMkdir, commands.MkdirArgs{Path: "a"}, nil, id); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, s.SessionID, commands.OpRm, commands.RmArgs{Path: "a"}, nil, id); !errors.Is(err, errcode.ErrInvalidRequest) {
		t.Fatalf("same command id, another op: got %v, want invalid_request", err)
	}
	if err := c.Do(ctx, s.SessionID, commands.OpMkdir, commands.MkdirArgs{Path: "b"}, nil, id); !errors.Is(err, errcode.ErrInvalidRequest) {
		t.Fatalf("same command id, other args: got %v, want invalid_request", err)
	}
	if err := c.Do(ctx, s.SessionID, commands.OpMkdir, commands.MkdirArgs{Path: "a"}, nil, id); err != nil {
		t.Fatalf("same command id, same request: got %v, want the first outcome", err)
	}
	if n := len(sessionEvents(t, st, "default", s.SessionID)); n != 4 {
		t.Fatalf("%d events, want 4: create and one mkdir", n)
	}
	if _, err := os.Stat(filepath.Join(st.Local.WorkspaceDir("default", s.SessionID), "b")); !os.IsNotExist(err) {
		t.Fatalf("b exists (%v): the refused command ran", err)
	}
}

// TestCreateRetry: creates retried with the same command id and no
// session id, at once and after the first answered, make one session
// and one sandbox, and each gets its outcome.
func TestCreateRetry(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, 30*time.Second)
	c := st.Client
	var wg sync.WaitGroup
	results := make([]commands.CreateResult, 4)
	errs := make([]error, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = c.Create(ctx, commands.CreateArgs{}, client.WithCommandID("create-once"))
		}()
	}
	wg.Wait()
	for i := range results {
		if errs[i] != nil || results[i].SessionID != results[0].SessionID || results[i].Status != "running" {
			t.Fatalf("create %d = %+v, %v; want the one session, running", i, results[i], errs[i])
		}
	}
	again, err := c.Create(ctx, commands.CreateArgs{}, client.WithCommandID("create-once"))
	if err != nil || again.SessionID != results[0].SessionID {
		t.Fatalf("later retry = %+v, %v; want the same session", again, err)
	}
	if n := len(sessionEvents(t, st, "default", results[0].SessionID)); n != 2 {
		t.Fatalf("%d events, want one create's 2", n)
	}
	if got := st.Agent.Sessions(); len(got) != 1 {
		t.Fatalf("the node holds %v, want one session", got)
	}
	other, err := c.Create(ctx, commands.CreateArgs{}, client.WithCommandID("create-twice"))
	if err != nil || other.SessionID == results[0].SessionID {
		t.Fatalf("another command id = %+v, %v; want another session", other, err)
	}
}

// TestVersionsOnTheWire speaks to a real node as clients of other minor
// and major versions would.
func TestVersionsOnTheWire(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, 30*time.Second)
	s, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	subj := commands.Subjects{}.Session("default", s.SessionID, commands.OpExec)
	newer := commands.ContractVersion{Major: commands.ContractMajor, Minor: commands.ContractMinor + 1}.String()
	rep := rawReply(t, ctx, st.ClientConn, subj, []byte(`{"version":"`+newer+`","deadline_ms":5,"args":{"argv":["echo","hi"],"priority":3}}`))
	if rep.Error != nil || rep.Version != commands.Version {
		t.Fatalf("newer minor with new fields: %+v; want served, answered with version %s", rep, commands.Version)
	}
	var res commands.ExecResult
	if err := json.Unmarshal(rep.Result, &res); err != nil || res.Stdout != "hi\n" {
		t.Fatalf("result %s: %v", rep.Result, err)
	}
	for _, tc := range []struct {
		name, body string
		code       errcode.Code
	}{
		{"next major", `{"version":"2.0","args":{"argv":["true"]}}`, errcode.UnsupportedVersion},
		{"this minor, unknown field", `{"version":"` + commands.Version + `","args":{"argv":["true"],"priority":3}}`, errcode.InvalidRequest},
		{"duplicate key", `{"args":{"argv":["true"],"argv":["rm","-rf","/"]}}`, errcode.InvalidRequest},
	} {
		rep := rawReply(t, ctx, st.ClientConn, subj, []byte(tc.body))
		if rep.Error == nil || rep.Error.Code != tc.code {
			t.Errorf("%s: %+v, want %s", tc.name, rep.Error, tc.code)
		}
	}
	if n := len(sessionEvents(t, st, "default", s.SessionID)); n != 4 {
		t.Fatalf("%d events, want the create's and one exec's: refused requests are not operations", n)
	}
}

// TestCloseDuringCreate: a create whose sandbox is being made while the
// node closes fails as unavailable, leaves no subscription (nothing
// answers on the session's subject) and no sandbox behind.
func TestCloseDuringCreate(t *testing.T) {
	rt := newPanicky(t)
	st := testenv.StartStack(t, testenv.StackOptions{Runtimes: []runtime.Runtime{rt}, Node: nodes.Config{ID: "closing"}})
	ctx := testenv.Context(t, 30*time.Second)
	rt.mu.Lock()
	rt.block, rt.entered = make(chan struct{}), make(chan struct{})
	block, entered := rt.block, rt.entered
	rt.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := st.Client.Create(ctx, commands.CreateArgs{SessionID: "late"})
		done <- err
	}()
	<-entered
	closed := make(chan error, 1)
	go func() {
		cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		closed <- st.Agent.Close(cctx)
	}()
	testenv.Eventually(t, 10*time.Second, func() error {
		// Close has begun draining once the node's subjects are gone. A
		// ping that meets the subscription as it goes is dropped: it gets
		// no reply, so each ask has a bound of its own and is asked again.
		_, err := st.ClientConn.Request(commands.Subjects{}.Node("closing", "ping"), []byte(`{}`), 500*time.Millisecond)
		if !errors.Is(err, nats.ErrNoResponders) {
			return fmt.Errorf("not draining yet (%v)", err)
		}
		return nil
	})
	close(block)
	if err := <-done; !errors.Is(err, errcode.ErrUnavailable) {
		t.Fatalf("create during close: got %v, want unavailable", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := st.ClientConn.RequestWithContext(ctx, commands.Subjects{}.Session("default", "late", commands.OpRunning), []byte(`{}`)); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("the late session's subject: got %v, want no responders", err)
	}
	if _, err := os.Stat(rt.WorkspaceDir("default", "late")); !os.IsNotExist(err) {
		t.Fatalf("the late session's sandbox is still there (%v)", err)
	}
	evs := sessionEvents(t, st, "default", "late")
	if len(evs) != 2 || evs[1].ErrorCode != string(errcode.Unavailable) {
		t.Fatalf("events = %d, last %+v; want a create start and an unavailable finish", len(evs), evs[len(evs)-1])
	}
}

// TestPolicyRefusalsAreRecorded: with the default policy a create that
// asks for a network and an exec as root are policy_denied, not
// retryable, and both refusals are in the audit trail; the session goes
// on serving what the policy allows.
func TestPolicyRefusalsAreRecorded(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, 30*time.Second)
	c := st.Client
	_, err := c.Create(ctx, commands.CreateArgs{SessionID: "wants-net", Network: true})
	var e *errcode.Error
	if !errors.As(err, &e) || e.Code != errcode.PolicyDenied || e.Retryable() {
		t.Fatalf("create with a network: got %v, want policy_denied, not retryable", err)
	}
	evs := sessionEvents(t, st, "default", "wants-net")
	if len(evs) != 2 || evs[1].ErrorCode != string(errcode.PolicyDenied) {
		t.Fatalf("the refused create's events: %d, want its start and a policy_denied finish", len(evs))
	}
	s := mustCreate(t, ctx, c, commands.CreateArgs{})
	for _, user := range []string{"0", "root", "0:0"} {
		if _, err := c.Exec(ctx, s.SessionID, commands.ExecArgs{Argv: []string{"id"}, User: user}); !errors.Is(err, errcode.ErrPolicyDenied) {
			t.Fatalf("exec as %q: got %v, want policy_denied", user, err)
		}
	}
	if res, err := c.Exec(ctx, s.SessionID, commands.ExecArgs{Argv: []string{"echo", "ok"}}); err != nil || res.Stdout != "ok\n" {
		t.Fatalf("an allowed exec after the refusals: %+v, %v", res, err)
	}
	denied := 0
	for _, ev := range sessionEvents(t, st, "default", s.SessionID) {
		if ev.Phase == events.PhaseFinish && ev.ErrorCode == string(errcode.PolicyDenied) {
			denied++
		}
	}
	if denied != 3 {
		t.Fatalf("%d policy_denied finishes recorded, want 3", denied)
	}
}

// TestObjectsAreTenantScoped: a client cannot name another tenant's
// object of the workspace bucket as an upload to hydrate or write from
// (once, that let a tenant read another's snapshot, and the node then
// deleted it); the refusal is permission_denied and the victim's
// snapshot is still there.
func TestObjectsAreTenantScoped(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Tenant: "victim"})
	ctx := testenv.Context(t, 60*time.Second)
	victim := st.Client
	attacker := tenantClient(t, st, "attacker")
	v := mustCreate(t, ctx, victim, commands.CreateArgs{})
	if _, err := victim.WriteFile(ctx, v.SessionID, "secret.txt", []byte("the victim's"), 0); err != nil {
		t.Fatal(err)
	}
	var snap commands.SnapshotResult
	if err := victim.Do(ctx, v.SessionID, commands.OpPersist, nil, &snap); err != nil {
		t.Fatal(err)
	}
	a := mustCreate(t, ctx, attacker, commands.CreateArgs{})
	for _, name := range []string{snap.Snapshot.Name, "uploads/victim/x", "uploads/attacker/../victim/x", "uploads/attacker/", "uploads/attacker"} {
		err := attacker.Do(ctx, a.SessionID, commands.OpHydrate, commands.HydrateArgs{Upload: name}, nil)
		if !errors.Is(err, errcode.ErrPermissionDenied) {
			t.Errorf("hydrate from %q: got %v, want permission_denied", name, err)
		}
		err = attacker.Do(ctx, a.SessionID, commands.OpWrite, commands.WriteArgs{Path: "stolen", Upload: name, Size: 12}, nil)
		if !errors.Is(err, errcode.ErrPermissionDenied) {
			t.Errorf("write from %q: got %v, want permission_denied", name, err)
		}
	}
	if _, err := attacker.ReadFile(ctx, a.SessionID, "secret.txt"); !errors.Is(err, errcode.ErrNotFound) {
		t.Fatalf("the attacker's workspace: got %v, want no secret.txt", err)
	}
	if err := victim.Do(ctx, v.SessionID, commands.OpHydrate, commands.HydrateArgs{SnapshotID: snap.Snapshot.ID}, nil); err != nil {
		t.Fatalf("the victim's snapshot after the attempts: %v", err)
	}
}
