package mcpserver_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/mcpserver"
	"github.com/paddock-dev/paddock/testenv"
)

// dial connects identity name of st as engine mcp does, and closes it
// when the test ends.
func dial(t *testing.T, st *testenv.Stack, name string) *mcpserver.Dialed {
	t.Helper()
	d, err := mcpserver.Dial(mcpserver.DialConfig{Connect: client.ConnectOptions{URL: st.Broker.ClientURL(), Creds: st.Auth.CredsPath(name)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// connectInMemory serves srv on one end of an in-memory pipe (what the
// stdio transport is, on stdin and stdout) and returns a Go SDK client
// session on the other.
func connectInMemory(t *testing.T, srv *mcp.Server) *mcp.ClientSession {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// session is an MCP client session with its tools' output schemas, to
// check every result against.
type session struct {
	t       *testing.T
	cs      *mcp.ClientSession
	schemas map[string]*jsonschema.Resolved
}

func newSession(t *testing.T, cs *mcp.ClientSession) *session {
	t.Helper()
	tools, err := cs.ListTools(testenv.Context(t, 10*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &session{t: t, cs: cs, schemas: map[string]*jsonschema.Resolved{}}
	for _, tool := range tools.Tools {
		b, _ := json.Marshal(tool.OutputSchema)
		var sch jsonschema.Schema
		if err := json.Unmarshal(b, &sch); err != nil {
			t.Fatalf("%s's output schema: %v", tool.Name, err)
		}
		r, err := sch.Resolve(nil)
		if err != nil {
			t.Fatalf("%s's output schema: %v", tool.Name, err)
		}
		s.schemas[tool.Name] = r
	}
	return s
}

// call calls tool with args and returns its result, decoded into out
// when out is not nil. The result must not be an error, and its
// structured content must match the tool's output schema.
func (s *session) call(tool string, args map[string]any, out any) *mcp.CallToolResult {
	s.t.Helper()
	res := s.raw(tool, args)
	if res.IsError {
		s.t.Fatalf("%s(%v): error result %s", tool, args, text(res))
	}
	b, _ := json.Marshal(res.StructuredContent)
	var v any
	_ = json.Unmarshal(b, &v)
	if err := s.schemas[tool].Validate(v); err != nil {
		s.t.Fatalf("%s: structured content %s does not match its output schema: %v", tool, b, err)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			s.t.Fatal(err)
		}
	}
	return res
}

// raw calls tool and returns its result, error or not.
func (s *session) raw(tool string, args map[string]any) *mcp.CallToolResult {
	s.t.Helper()
	res, err := s.cs.CallTool(testenv.Context(s.t, 60*time.Second), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		s.t.Fatalf("%s: protocol error %v", tool, err)
	}
	return res
}

// wantError calls tool and wants an error result with code.
func (s *session) wantError(tool string, args map[string]any, code string) {
	s.t.Helper()
	res := s.raw(tool, args)
	var te mcpserver.ToolError
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &te)
	if !res.IsError || string(te.Error.Code) != code || !strings.HasPrefix(text(res), code+": ") {
		s.t.Fatalf("%s(%v) = error %t, %s, text %q; want an error result with code %s", tool, args, res.IsError, b, text(res), code)
	}
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestTools drives every tool through the Go SDK's client, on an
// in-memory pipe (the stdio transport's shape), against a real stack with
// auth: the tools act as the client identity, and the events record its
// NATS user as the actor of every operation.
func TestTools(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Auth: true})
	d := dial(t, st, "client")
	id := d.Identity
	id.Events = st.Log // a client may not read the stream; the engine's log stands in for an auditor's
	s := newSession(t, connectInMemory(t, mcpserver.New(id)))

	want := []string{"sandbox_create", "sandbox_exec", "sandbox_read", "sandbox_write", "sandbox_ls", "sandbox_fork", "sandbox_events", "sandbox_shutdown", "sandbox_delete"}
	for _, name := range want {
		if s.schemas[name] == nil {
			t.Fatalf("no tool %s; have %v", name, s.schemas)
		}
	}
	tools, _ := s.cs.ListTools(testenv.Context(t, 10*time.Second), nil)
	for _, tool := range tools.Tools {
		b, _ := json.Marshal(tool.InputSchema)
		var in jsonschema.Schema
		_ = json.Unmarshal(b, &in)
		for name, p := range in.Properties {
			if p.Description == "" {
				t.Errorf("%s: argument %s has no description", tool.Name, name)
			}
		}
		if tool.Description == "" || in.Type != "object" || (tool.Name != "sandbox_create" && in.Properties["session_id"] == nil) {
			t.Errorf("%s: description %q, input schema %s; want both, with a session_id", tool.Name, tool.Description, b)
		}
	}

	var created commands.CreateResult
	s.call("sandbox_create", map[string]any{"labels": map[string]string{"via": "mcp"}}, &created)
	if created.SessionID == "" || created.Status == "" {
		t.Fatalf("create = %+v", created)
	}
	sid := created.SessionID

	var wrote commands.WriteResult
	s.call("sandbox_write", map[string]any{"session_id": sid, "path": "dir/hello.txt", "content": "hello, mcp\n"}, &wrote)
	if wrote.Size != 11 {
		t.Fatalf("write = %+v; want 11 bytes", wrote)
	}
	s.call("sandbox_write", map[string]any{"session_id": sid, "path": "bin.dat", "content": "AAEC/w==", "encoding": "base64"}, nil)

	var read mcpserver.ReadOutput
	res := s.call("sandbox_read", map[string]any{"session_id": sid, "path": "dir/hello.txt"}, &read)
	if read.Content != "hello, mcp\n" || read.Encoding != "" || read.Size != 11 || text(res) != "hello, mcp\n" {
		t.Fatalf("read = %+v, text %q", read, text(res))
	}
	s.call("sandbox_read", map[string]any{"session_id": sid, "path": "bin.dat"}, &read)
	if read.Content != "AAEC/w==" || read.Encoding != "base64" {
		t.Fatalf("read of binary = %+v; want base64 AAEC/w==", read)
	}

	var ls commands.LsResult
	s.call("sandbox_ls", map[string]any{"session_id": sid}, &ls)
	var names []string
	for _, e := range ls.Entries {
		names = append(names, e.Name+":"+e.Type)
	}
	if got := strings.Join(names, " "); got != "bin.dat:file dir:dir" {
		t.Fatalf("ls = %s; want bin.dat:file dir:dir", got)
	}

	var ex commands.ExecResult
	res = s.call("sandbox_exec", map[string]any{"session_id": sid, "shell": "cat dir/hello.txt; echo oops >&2; exit 3"}, &ex)
	if ex.ExitCode != 3 || ex.Stdout != "hello, mcp\n" || ex.Stderr != "oops\n" || !strings.Contains(text(res), "exit code 3") || !strings.Contains(text(res), "hello, mcp") {
		t.Fatalf("exec = %+v, text %q", ex, text(res))
	}
	s.call("sandbox_exec", map[string]any{"session_id": sid, "argv": []string{"sh", "-c", "head -c 5000 /dev/zero | tr '\\0' x"}, "max_output_bytes": 100}, &ex)
	if ex.StdoutBytes != 5000 || len(ex.Stdout) != 100 || !ex.StdoutTruncated {
		t.Fatalf("exec capped at 100 = %d bytes kept of %d, truncated %t", len(ex.Stdout), ex.StdoutBytes, ex.StdoutTruncated)
	}

	var fork commands.ForkResult
	s.call("sandbox_fork", map[string]any{"session_id": sid}, &fork)
	if len(fork.Children) != 1 || fork.Parent.Snapshot == "" {
		t.Fatalf("fork = %+v; want one child", fork)
	}
	s.call("sandbox_read", map[string]any{"session_id": fork.Children[0], "path": "dir/hello.txt"}, &read)
	if read.Content != "hello, mcp\n" {
		t.Fatalf("the child's file = %q", read.Content)
	}

	// Events: a page at a time, every operation's actor the identity's user.
	var evs mcpserver.EventsOutput
	s.call("sandbox_events", map[string]any{"session_id": sid, "limit": 3}, &evs)
	if len(evs.Events) != 3 || !evs.More || evs.NextAfterSeq != evs.Events[2].Seq {
		t.Fatalf("events page of 3 = %d events, more %t, next %d", len(evs.Events), evs.More, evs.NextAfterSeq)
	}
	all := append([]events.Event(nil), evs.Events...)
	for evs.More {
		next := evs.NextAfterSeq
		evs = mcpserver.EventsOutput{}
		s.call("sandbox_events", map[string]any{"session_id": sid, "after_seq": next, "limit": 3}, &evs)
		all = append(all, evs.Events...)
	}
	creds, err := auth.LoadCreds(st.Auth.CredsPath("client"))
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]bool{}
	for i, ev := range all {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d; want the pages to cover every seq once", i, ev.Seq)
		}
		if ev.Phase == events.PhaseStart {
			ops[ev.Op] = true
			if ev.Actor != creds.PublicKey {
				t.Errorf("seq %d (%s start): actor %q, want the client identity's user %s", ev.Seq, ev.Op, ev.Actor, creds.PublicKey)
			}
		}
	}
	for _, op := range []string{"create", "write", "read", "ls", "exec", "fork"} {
		if !ops[op] {
			t.Errorf("no %s start among the session's events %v", op, ops)
		}
	}
	// The same read from the stream itself, as an auditor would see it.
	stored, err := st.Log.Session(testenv.Context(t, 10*time.Second), "default", sid)
	if err != nil || len(stored) != len(all) {
		t.Fatalf("the stream holds %d events (%v); the tool paged %d", len(stored), err, len(all))
	}

	for _, id := range []string{fork.Children[0], sid} {
		s.call("sandbox_delete", map[string]any{"session_id": id}, nil)
	}
	s.wantError("sandbox_exec", map[string]any{"session_id": sid, "argv": []string{"true"}}, "session_not_found")
}

// TestToolErrors: bad input and Paddock's refusals come back as tool
// errors with the errcode code, and the server goes on serving.
func TestToolErrors(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Auth: true})
	d := dial(t, st, "client")
	s := newSession(t, connectInMemory(t, mcpserver.New(d.Identity)))
	var created commands.CreateResult
	s.call("sandbox_create", nil, &created)
	sid := created.SessionID
	big := strings.Repeat("x", mcpserver.MaxFileBytes+1)
	s.call("sandbox_exec", map[string]any{"session_id": sid, "shell": "head -c 600000 /dev/zero > big"}, nil)

	for _, c := range []struct {
		name, tool string
		args       map[string]any
		code       string
	}{
		{"unknown session", "sandbox_exec", map[string]any{"session_id": "no-such-session", "argv": []string{"true"}}, "session_not_found"},
		{"unknown argument", "sandbox_exec", map[string]any{"session_id": sid, "argv": []string{"true"}, "sudo": true}, "invalid_request"},
		{"wrong type", "sandbox_ls", map[string]any{"session_id": 7}, "invalid_request"},
		{"argv and shell", "sandbox_exec", map[string]any{"session_id": sid, "argv": []string{"true"}, "shell": "true"}, "invalid_request"},
		{"output cap over the contract's", "sandbox_exec", map[string]any{"session_id": sid, "argv": []string{"true"}, "max_output_bytes": commands.MaxOutputBytes + 1}, "invalid_request"},
		{"session id not a token", "sandbox_read", map[string]any{"session_id": "a.b", "path": "x"}, "invalid_request"},
		{"escaping path", "sandbox_read", map[string]any{"session_id": sid, "path": "../../etc/passwd"}, "invalid_path"},
		{"missing file", "sandbox_read", map[string]any{"session_id": sid, "path": "nope"}, "not_found"},
		{"file over the read bound", "sandbox_read", map[string]any{"session_id": sid, "path": "big"}, "payload_too_large"},
		{"content over the write bound", "sandbox_write", map[string]any{"session_id": sid, "path": "f", "content": big}, "payload_too_large"},
		{"bad base64", "sandbox_write", map[string]any{"session_id": sid, "path": "f", "content": "%%%", "encoding": "base64"}, "invalid_request"},
		{"unknown encoding", "sandbox_write", map[string]any{"session_id": sid, "path": "f", "content": "x", "encoding": "rot13"}, "invalid_request"},
		{"bad mode", "sandbox_write", map[string]any{"session_id": sid, "path": "f", "content": "x", "mode": 1 << 20}, "invalid_request"},
		{"ls limit", "sandbox_ls", map[string]any{"session_id": sid, "limit": commands.MaxLsLimit + 1}, "invalid_request"},
		{"fork of too many", "sandbox_fork", map[string]any{"session_id": sid, "n": commands.MaxForks + 1}, "policy_denied"},
		{"events limit", "sandbox_events", map[string]any{"session_id": sid, "limit": mcpserver.MaxEvents + 1}, "invalid_request"},
		{"events as a client", "sandbox_events", map[string]any{"session_id": sid}, "permission_denied"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &session{t: t, cs: s.cs, schemas: s.schemas}
			s.wantError(c.tool, c.args, c.code)
		})
	}
	// Still serving.
	var ex commands.ExecResult
	s.call("sandbox_exec", map[string]any{"session_id": sid, "argv": []string{"echo", "alive"}}, &ex)
	if ex.Stdout != "alive\n" {
		t.Fatalf("exec after the errors = %+v", ex)
	}
	s.call("sandbox_delete", map[string]any{"session_id": sid}, nil)
}
