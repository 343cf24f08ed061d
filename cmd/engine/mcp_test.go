package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/mcpserver"
	"github.com/paddock-dev/paddock/testenv"
)

var mcpURLRE = regexp.MustCompile(`url=(http://\S+)`)

// TestMCPPython drives `engine mcp` with the Python mcp package's own
// client (testdata/mcp_client.py), over stdio (the engine binary as the
// client's subprocess) and over streamable HTTP (engine mcp --http with a
// tokens file), against a real engine serve with auth on, as tenant
// default's client identity, reading events as an auditor of the tenant
// (stdio) or an admin (HTTP): every tool works, and every operation's
// events name the client identity as the actor. An auditor of another
// tenant is refused as events reader. Without python3 or the pysdk
// folder it skips, unless CI=true.
func TestMCPPython(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the engine and runs Python")
	}
	python, pysdk := pythonSDK(t)
	engine := testenv.BuildBinary(t, "./cmd/engine")
	state := t.TempDir()
	logs, _ := serveStoppable(t, "--state-dir", state, "--listen", "127.0.0.1:0", "--node-id", fmt.Sprintf("mcp-%d", time.Now().UnixNano()), "--runtime", "local")
	url := readyRE.FindStringSubmatch(logs.String())
	admin := adminCredsRE.FindStringSubmatch(logs.String())
	creds := clientCredsRE.FindStringSubmatch(logs.String())
	if url == nil || admin == nil || creds == nil {
		t.Fatalf("no URL or credentials in the log:\n%s", logs.String())
	}
	client, err := auth.LoadCreds(creds[1])
	if err != nil {
		t.Fatal(err)
	}
	// Auditors: one of tenant default (the events reader the docs
	// recommend), one of another tenant (refused).
	store := auth.Open(auth.DirIn(state))
	for _, id := range [][2]string{{"aud-default", "default"}, {"aud-acme", "acme"}} {
		if _, err := store.Add(id[0], auth.RoleAuditor, id[1]); err != nil {
			t.Fatal(err)
		}
	}
	// The engine reloads its server's config when the store changes, once
	// per change: both auditors must be known before the refusal is
	// tried (a connection made during a reload can be dropped: EOF).
	testenv.Eventually(t, 10*time.Second, func() error {
		for _, id := range []string{"aud-default", "aud-acme"} {
			c, err := testenv.DialAs(url[1], store.CredsPath(id))
			if err != nil {
				return err
			}
			c.Close()
		}
		return nil
	})
	// unavailable (a connection dropped by a reload) is retryable: asked again.
	var code int
	var errs string
	testenv.Eventually(t, 20*time.Second, func() error {
		code, _, errs = cli(t, url[1], "", "mcp", "--creds", creds[1], "--events-creds", store.CredsPath("aud-acme"))
		if strings.Contains(errs, "unavailable:") {
			return fmt.Errorf("engine mcp: %s", errs)
		}
		return nil
	})
	if code != 125 || !strings.Contains(errs, "permission_denied") || !strings.Contains(errs, "audits tenant acme") {
		t.Fatalf("engine mcp with an auditor of another tenant: exit %d, %q; want 125, permission_denied", code, errs)
	}

	script, err := filepath.Abs("testdata/mcp_client.py")
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH="+filepath.Join(pysdk, "site"))
	// drive runs the script and checks what it reports: the session's
	// events, read from the stream, have the client's user as every start's
	// actor, as the script saw them through sandbox_events.
	drive := func(t *testing.T, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(testenv.Context(t, 3*time.Minute), python, append([]string{script}, args...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("mcp_client.py %s: %v\n%s", args[0], err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		var rep struct {
			SessionID string   `json:"session_id"`
			Tools     []string `json:"tools"`
			Actors    []string `json:"actors"`
		}
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil {
			t.Fatalf("mcp_client.py %s printed %s: %v", args[0], out, err)
		}
		if len(rep.Actors) != 1 || rep.Actors[0] != client.PublicKey {
			t.Errorf("%s: the session's actors seen through sandbox_events = %v; want only the client's user %s", args[0], rep.Actors, client.PublicKey)
		}
		nc := testenv.ConnectAs(t, url[1], admin[1]).Conn
		evs, err := events.NewLog(testenv.JetStream(t, nc), "", "").Session(testenv.Context(t, 10*time.Second), client.Tenant, rep.SessionID)
		if err != nil || len(evs) < 12 {
			t.Fatalf("%s: the stream holds %d events of %s (%v); want the starts and finishes of seven calls", args[0], len(evs), rep.SessionID, err)
		}
		for _, ev := range evs {
			if ev.Phase == events.PhaseStart && ev.Actor != client.PublicKey {
				t.Errorf("%s: seq %d %s: actor %q, want %s", args[0], ev.Seq, ev.Op, ev.Actor, client.PublicKey)
			}
		}
		t.Logf("%s: %d tools, session %s, %d events, actor %s", args[0], len(rep.Tools), rep.SessionID, len(evs), client.PublicKey)
	}

	t.Run("stdio", func(t *testing.T) {
		drive(t, "stdio", engine, "mcp", "--server", url[1], "--creds", creds[1], "--events-creds", store.CredsPath("aud-default"))
	})
	t.Run("http", func(t *testing.T) {
		token := strings.Repeat("5e", 32)
		dir := t.TempDir()
		tokens := filepath.Join(dir, "tokens.json")
		b, _ := json.Marshal(mcpserver.TokensFile{Tokens: []mcpserver.TokenEntry{{SHA256: mcpserver.TokenDigest(token), Creds: creds[1], EventsCreds: admin[1]}}})
		if err := os.WriteFile(tokens, b, 0o600); err != nil {
			t.Fatal(err)
		}
		// Background: the server runs until the deferred cancel below.
		ctx, cancel := context.WithCancel(context.Background())
		mcpLogs := &testenv.SyncBuffer{}
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"mcp", "--server", url[1], "--http", "127.0.0.1:0", "--tokens", tokens}, nil, mcpLogs, mcpLogs)
		}()
		defer func() {
			cancel()
			select {
			case code := <-done:
				if code != 0 {
					t.Errorf("engine mcp --http exited %d:\n%s", code, mcpLogs.String())
				}
			case <-time.After(30 * time.Second):
				t.Errorf("engine mcp --http did not stop within 30s")
			}
		}()
		var endpoint string
		testenv.Eventually(t, 30*time.Second, func() error {
			m := mcpURLRE.FindStringSubmatch(mcpLogs.String())
			if m == nil {
				return fmt.Errorf("engine mcp --http not serving yet:\n%s", mcpLogs.String())
			}
			endpoint = m[1]
			return nil
		})
		drive(t, "http", endpoint, token)
	})
}

// TestMCPFlags: engine mcp refuses what it cannot serve safely, before it
// connects.
func TestMCPFlags(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"http without tokens", []string{"mcp", "--http", "127.0.0.1:0"}, "needs --tokens"},
		{"tokens without http", []string{"mcp", "--tokens", filepath.Join(dir, "t.json")}, "go with --http"},
		{"public address", []string{"mcp", "--http", "0.0.0.0:0", "--tokens", filepath.Join(dir, "t.json")}, "not a loopback address"},
		{"missing tokens file", []string{"mcp", "--http", "127.0.0.1:0", "--tokens", filepath.Join(dir, "none.json")}, "tokens file"},
		{"arguments", []string{"mcp", "extra"}, "takes no arguments"},
	} {
		code, _, errs := cli(t, "nats://127.0.0.1:1", "", c.args...)
		if code != 2 || !strings.Contains(errs, "invalid_request") || !strings.Contains(errs, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want 2, invalid_request naming %q", c.name, code, errs, c.want)
		}
	}
}
