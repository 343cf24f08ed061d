package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/testenv"
)

// TestAuthCreds: engine auth creds prints an identity's credentials in
// each format, each what its file holds; bad input is refused with a
// typed error; auth rm takes the nkey file too.
func TestAuthCreds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	path := strings.TrimSpace(mustCLI(t, "", "", "auth", "add", "client", "alice", "--tenant", "acme", "--auth-dir", dir))
	st := auth.Open(dir)
	if path != st.CredsPath("alice") {
		t.Fatalf("auth add printed %q, want the credentials file's path %s", path, st.CredsPath("alice"))
	}
	credsFile, err := os.ReadFile(st.CredsPath("alice"))
	if err != nil {
		t.Fatal(err)
	}
	nkFile, err := os.ReadFile(st.NKeyPath("alice"))
	if err != nil {
		t.Fatal(err)
	}
	if got := mustCLI(t, "", "", "auth", "creds", "alice", "--auth-dir", dir); got != string(credsFile) {
		t.Errorf("auth creds alice = %q, want the credentials file %q", got, credsFile)
	}
	if got := mustCLI(t, "", "", "auth", "creds", "alice", "--format", "paddock", "--auth-dir", dir); got != string(credsFile) {
		t.Errorf("auth creds --format paddock = %q, want the credentials file", got)
	}
	if got := mustCLI(t, "", "", "auth", "creds", "alice", "--format", "nkey", "--auth-dir", dir); got != string(nkFile) || !strings.HasPrefix(got, "SU") || strings.Count(got, "\n") != 1 {
		t.Errorf("auth creds --format nkey = %q, want the seed line of %s, %q", got, st.NKeyPath("alice"), nkFile)
	}
	c, err := auth.LoadCreds(st.CredsPath("alice"))
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--format", "json"}, {"--json"}} {
		var got credsJSON
		out := mustCLI(t, "", "", append([]string{"auth", "creds", "alice", "--auth-dir", dir}, args...)...)
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("auth creds %v = %q: %v", args, out, err)
		}
		want := credsJSON{Name: "alice", Role: auth.RoleClient, Tenant: "acme", Account: "acme", PublicKey: c.PublicKey,
			Seed: c.Seed, Inbox: c.InboxPrefix(), CredsFile: st.CredsPath("alice"), NKeyFile: st.NKeyPath("alice")}
		if got != want {
			t.Errorf("auth creds %v = %+v, want %+v", args, got, want)
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		errs string
	}{
		{[]string{"auth", "creds", "alice", "--format", "pem"}, 2, "error: invalid_request: --format \"pem\": want paddock, nkey or json\n"},
		{[]string{"auth", "creds", "bob"}, exitFailure, "error: not_found: "},
		{[]string{"auth", "creds", "../alice"}, 2, "error: invalid_request: "},
		{[]string{"auth", "creds"}, 2, "error: invalid_request: "},
	} {
		code, out, errs := cli(t, "", "", append(tc.args, "--auth-dir", dir)...)
		if code != tc.code || !strings.HasPrefix(errs, tc.errs) || out != "" {
			t.Errorf("engine %s = exit %d, stdout %q, stderr %q; want %d and %q", strings.Join(tc.args, " "), code, out, errs, tc.code, tc.errs)
		}
	}
	mustCLI(t, "", "", "auth", "rm", "alice", "--auth-dir", dir)
	for _, p := range []string{st.CredsPath("alice"), st.NKeyPath("alice")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("after auth rm, %s: %v; want it gone", p, err)
		}
	}
}

// TestAuthCredsNatsPy: the nkey that `engine auth creds NAME --format
// nkey > NAME.nk` saves connects nats.py (nkeys_seed=) to a broker that
// loads the auth store, as the tenant's client: its publish and its
// request on the tenant's command subject arrive, stamped with its
// account and key. The engine side here is a plain subscriber in the
// PADDOCK account. Without python3 or the pysdk folder it skips, unless
// CI=true.
func TestAuthCredsNatsPy(t *testing.T) {
	python, pysdk := pythonSDK(t)
	if out, err := exec.Command(python, "-c", "import cryptography.hazmat.primitives.asymmetric.ed25519").CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s has no cryptography, which the nkeys stand-in needs: %v %s", python, err, out)
		}
		t.Skipf("%s has no cryptography: %v", python, err)
	}
	dir := filepath.Join(t.TempDir(), "auth")
	mustCLI(t, "", "", "auth", "add", "engine", "engine", "--auth-dir", dir)
	mustCLI(t, "", "", "auth", "add", "client", "alice", "--tenant", "acme", "--auth-dir", dir)
	st := auth.Open(dir)
	url := testenv.StartAuthBroker(t, st).ClientURL()
	nk := filepath.Join(t.TempDir(), "alice.nk")
	if err := os.WriteFile(nk, []byte(mustCLI(t, "", "", "auth", "creds", "alice", "--format", "nkey", "--auth-dir", dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	alice, err := st.Creds("alice")
	if err != nil {
		t.Fatal(err)
	}

	eng := testenv.ConnectAs(t, url, st.CredsPath("engine"))
	published := make(chan *nats.Msg, 1)
	if _, err := eng.Subscribe("sbx.cmd.acme.py-1.running", func(m *nats.Msg) { published <- m }); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Subscribe("sbx.cmd.acme.py-1.lookup", func(m *nats.Msg) {
		c, err := auth.CallerOf(m)
		if err != nil {
			_ = m.Respond([]byte(`{"error":` + strconvQuote(err.Error()) + `}`))
			return
		}
		b, _ := json.Marshal(c)
		_ = m.Respond(b)
	}); err != nil {
		t.Fatal(err)
	}
	if err := eng.Flush(); err != nil {
		t.Fatal(err)
	}

	script, err := filepath.Abs(filepath.Join("testdata", "nkey_connect.py"))
	if err != nil {
		t.Fatal(err)
	}
	pyPaddock, err := filepath.Abs(filepath.Join("..", "..", "python", "paddock"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(testenv.Context(t, time.Minute), python, script, url, nk, alice.Inbox, "acme")
	cmd.Env = append(os.Environ(),
		"PYTHONPATH="+pyPaddock+string(os.PathListSeparator)+filepath.Join(pysdk, "site"),
		"PYTHONDONTWRITEBYTECODE=1",
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("nats.py with nkeys_seed=%s: %v\nstdout:\n%s\nstderr:\n%s", nk, err, stdout.String(), stderr.String())
	}
	var got auth.Caller
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &got); err != nil {
		t.Fatalf("reply %q: %v", stdout.String(), err)
	}
	if got.Account != "acme" || got.User != alice.PublicKey {
		t.Errorf("nats.py's request came as %+v, want account acme, user %s", got, alice.PublicKey)
	}
	select {
	case m := <-published:
		if string(m.Data) != `{"from":"nats.py"}` {
			t.Errorf("published %q", m.Data)
		}
	case <-testenv.Context(t, 10*time.Second).Done():
		t.Fatal("nats.py's publish on sbx.cmd.acme.py-1.running did not arrive")
	}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
