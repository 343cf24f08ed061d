package console_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/console"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/mcpserver"
)

// TestLoadTokens reads a tokens file of real credentials, and refuses
// bad ones with invalid_request.
func TestLoadTokens(t *testing.T) {
	st := auth.Open(t.TempDir())
	for _, id := range [][3]string{{"admin", "admin", ""}, {"alice", "client", "default"}, {"aud", "auditor", "default"}, {"node-1", "node", ""}} {
		if _, err := st.Add(id[0], auth.Role(id[1]), id[2]); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "tokens.json")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	entry := func(token, name string) string {
		return `{"sha256": "` + mcpserver.TokenDigest(token) + `", "creds": "` + st.CredsPath(name) + `"}`
	}
	tk, err := console.LoadTokens(write(`{"tokens": [` + entry(adminToken, "admin") + `, ` + entry(aliceToken, "alice") + `, ` + entry(auditorToken, "aud") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	if tk == nil {
		t.Fatal("no tokens")
	}
	bad := map[string]string{
		"a node's creds":  `{"tokens": [` + entry(adminToken, "node-1") + `]}`,
		"missing creds":   `{"tokens": [{"sha256": "` + mcpserver.TokenDigest(adminToken) + `", "creds": "/nonexistent.creds"}]}`,
		"a tenant given":  `{"tokens": [{"sha256": "` + mcpserver.TokenDigest(adminToken) + `", "creds": "` + st.CredsPath("admin") + `", "tenant": "evil"}]}`,
		"not JSON":        `tokens`,
		"short digest":    `{"tokens": [{"sha256": "abcd", "creds": "` + st.CredsPath("admin") + `"}]}`,
		"no tokens":       `{"tokens": []}`,
		"unknown members": `{"tokens": [{"sha256": "` + mcpserver.TokenDigest(adminToken) + `", "creds": "` + st.CredsPath("admin") + `", "role": "admin"}]}`,
	}
	for name, body := range bad {
		if _, err := console.LoadTokens(write(body)); err == nil || (errcode.Of(err) != errcode.InvalidRequest && !strings.Contains(name, "missing")) {
			t.Errorf("%s: LoadTokens = %v; want invalid_request", name, err)
		}
	}
	if _, err := console.NewHandler(console.NewReader(nil, ""), console.Config{}, nil); errcode.Of(err) != errcode.InvalidRequest {
		t.Errorf("a handler without tokens: %v; want invalid_request", err)
	}
}

func TestCheckListen(t *testing.T) {
	for _, c := range []struct {
		addr   string
		remote bool
		ok     bool
	}{
		{"127.0.0.1:8480", false, true},
		{"[::1]:8480", false, true},
		{"localhost:0", false, true},
		{"0.0.0.0:8480", false, false},
		{"10.1.2.3:8480", false, false},
		{"0.0.0.0:8480", true, true},
		{"8480", false, false},
		{"", true, false},
	} {
		err := console.CheckListen(c.addr, c.remote)
		if (err == nil) != c.ok || (err != nil && errcode.Of(err) != errcode.InvalidRequest) {
			t.Errorf("CheckListen(%q, %v) = %v; want ok %v", c.addr, c.remote, err, c.ok)
		}
	}
}
