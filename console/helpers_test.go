package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/console"
	"github.com/paddock-dev/paddock/testenv"
)

// Tokens of the test's viewers (at least mcpserver.MinTokenBytes).
var (
	adminToken   = strings.Repeat("ad", 20)
	aliceToken   = strings.Repeat("a1", 20) // client of tenant default
	malloryToken = strings.Repeat("e7", 20) // client of tenant evil
	auditorToken = strings.Repeat("0a", 20) // auditor of tenant default
)

// xss is a payload the tests put in labels and argv: the pages must show
// it as text.
const xss = `<script>alert(1)</script><img src=x onerror=alert(2)>`

// world is a real Paddock (embedded NATS with auth, scheduler, a node on
// the local runtime, projector) with sessions of two tenants, and the
// console over it.
type world struct {
	st      *testenv.Stack
	srv     *httptest.Server
	h       *console.Handler
	alice   string // a session of tenant default, with ops
	failing string // a session of tenant default whose history was forged
	child   string // a fork of alice's session
	evil    string // a session of tenant evil
}

// startWorld starts the stack and the console (cfg's Tokens are set).
func startWorld(t *testing.T, cfg console.Config) *world {
	t.Helper()
	w := &world{st: testenv.StartStack(t, testenv.StackOptions{Auth: true, OtherTenants: []string{"evil"}})}
	testenv.StartProjector(t, w.st.JS)
	ctx := testenv.Context(t, 60*time.Second)
	c := w.st.Client
	s, err := c.Create(ctx, commands.CreateArgs{Runtime: "local", Labels: map[string]string{"team": "blue", "note": xss}})
	if err != nil {
		t.Fatal(err)
	}
	w.alice = s.SessionID
	if _, err := c.Exec(ctx, w.alice, commands.ExecArgs{Argv: []string{"sh", "-c", "echo hi > out.txt; exit 3", xss}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(ctx, w.alice, "notes/a.txt", []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	fr, err := c.Fork(ctx, w.alice, commands.ForkRequest{SessionID: w.alice, N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(fr.Children) != 1 {
		t.Fatalf("fork made %v, want one child", fr.Children)
	}
	w.child = fr.Children[0]
	f, err := c.Create(ctx, commands.CreateArgs{Runtime: "local", Labels: map[string]string{"team": "red"}})
	if err != nil {
		t.Fatal(err)
	}
	w.failing = f.SessionID
	evilClient, err := client.New(testenv.ConnectAs(t, w.st.Broker.ClientURL(), w.st.Auth.CredsPath("evil")).Conn, client.Options{Tenant: "evil"})
	if err != nil {
		t.Fatal(err)
	}
	e, err := evilClient.Create(ctx, commands.CreateArgs{Runtime: "local", Labels: map[string]string{"team": "evil"}})
	if err != nil {
		t.Fatal(err)
	}
	w.evil = e.SessionID
	if _, err := evilClient.Exec(ctx, w.evil, commands.ExecArgs{Argv: []string{"echo", "evil-secret-argv"}}); err != nil {
		t.Fatal(err)
	}
	cfg.Tokens = console.NewTokens(map[string]console.Viewer{
		adminToken:   {Name: "admin", Role: auth.RoleAdmin},
		aliceToken:   {Name: "client", Role: auth.RoleClient, Tenant: "default"},
		malloryToken: {Name: "evil", Role: auth.RoleClient, Tenant: "evil"},
		auditorToken: {Name: "aud", Role: auth.RoleAuditor, Tenant: "default"},
	})
	h, err := console.NewHandler(console.NewReader(w.st.JS, w.st.Auth.Dir()), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.h = h
	w.srv = httptest.NewServer(h)
	t.Cleanup(w.srv.Close)
	// The projection has every session once the sessions page lists them.
	testenv.Eventually(t, 20*time.Second, func() error {
		_, body := w.get(t, "/", adminToken)
		for _, id := range []string{w.alice, w.failing, w.child, w.evil} {
			if !strings.Contains(body, id) {
				return errf("sessions page lacks %s", id)
			}
		}
		return nil
	})
	return w
}

// get fetches path with token as a bearer ("" none) and returns the
// status and body.
func (w *world) get(t *testing.T, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, w.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return do(t, w.srv.Client(), req)
}

func do(t *testing.T, c *http.Client, req *http.Request) (int, string) {
	t.Helper()
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Header.Get("Content-Security-Policy"); got != console.CSP {
		t.Errorf("%s %s: CSP %q, want %q", req.Method, req.URL.Path, got, console.CSP)
	}
	return res.StatusCode, string(b)
}
