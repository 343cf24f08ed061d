package client_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/testenv"
)

// bare is a broker with no engine: the test plays the server on srv.
type bare struct {
	srv *nats.Conn // the test's server side
	nc  *nats.Conn // the client's connection
}

func startBare(t *testing.T) bare {
	t.Helper()
	b := testenv.StartBroker(t)
	return bare{srv: testenv.Connect(t, b.ClientURL()), nc: testenv.Connect(t, b.ClientURL())}
}

func (b bare) client(t *testing.T, opts client.Options) *client.Client {
	t.Helper()
	c, err := client.New(b.nc, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// serve answers every request on subject with reply(msg) and returns the
// requests it got.
func (b bare) serve(t *testing.T, subject string, reply func(*nats.Msg) []byte) func() []*nats.Msg {
	t.Helper()
	var mu sync.Mutex
	var got []*nats.Msg
	sub, err := b.srv.Subscribe(subject, func(m *nats.Msg) {
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
		if body := reply(m); body != nil {
			_ = m.Respond(body)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := b.srv.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() []*nats.Msg {
		mu.Lock()
		defer mu.Unlock()
		return append([]*nats.Msg(nil), got...)
	}
}

func emptyResult(*nats.Msg) []byte {
	b, _ := commands.ResultReply(struct{}{})
	return b
}

// TestNewRefusesInvalidTenant: a tenant that is not one subject token is
// refused as invalid_request; an empty one is "default".
func TestNewRefusesInvalidTenant(t *testing.T) {
	b := startBare(t)
	cases := []struct {
		tenant string
		want   string // the tenant the client uses; "" means refused
	}{
		{"", "default"},
		{"acme", "acme"},
		{"team-1_a", "team-1_a"},
		{"a.b", ""},
		{"a.>", ""},
		{"*", ""},
		{"a b", ""},
		{"a/b", ""},
		{`a\b`, ""},
		{"a\x00b", ""},
		{strings.Repeat("t", commands.MaxTokenLen+1), ""},
	}
	for _, tc := range cases {
		c, err := client.New(b.nc, client.Options{Tenant: tc.tenant})
		if tc.want == "" {
			if !errors.Is(err, errcode.ErrInvalidRequest) {
				t.Errorf("New(tenant %q): got %v, want invalid_request", tc.tenant, err)
			}
			continue
		}
		if err != nil || c.Tenant() != tc.want {
			t.Errorf("New(tenant %q): got %v, tenant %v; want tenant %q", tc.tenant, err, c, tc.want)
		}
	}
}

// TestRequestEnvelope: every request goes to its subject in the versioned
// envelope, with a fresh command id unless one is given, the actor, the
// trace, and args a strict server decodes.
func TestRequestEnvelope(t *testing.T) {
	b := startBare(t)
	got := b.serve(t, "sbx.cmd.acme.>", emptyResult)
	c := b.client(t, client.Options{Tenant: "acme", Actor: "agent-7"})
	ctx := testenv.Context(t, 10*time.Second)
	cases := []struct {
		name    string
		call    func() error
		subject string
		args    any // a pointer to decode the args into; nil: no args
		check   func(r commands.Request, args any) error
	}{
		{
			name: "exec with command id and trace",
			call: func() error {
				_, err := c.Exec(ctx, "s1", commands.ExecArgs{Argv: []string{"echo", "hi"}}, client.WithCommandID("cmd-1"), client.WithTrace("trace-1", "span-1"))
				return err
			},
			subject: "sbx.cmd.acme.s1.exec",
			args:    &commands.ExecArgs{},
			check: func(r commands.Request, args any) error {
				a := args.(*commands.ExecArgs)
				if r.CommandID != "cmd-1" || r.TraceID != "trace-1" || r.ParentSpanID != "span-1" {
					return fmt.Errorf("command id, trace = %q, %q, %q; want cmd-1, trace-1, span-1", r.CommandID, r.TraceID, r.ParentSpanID)
				}
				if len(a.Argv) != 2 || a.Argv[1] != "hi" {
					return fmt.Errorf("argv = %q, want [echo hi]", a.Argv)
				}
				return nil
			},
		},
		{
			name:    "running",
			call:    func() error { _, err := c.Running(ctx, "s1"); return err },
			subject: "sbx.cmd.acme.s1.running",
		},
		{
			name:    "read",
			call:    func() error { _, err := c.ReadFile(ctx, "s1", "src/a.go"); return err },
			subject: "sbx.cmd.acme.s1.read",
			args:    &commands.ReadArgs{},
			check: func(_ commands.Request, args any) error {
				if p := args.(*commands.ReadArgs).Path; p != "src/a.go" {
					return fmt.Errorf("path = %q, want src/a.go", p)
				}
				return nil
			},
		},
		{
			name: "create",
			call: func() error {
				_, err := c.Create(ctx, commands.CreateArgs{Labels: map[string]string{"k": "v"}})
				return err
			},
			subject: "sbx.cmd.acme.create",
			args:    &commands.CreateArgs{},
			check: func(_ commands.Request, args any) error {
				if v := args.(*commands.CreateArgs).Labels["k"]; v != "v" {
					return fmt.Errorf("label k = %q, want v", v)
				}
				return nil
			},
		},
		{
			name:    "lookup",
			call:    func() error { _, err := c.Lookup(ctx, "s2"); return err },
			subject: "sbx.cmd.acme.lookup",
			args:    &commands.LookupArgs{},
			check: func(_ commands.Request, args any) error {
				if id := args.(*commands.LookupArgs).SessionID; id != "s2" {
					return fmt.Errorf("session_id = %q, want s2", id)
				}
				return nil
			},
		},
		{
			name:    "delete",
			call:    func() error { return c.Delete(ctx, "s1") },
			subject: "sbx.cmd.acme.s1.delete",
		},
	}
	ids := map[string]bool{}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); err != nil {
				t.Fatalf("call: %v", err)
			}
			msgs := got()
			if len(msgs) != i+1 {
				t.Fatalf("server got %d requests, want %d", len(msgs), i+1)
			}
			m := msgs[i]
			if m.Subject != tc.subject {
				t.Errorf("subject %q, want %q", m.Subject, tc.subject)
			}
			var raw map[string]json.RawMessage
			if err := json.Unmarshal(m.Data, &raw); err != nil {
				t.Fatal(err)
			}
			if string(raw["version"]) != `"`+commands.Version+`"` {
				t.Errorf("version member %s, want %q", raw["version"], commands.Version)
			}
			r, err := commands.DecodeRequest(m.Data, tc.args)
			if err != nil {
				t.Fatalf("a strict server refuses the request %s: %v", m.Data, err)
			}
			if r.Actor != "agent-7" {
				t.Errorf("actor %q, want agent-7", r.Actor)
			}
			if err := commands.CheckToken("command id", r.CommandID); err != nil {
				t.Errorf("command id: %v", err)
			}
			if ids[r.CommandID] {
				t.Errorf("command id %q used twice", r.CommandID)
			}
			ids[r.CommandID] = true
			if tc.args == nil && len(r.Args) != 0 {
				t.Errorf("args %s, want none", r.Args)
			}
			if tc.check != nil {
				if err := tc.check(r, tc.args); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestReplies: a server's error comes back as an *errcode.Error that
// matches its code with errors.Is and keeps its message; a reply that is
// not a reply is internal.
func TestReplies(t *testing.T) {
	cases := []struct {
		name      string
		body      []byte
		want      error
		message   string
		retryable bool
	}{
		{"not found", commands.ErrorReply(errcode.New(errcode.NotFound, "no file a.txt")), errcode.ErrNotFound, "no file a.txt", false},
		{"invalid path", commands.ErrorReply(errcode.New(errcode.InvalidPath, "escapes")), errcode.ErrInvalidPath, "escapes", false},
		{"concurrency conflict", commands.ErrorReply(errcode.New(errcode.ConcurrencyConflict, "raced")), errcode.ErrConcurrencyConflict, "raced", true},
		{"unavailable", commands.ErrorReply(errcode.New(errcode.Unavailable, "node busy")), errcode.ErrUnavailable, "node busy", true},
		{"cause stays off the wire", commands.ErrorReply(errors.New("secret detail")), errcode.ErrInternal, "internal error", false},
		{"not JSON", []byte("<html>"), errcode.ErrInternal, "", false},
		{"empty", []byte{}, errcode.ErrInternal, "", false},
		{"result of the wrong shape", []byte(`{"version":"1.0","result":"yes"}`), errcode.ErrInternal, "", false},
	}
	b := startBare(t)
	c := b.client(t, client.Options{})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := "s-" + uuid.NewString()[:8]
			b.serve(t, "sbx.cmd.default."+id+".running", func(*nats.Msg) []byte { return tc.body })
			running, err := c.Running(testenv.Context(t, 10*time.Second), id)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v (running %v), want %v", err, running, tc.want)
			}
			var e *errcode.Error
			if !errors.As(err, &e) {
				t.Fatalf("%T is not an *errcode.Error", err)
			}
			if tc.message != "" && e.Message != tc.message {
				t.Errorf("message %q, want %q", e.Message, tc.message)
			}
			if e.Retryable() != tc.retryable {
				t.Errorf("retryable %v, want %v", e.Retryable(), tc.retryable)
			}
			if strings.Contains(err.Error(), "secret detail") {
				t.Errorf("error %q carries the server's cause", err)
			}
		})
	}
}

// TestNoResponders: a session no node serves is explained by the
// engine's lookup: session_not_found when it never existed or was
// deleted, unavailable (retryable) when its node is gone; with no engine
// at all it is unavailable.
func TestNoResponders(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, time.Minute)
	gone, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	deleted, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Client.Delete(ctx, deleted.SessionID); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := st.Agent.Close(cctx); err != nil {
		t.Fatal(err)
	}
	noEngine := startBare(t).client(t, client.Options{})
	cases := []struct {
		name      string
		c         *client.Client
		id        string
		want      error
		retryable bool
	}{
		{"unknown session", st.Client, uuid.NewString(), errcode.ErrSessionNotFound, false},
		{"deleted session", st.Client, deleted.SessionID, errcode.ErrSessionNotFound, false},
		{"node gone", st.Client, gone.SessionID, errcode.ErrUnavailable, true},
		{"no engine", noEngine, uuid.NewString(), errcode.ErrUnavailable, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.c.Exec(ctx, tc.id, commands.ExecArgs{Argv: []string{"true"}})
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			var e *errcode.Error
			if !errors.As(err, &e) || e.Retryable() != tc.retryable {
				t.Fatalf("error %v: retryable %v, want %v", err, e != nil && e.Retryable(), tc.retryable)
			}
		})
	}
	if _, err := noEngine.Lookup(ctx, uuid.NewString()); !errors.Is(err, errcode.ErrUnavailable) {
		t.Errorf("lookup with no engine: got %v, want unavailable", err)
	}
}

// TestDeadline: a server that does not answer in time is unavailable,
// whether the deadline is the caller's or the client's default timeout.
func TestDeadline(t *testing.T) {
	b := startBare(t)
	got := b.serve(t, "sbx.cmd.default.slow.>", func(*nats.Msg) []byte { return nil })
	cases := []struct {
		name string
		opts client.Options
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"caller's deadline", client.Options{}, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 200*time.Millisecond)
		}},
		{"client's timeout", client.Options{Timeout: 200 * time.Millisecond}, func() (context.Context, context.CancelFunc) {
			// No deadline: the client's own timeout applies.
			return context.WithCancel(context.Background())
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := b.client(t, tc.opts)
			ctx, cancel := tc.ctx()
			defer cancel()
			begin := time.Now()
			_, err := c.Running(ctx, "slow")
			if !errors.Is(err, errcode.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("got %v, want unavailable from the deadline", err)
			}
			if took := time.Since(begin); took > 10*time.Second {
				t.Errorf("gave up after %s, want about 200ms", took)
			}
			if n := len(got()); n != i+1 {
				t.Errorf("server got %d requests, want %d", n, i+1)
			}
		})
	}
}

// TestPayloadTooLarge: a request over the limit is payload_too_large and
// is not sent.
func TestPayloadTooLarge(t *testing.T) {
	b := startBare(t)
	seen := make(chan string, 16)
	sub, err := b.srv.Subscribe(">", func(m *nats.Msg) { seen <- m.Subject })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := b.srv.Flush(); err != nil {
		t.Fatal(err)
	}
	c := b.client(t, client.Options{})
	ctx := testenv.Context(t, 10*time.Second)
	_, err = c.Exec(ctx, "s1", commands.ExecArgs{Shell: strings.Repeat("x", commands.MaxRequestBytes)})
	if !errors.Is(err, errcode.ErrPayloadTooLarge) {
		t.Fatalf("got %v, want payload_too_large", err)
	}
	// Whatever the client published before this marker arrives before it.
	if err := b.nc.Publish("test.marker", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case subj := <-seen:
		if subj != "test.marker" {
			t.Fatalf("the server got %s before the marker, want nothing sent", subj)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the marker did not arrive")
	}
}

// TestListPages: ListPage walks a directory larger than a page in name
// order with Next, and List gathers all of it, past the server's default
// page size.
func TestListPages(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, time.Minute)
	s, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	const n = commands.DefaultLsLimit + 5
	res, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{
		Shell: fmt.Sprintf(`mkdir big && i=0; while [ $i -lt %d ]; do : > "big/$(printf f%%04d $i)"; i=$((i+1)); done`, n),
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("make files: %+v, %v", res, err)
	}
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("f%04d", i)
	}

	const limit = 100
	var paged []string
	args := commands.LsArgs{Path: "big", Limit: limit}
	pages := 0
	for {
		page, err := st.Client.ListPage(ctx, s.SessionID, args)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(page.Entries) > limit {
			t.Fatalf("page %d has %d entries, want at most %d", pages, len(page.Entries), limit)
		}
		for _, e := range page.Entries {
			paged = append(paged, e.Name)
		}
		if page.Next == "" {
			break
		}
		if pages > n {
			t.Fatal("ListPage does not end")
		}
		args.After = page.Next
	}
	if wantPages := (n + limit - 1) / limit; pages != wantPages {
		t.Errorf("%d pages, want %d", pages, wantPages)
	}
	if !slicesEqual(paged, want) {
		t.Errorf("paged names (%d) differ from the %d files made", len(paged), n)
	}

	all, err := st.Client.List(ctx, s.SessionID, "big")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range all {
		names = append(names, e.Name)
		if e.Type != "file" {
			t.Errorf("%s: type %q, want file", e.Name, e.Type)
		}
	}
	if !slicesEqual(names, want) {
		t.Errorf("List gave %d names, want the %d files in order", len(names), n)
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestFileTransfers: files up to the inline limit travel in the request
// and reply; larger ones through temporary objects of the workspace
// bucket, which are gone once the write and the read are done.
func TestFileTransfers(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, 2*time.Minute)
	s, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	obs, err := st.JS.ObjectStore(ctx, objectstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	bucketSeq := func() uint64 {
		t.Helper()
		info, err := obs.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.(*jetstream.ObjectBucketStatus).StreamInfo().State.LastSeq
	}
	cases := []struct {
		name        string
		size        int
		viaTheStore bool
	}{
		{"small", 10, false},
		{"at the inline limit", commands.InlineLimit, false},
		{"one byte over", commands.InlineLimit + 1, true},
		{"several chunks", 3*commands.InlineLimit + 12345, true},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := make([]byte, tc.size)
			for i := range data {
				data[i] = byte(rng.UintN(256))
			}
			sum := sha256.Sum256(data)
			path := "files/" + strings.ReplaceAll(tc.name, " ", "-")
			before := bucketSeq()
			w, err := st.Client.WriteFrom(ctx, s.SessionID, path, bytes.NewReader(data), 0o600)
			if err != nil {
				t.Fatalf("write: %v", err)
			}
			if w.Size != int64(tc.size) || w.SHA256 != hex.EncodeToString(sum[:]) {
				t.Fatalf("write = %+v, want size %d sha256 %x", w, tc.size, sum)
			}
			var buf bytes.Buffer
			n, err := st.Client.ReadTo(ctx, s.SessionID, path, &buf)
			if err != nil || n != int64(tc.size) {
				t.Fatalf("read = %d, %v; want %d bytes", n, err, tc.size)
			}
			if !bytes.Equal(buf.Bytes(), data) {
				t.Fatalf("read back %d bytes that differ from the %d written", buf.Len(), len(data))
			}
			if used := bucketSeq() != before; used != tc.viaTheStore {
				t.Errorf("went through the workspace bucket: %v, want %v", used, tc.viaTheStore)
			}
			objs, err := obs.List(ctx)
			if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
				t.Fatal(err)
			}
			for _, o := range objs {
				t.Errorf("object %s (%d bytes) left in the bucket, want none", o.Name, o.Size)
			}
		})
	}
}

// TestRemove: a missing path is not_found unless force is set.
func TestRemove(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, time.Minute)
	s, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.WriteFile(ctx, s.SessionID, "dir/a.txt", []byte("a"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.WriteFile(ctx, s.SessionID, "b.txt", []byte("b"), 0); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name             string
		path             string
		recursive, force bool
		want             error
		gone             bool
	}{
		{"missing, forced", "nope.txt", false, true, nil, true},
		{"missing in a missing dir, forced", "no/such/file", false, true, nil, true},
		{"missing", "nope.txt", false, false, errcode.ErrNotFound, true},
		{"file, forced", "b.txt", false, true, nil, true},
		{"escape, forced", "../outside", false, true, errcode.ErrInvalidPath, false},
		{"tree, recursive and forced", "dir", true, true, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := st.Client.Remove(ctx, s.SessionID, tc.path, tc.recursive, tc.force)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !tc.gone {
				return
			}
			if _, err := st.Client.List(ctx, s.SessionID, tc.path); !errors.Is(err, errcode.ErrNotFound) {
				t.Errorf("after rm, ls %s: got %v, want not_found", tc.path, err)
			}
		})
	}
}
