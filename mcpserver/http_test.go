package mcpserver_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/mcpserver"
	"github.com/paddock-dev/paddock/testenv"
)

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// connectHTTP returns a Go SDK client session on url with token.
func connectHTTP(t *testing.T, url, token string) *mcp.ClientSession {
	t.Helper()
	tr := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}, MaxRetries: -1}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(testenv.Context(t, 30*time.Second), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// post sends body to url with the headers of an MCP POST, and token
// unless empty, and returns the status.
func post(t *testing.T, url, token, session string, body io.Reader) int {
	t.Helper()
	return postHost(t, url, "", token, session, body)
}

// postHost is post with a Host header of host (unless empty).
func postHost(t *testing.T, url, host, token, session string, body io.Reader) int {
	t.Helper()
	req, err := http.NewRequestWithContext(testenv.Context(t, 30*time.Second), http.MethodPost, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`

// TestHTTP serves two tenants' identities on one streamable HTTP endpoint,
// each behind its own bearer token, and attacks it: no token, a wrong or
// short token, a foreign Host through localhost (DNS rebinding), a token
// of tenant evil naming tenant default's session, a token riding another
// token's MCP session, an oversize body. Each fails;
// the rightful caller's tools work, as its identity.
func TestHTTP(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Auth: true, OtherTenants: []string{"evil"}})
	dir := t.TempDir()
	alice, mallory := strings.Repeat("a1", 20), strings.Repeat("e9", 20)
	tf := mcpserver.TokensFile{Tokens: []mcpserver.TokenEntry{
		{SHA256: mcpserver.TokenDigest(alice), Creds: st.Auth.CredsPath("client")},
		{SHA256: mcpserver.TokenDigest(mallory), Creds: st.Auth.CredsPath("evil")},
	}}
	b, _ := json.Marshal(tf)
	path := filepath.Join(dir, "tokens.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	tf, err := mcpserver.LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	var servers []*mcp.Server
	for i, e := range tf.Tokens {
		d := dial(t, st, []string{"client", "evil"}[i])
		if d.Identity.Client.Tenant() != []string{"default", "evil"}[i] || e.Creds != st.Auth.CredsPath([]string{"client", "evil"}[i]) {
			t.Fatalf("identity %d: tenant %s, creds %s", i, d.Identity.Client.Tenant(), e.Creds)
		}
		id := d.Identity
		id.Events = st.Log // the stream read as an auditor of... any tenant: the tool still asks for its own tenant's subjects only
		servers = append(servers, mcpserver.New(id))
	}
	h, err := mcpserver.HTTPHandler(tf, servers, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h) // on 127.0.0.1
	t.Cleanup(srv.Close)
	url := srv.URL + mcpserver.Path

	// Unauthenticated: 401 before anything is decoded.
	for _, c := range []struct{ name, token string }{{"no token", ""}, {"wrong token", strings.Repeat("a2", 20)}, {"short token", "a1a1"}, {"the digest as token", mcpserver.TokenDigest(alice)}} {
		if got := post(t, url, c.token, "", strings.NewReader(initialize)); got != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", c.name, got)
		}
	}

	// A page on another site that resolves its name to 127.0.0.1 (DNS
	// rebinding) reaches the server with its own Host: refused, even with
	// a token.
	if got := postHost(t, url, "evil.example.com", alice, "", strings.NewReader(initialize)); got != http.StatusForbidden {
		t.Errorf("Host evil.example.com through 127.0.0.1: status %d, want 403", got)
	}

	// Behind a TLS proxy (--allow-remote) the proxy's Host is let through;
	// the token is still required.
	ph, err := mcpserver.HTTPHandler(tf, servers, slog.New(slog.NewTextHandler(io.Discard, nil)), true)
	if err != nil {
		t.Fatal(err)
	}
	proxied := httptest.NewServer(ph)
	t.Cleanup(proxied.Close)
	if got := postHost(t, proxied.URL+mcpserver.Path, "mcp.example.com", alice, "", strings.NewReader(initialize)); got != http.StatusOK {
		t.Errorf("proxied, Host mcp.example.com: status %d, want 200", got)
	}
	if got := postHost(t, proxied.URL+mcpserver.Path, "mcp.example.com", "", "", strings.NewReader(initialize)); got != http.StatusUnauthorized {
		t.Errorf("proxied, no token: status %d, want 401", got)
	}

	// Alice works as herself.
	as := newSession(t, connectHTTP(t, url, alice))
	var created commands.CreateResult
	as.call("sandbox_create", nil, &created)
	sid := created.SessionID
	as.call("sandbox_write", map[string]any{"session_id": sid, "path": "secret.txt", "content": "alice's\n"}, nil)
	var read mcpserver.ReadOutput
	as.call("sandbox_read", map[string]any{"session_id": sid, "path": "secret.txt"}, &read)
	if read.Content != "alice's\n" {
		t.Fatalf("alice's read = %+v", read)
	}
	var evs mcpserver.EventsOutput
	as.call("sandbox_events", map[string]any{"session_id": sid}, &evs)
	aliceCreds, _ := auth.LoadCreds(st.Auth.CredsPath("client"))
	for _, ev := range evs.Events {
		if ev.Actor != aliceCreds.PublicKey {
			t.Errorf("seq %d %s %s: actor %q, want alice's user %s", ev.Seq, ev.Op, ev.Phase, ev.Actor, aliceCreds.PublicKey)
		}
	}
	if len(evs.Events) < 6 {
		t.Errorf("alice's session has %d events; want create, write and read's starts and finishes", len(evs.Events))
	}

	// Mallory (tenant evil) names alice's session: it does not exist for her.
	ms := newSession(t, connectHTTP(t, url, mallory))
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"sandbox_read", map[string]any{"session_id": sid, "path": "secret.txt"}},
		{"sandbox_exec", map[string]any{"session_id": sid, "argv": []string{"cat", "secret.txt"}}},
		{"sandbox_write", map[string]any{"session_id": sid, "path": "secret.txt", "content": "mallory's"}},
		{"sandbox_ls", map[string]any{"session_id": sid}},
		{"sandbox_fork", map[string]any{"session_id": sid}},
		{"sandbox_events", map[string]any{"session_id": sid}},
		{"sandbox_delete", map[string]any{"session_id": sid}},
	} {
		ms.wantError(c.tool, c.args, "session_not_found")
	}
	// Nor may she ride alice's MCP session with her own token.
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sandbox_read","arguments":{"session_id":"` + sid + `","path":"secret.txt"}}}`
	if got := post(t, url, mallory, as.cs.ID(), strings.NewReader(call)); got != http.StatusForbidden {
		t.Errorf("mallory's token on alice's MCP session: status %d, want 403", got)
	}
	// An oversize body is refused before it is decoded, even from alice.
	huge := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sandbox_write","arguments":{"session_id":"` + sid + `","path":"big","content":"` + strings.Repeat("x", 2*mcpserver.MaxBodyBytes) + `"}}}`
	if got := post(t, url, alice, as.cs.ID(), bytes.NewReader([]byte(huge))); got != http.StatusRequestEntityTooLarge {
		t.Errorf("a %d-byte body: status %d, want 413", len(huge), got)
	}
	// Alice's file is as she left it, and she is still served.
	as.call("sandbox_read", map[string]any{"session_id": sid, "path": "secret.txt"}, &read)
	if read.Content != "alice's\n" {
		t.Fatalf("alice's file after the attacks = %q", read.Content)
	}
	as.call("sandbox_delete", map[string]any{"session_id": sid}, nil)
}

// TestLoadTokens refuses malformed tokens files.
func TestLoadTokens(t *testing.T) {
	dir := t.TempDir()
	good := mcpserver.TokenDigest(strings.Repeat("x", 40))
	for _, c := range []struct{ name, body string }{
		{"not JSON", "tokens"},
		{"no tokens", `{"tokens": []}`},
		{"unknown member", `{"tokens": [{"sha256": "` + good + `", "creds": "a.creds", "role": "admin"}]}`},
		{"short digest", `{"tokens": [{"sha256": "abcd", "creds": "a.creds"}]}`},
		{"not hex", `{"tokens": [{"sha256": "` + strings.Repeat("z", 64) + `", "creds": "a.creds"}]}`},
		{"no creds", `{"tokens": [{"sha256": "` + good + `"}]}`},
		{"duplicate", `{"tokens": [{"sha256": "` + good + `", "creds": "a.creds"}, {"sha256": "` + strings.ToUpper(good) + `", "creds": "b.creds"}]}`},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_"))
		if err := os.WriteFile(p, []byte(c.body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := mcpserver.LoadTokens(p); err == nil || !strings.HasPrefix(err.Error(), "invalid_request") {
			t.Errorf("%s: LoadTokens = %v; want invalid_request", c.name, err)
		}
	}
	p := filepath.Join(dir, "ok.json")
	if err := os.WriteFile(p, []byte(`{"tokens": [{"sha256": "`+good+`", "creds": "a.creds", "events_creds": "/abs/aud.creds"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tf, err := mcpserver.LoadTokens(p)
	if err != nil || tf.Tokens[0].Creds != filepath.Join(dir, "a.creds") || tf.Tokens[0].EventsCreds != "/abs/aud.creds" {
		t.Fatalf("LoadTokens = %+v, %v; want creds relative to the file, absolute kept", tf, err)
	}
}

// TestCheckListen: loopback by default, anything else only when allowed.
func TestCheckListen(t *testing.T) {
	for _, c := range []struct {
		addr   string
		remote bool
		want   string
	}{
		{":8808", false, "127.0.0.1:8808"},
		{"127.0.0.1:0", false, "127.0.0.1:0"},
		{"[::1]:9", false, "[::1]:9"},
		{"localhost:9", false, "localhost:9"},
		{"0.0.0.0:9", false, ""},
		{"10.1.2.3:9", false, ""},
		{"example.com:9", false, ""},
		{"0.0.0.0:9", true, "0.0.0.0:9"},
		{"8808", false, ""},
	} {
		got, err := mcpserver.CheckListen(c.addr, c.remote)
		if got != c.want || (c.want == "") != (err != nil) {
			t.Errorf("CheckListen(%q, %t) = %q, %v; want %q", c.addr, c.remote, got, err, c.want)
		}
	}
}
