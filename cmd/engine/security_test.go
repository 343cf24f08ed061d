package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"github.com/nats-io/nats.go/jetstream"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/testenv"
)

// secureServe starts `engine serve` with its defaults (auth on) and the
// identities of the hostile-tenant tests in its auth store, and returns
// its URL and the store.
func secureServe(t *testing.T) (string, *auth.Store) {
	t.Helper()
	dir := t.TempDir()
	url, _ := serveFor(t, "--state-dir", dir, "--listen", "127.0.0.1:0", "--node-id", "n1", "--runtime", "local")
	st := auth.Open(auth.DirIn(dir))
	addIdentities(t, st)
	// The engine reloads its server's config when the store changes.
	waitTenant(t, url, st, "alice")
	return url, st
}

// secureExternal starts a separate nats-server configured by `engine auth
// server-config` from a store with the engine, an admin, node n1 and the
// hostile-tenant identities, and `engine serve --nats-url` on it with the
// engine's and the node's credentials; the test's CLI calls use the admin.
func secureExternal(t *testing.T) (string, *auth.Store) {
	t.Helper()
	st := auth.Open(filepath.Join(t.TempDir(), "auth"))
	for _, id := range [][3]string{{"engine", "engine", ""}, {"admin", "admin", ""}, {"n1", "node", ""}} {
		if _, err := st.Add(id[0], auth.Role(id[1]), id[2]); err != nil {
			t.Fatal(err)
		}
	}
	addIdentities(t, st)
	// The listener and store dir are given again to nats-server, which
	// picks a free port.
	code, conf, errs := cli(t, "", "", "auth", "server-config", "--auth-dir", st.Dir(), "--listen", "127.0.0.1:4222", "--store-dir", t.TempDir())
	if code != 0 {
		t.Fatal(errs)
	}
	confPath := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	url := testenv.StartNATSProcess(t, "-c", confPath)
	serveFor(t, "--nats-url", url, "--creds", st.CredsPath("engine"), "--node-creds", st.CredsPath("n1"),
		"--state-dir", t.TempDir(), "--node-id", "n1", "--runtime", "local")
	t.Setenv("PADDOCK_CREDS", st.CredsPath("admin"))
	return url, st
}

// waitTenant waits until the client name can connect and its tenant's
// commands reach the engine.
func waitTenant(t *testing.T, url string, st *auth.Store, name string) {
	t.Helper()
	creds, err := auth.LoadCreds(st.CredsPath(name))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		c, err := testenv.DialAs(url, st.CredsPath(name))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Request("sbx.cmd."+creds.Tenant+".lookup", []byte(`{"args":{"session_id":"none"}}`), time.Second)
		return err
	})
}

func addIdentities(t *testing.T, st *auth.Store) {
	t.Helper()
	for _, id := range [][3]string{{"alice", "client", "acme"}, {"mallory", "client", "evil"}, {"aud-acme", "auditor", "acme"}} {
		if _, err := st.Add(id[0], auth.Role(id[1]), id[2]); err != nil {
			t.Fatal(err)
		}
	}
}

// as runs the CLI with an identity's credentials.
func as(t *testing.T, st *auth.Store, name, url string, args ...string) (int, string, string) {
	t.Helper()
	return cli(t, url, "", append([]string{"--creds", st.CredsPath(name)}, args...)...)
}

// aliceSession creates a session as alice (tenant acme) and returns its id.
func aliceSession(t *testing.T, url string, st *auth.Store) string {
	t.Helper()
	code, out, errs := as(t, st, "alice", url, "sandbox", "create")
	if code != 0 {
		t.Fatalf("alice's create: exit %d, %s", code, errs)
	}
	return strings.TrimSpace(out)
}

func wantCLIError(t *testing.T, code int, stderr, want string) {
	t.Helper()
	if code == 0 || !strings.Contains(stderr, "error: "+want) {
		t.Fatalf("exit %d, stderr %q; want error %s", code, stderr, want)
	}
}

// TestHostileTenant: with auth on (engine serve's default, and an external
// nats-server configured by engine auth), one tenant's client cannot reach
// another tenant's sessions, snapshots or events, nor speak on the nodes'
// or the events' subjects; an auditor reads its own tenant only.
func TestHostileTenant(t *testing.T) {
	t.Run("embedded", func(t *testing.T) { hostileTenant(t, secureServe) })
	t.Run("external nats-server", func(t *testing.T) { hostileTenant(t, secureExternal) })
}

func hostileTenant(t *testing.T, start func(*testing.T) (string, *auth.Store)) {
	url, st := start(t)
	s := aliceSession(t, url, st)
	if code, _, errs := as(t, st, "alice", url, "sandbox", "write", s, "secret.txt"); code != 0 {
		t.Fatalf("write: %s", errs)
	}
	// A client moves files through the transfer service: it has no bucket.
	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	_ = tw.WriteHeader(&tar.Header{Name: "docs/readme.txt", Mode: 0o644, Size: 5, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("hello"))
	_ = tw.Close()
	tarPath := filepath.Join(t.TempDir(), "seed.tar")
	if err := os.WriteFile(tarPath, archive.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := as(t, st, "alice", url, "sandbox", "hydrate", s, "--from", tarPath); code != 0 {
		t.Fatalf("alice's hydrate from a file: %s", errs)
	}
	if code, out, errs := as(t, st, "alice", url, "sandbox", "read", s, "docs/readme.txt"); code != 0 || out != "hello" {
		t.Fatalf("read after hydrate: %d %q %s", code, out, errs)
	}

	// Another tenant's session does not exist for mallory...
	for _, args := range [][]string{
		{"sandbox", "exec", s, "--", "cat", "secret.txt"},
		{"sandbox", "read", s, "secret.txt"},
		{"sandbox", "resume", s},
		{"sandbox", "delete", s},
	} {
		code, _, errs := as(t, st, "mallory", url, args...)
		wantCLIError(t, code, errs, "session_not_found")
	}
	// ...naming the tenant is refused before anything is sent...
	code, _, errs := as(t, st, "mallory", url, "--tenant", "acme", "sandbox", "exec", s, "--", "true")
	wantCLIError(t, code, errs, "permission_denied")
	// ...and on the wire the server refuses the subjects themselves.
	mal := testenv.ConnectAs(t, url, st.CredsPath("mallory"))
	for _, subj := range []string{"sbx.cmd.acme." + s + ".exec", "sbx.node.n1.resume", "sbx.evt.acme." + s + ".exec.start", "sbx.cmd.acme.create"} {
		if err := mal.Publish(subj, []byte(`{"args":{"argv":["true"]}}`)); err != nil {
			t.Fatal(err)
		}
		mal.WantViolation(t, subj)
	}
	// A client has no JetStream: no events, snapshots or projections.
	for _, args := range [][]string{{"events", "tail", "--all-tenants", "--no-follow"}, {"sandbox", "list"}, {"audit", "verify"}} {
		code, _, errs = as(t, st, "mallory", url, args...)
		wantCLIError(t, code, errs, "permission_denied")
	}
	// On the wire too: a client's account has no JetStream.
	js := testenv.JetStream(t, mal.Conn)
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := js.Stream(sctx, "SBX_EVENTS"); err == nil {
		t.Fatal("a client reached the events stream")
	}

	// The auditor of acme reads acme's events and no one else's.
	code, out, errs := as(t, st, "aud-acme", url, "events", "tail", "--no-follow")
	if code != 0 || !strings.Contains(out, s) {
		t.Fatalf("auditor's tail: exit %d, %q, %s", code, out, errs)
	}
	code, _, errs = as(t, st, "aud-acme", url, "events", "tail", "--all-tenants", "--no-follow")
	wantCLIError(t, code, errs, "permission_denied")
	// On the wire, its consumer cannot filter another tenant.
	audJS := testenv.JetStream(t, testenv.ConnectAs(t, url, st.CredsPath("aud-acme")).Conn)
	_, err := audJS.CreateOrUpdateConsumer(sctx, "SBX_EVENTS", jetstream.ConsumerConfig{Name: "audit_aud-acme", FilterSubject: "sbx.evt.evil.>"})
	if err == nil {
		t.Fatal("acme's auditor made a consumer on tenant evil's events")
	}
	code, _, errs = as(t, st, "aud-acme", url, "events", "tail", "--durable", "projector", "--no-follow")
	wantCLIError(t, code, errs, "permission_denied")
	// Nor may it remove snapshots, or sweep the workspace bucket; neither
	// may a tenant's client.
	for _, who := range []string{"aud-acme", "mallory"} {
		for _, args := range [][]string{{"snapshot", "rm", "--deleted", "--all-tenants"}, {"gc"}} {
			code, _, errs = as(t, st, who, url, args...)
			wantCLIError(t, code, errs, "permission_denied")
		}
	}
	code, out, errs = as(t, st, "aud-acme", url, "audit", "verify", "--auth-dir", st.Dir())
	if code != 0 || !strings.Contains(out, "audit: 1 sessions") || !strings.Contains(out, "signed: node n1") {
		t.Fatalf("acme's auditor's audit verify: exit %d\n%s%s", code, out, errs)
	}

	// The events record the authenticated user as the actor.
	evs, err := events.NewLog(testenv.JetStream(t, testenv.Connect(t, url)), "", "").Session(testenv.Context(t, 10*time.Second), "acme", s)
	if err != nil || len(evs) == 0 {
		t.Fatalf("acme's events: %v", err)
	}
	alice, _ := auth.LoadCreds(st.CredsPath("alice"))
	for _, ev := range evs {
		if ev.Actor != alice.PublicKey {
			t.Fatalf("seq %d: actor %q, want alice's key %s", ev.Seq, ev.Actor, alice.PublicKey)
		}
	}
}

// TestStampMismatchRecorded: a command stamped with another account than
// its subject's tenant (a misconfigured import; here a PADDOCK sender
// forging the stamp) is permission_denied, answered and recorded.
func TestStampMismatchRecorded(t *testing.T) {
	url, st := secureServe(t)
	s := aliceSession(t, url, st)
	nc := testenv.Connect(t, url) // the admin: PADDOCK, where no stamp is replaced
	m := nats.NewMsg("sbx.cmd.acme." + s + ".exec")
	m.Header.Set(auth.RequestInfoHeader, `{"acc":"evil","user":"UMALLORY"}`)
	m.Data = []byte(`{"command_id":"11111111-1111-4111-8111-111111111111","args":{"argv":["true"]}}`)
	rep, err := nc.RequestMsg(m, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r commands.Reply
	if err := json.Unmarshal(rep.Data, &r); err != nil || r.Error == nil || r.Error.Code != "permission_denied" {
		t.Fatalf("reply %s, want permission_denied", rep.Data)
	}
	evs, err := events.NewLog(testenv.JetStream(t, nc), "", "").Session(testenv.Context(t, 10*time.Second), "acme", s)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.ErrorCode != "permission_denied" || last.Actor != "evil/UMALLORY" || last.CommandID != "" {
		t.Fatalf("recorded %+v; want a permission_denied finish by evil/UMALLORY without the command id", last)
	}
}

// TestForgedEvents: an event appended by anyone but a node (here with the
// engine's rights, since a client's are refused by the server) fails
// audit verify, which names its session and seq, and does not stall the
// session.
func TestForgedEvents(t *testing.T) {
	url, st := secureServe(t)
	s := aliceSession(t, url, st)
	ctx := testenv.Context(t, 30*time.Second)
	js := testenv.JetStream(t, testenv.Connect(t, url))
	log := events.NewLog(js, "", "")

	forge := func(signer events.Signer, node string) uint64 {
		t.Helper()
		tail, err := log.Last(ctx, "acme", s)
		if err != nil {
			t.Fatal(err)
		}
		ev := events.Event{Version: events.Version, EventID: fmt.Sprintf("forged-%d", tail.Event.Seq), TS: time.Now().UTC(),
			Tenant: "acme", SessionID: s, Seq: tail.Event.Seq + 1, Op: "delete", Phase: events.PhaseStart,
			SpanID: fmt.Sprintf("f0f0f0f0f0f0f0%02x", tail.Event.Seq), Node: node, PrevHash: tail.Hash}
		l := log
		if signer != nil {
			if l, err = log.Signed(signer); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := l.Append(ctx, &ev, tail.StreamSeq); err != nil {
			t.Fatal(err)
		}
		return ev.Seq
	}
	unsigned := forge(nil, "n1")
	// The session goes on: the node chains past what it did not write.
	if code, out, errs := as(t, st, "alice", url, "sandbox", "exec", s, "--", "echo", "still here"); code != 0 || out != "still here\n" {
		t.Fatalf("exec after a forged event: %d %q %s", code, out, errs)
	}
	stranger, _ := nkeys.CreateUser()
	strangerSeq := forge(stranger, "n1")
	if code, _, errs := as(t, st, "alice", url, "sandbox", "exec", s, "--", "true"); code != 0 {
		t.Fatalf("exec after a second forged event: %s", errs)
	}

	authDir := filepath.Dir(st.CredsPath("x"))
	code, out, _ := cli(t, url, "", "audit", "verify", "--auth-dir", filepath.Dir(authDir))
	if code != 1 {
		t.Fatalf("audit verify exit %d, want 1:\n%s", code, out)
	}
	for _, want := range []string{
		fmt.Sprintf("session acme/%s seq %d (stream seq", s, unsigned), "unsigned: delete start by node n1",
		fmt.Sprintf("session acme/%s seq %d (stream seq", s, strangerSeq), "unknown_signer",
		"signed: node n1, key ", "(issued)", ": 2 failures",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("audit verify output lacks %q:\n%s", want, out)
		}
	}
}

// TestExternalNATSAuth: the same model on a separately started nats-server
// configured by `engine auth server-config`: the engine and its node run
// with their own credentials, clients are confined to their tenant.
func TestExternalNATSAuth(t *testing.T) {
	url, st := secureExternal(t)
	var code int
	var errs string
	s := aliceSession(t, url, st)
	if code, out, errs := as(t, st, "alice", url, "sandbox", "exec", s, "--", "echo", "ok"); code != 0 || out != "ok\n" {
		t.Fatalf("alice's exec: %d %q %s", code, out, errs)
	}
	code, _, errs = as(t, st, "mallory", url, "sandbox", "exec", s, "--", "true")
	wantCLIError(t, code, errs, "session_not_found")
	code, _, errs = cli(t, url, "", "--creds", "none", "sandbox", "list")
	wantCLIError(t, code, errs, "permission_denied")
	code, out, _ := cli(t, url, "", "audit", "verify", "--auth-dir", st.Dir())
	if code != 0 || !strings.Contains(out, "signed: node n1") || !strings.Contains(out, "(issued)") {
		t.Fatalf("audit verify: exit %d\n%s", code, out)
	}
	// A node's credentials do not make another node.
	bin := testenv.BuildBinary(t, "./cmd/agent-node")
	cmd := exec.Command(bin, "--nats-url", url, "--creds", st.CredsPath("n1"), "--id", "n2", "--runtime", "local", "--dir", t.TempDir())
	outb, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(outb), "not of node n2") {
		t.Fatalf("agent-node --id n2 with n1's credentials: %v\n%s", err, outb)
	}
}

// TestServeTLS: with --tls-cert/--tls-key the embedded server takes TLS
// clients only; the CLI trusts it with --tls-ca and refuses it without.
func TestServeTLS(t *testing.T) {
	cert, key := selfSigned(t)
	dir := t.TempDir()
	url, _ := serveFor(t, "--state-dir", dir, "--listen", "127.0.0.1:0", "--node-id", "n1", "--runtime", "local",
		"--tls-cert", cert, "--tls-key", key)
	if code, out, errs := cli(t, url, "", "--tls-ca", cert, "sandbox", "create"); code != 0 || commands.CheckToken("id", strings.TrimSpace(out)) != nil {
		t.Fatalf("create over TLS: exit %d, %q, %s", code, out, errs)
	}
	code, _, errs := cli(t, url, "", "sandbox", "list")
	wantCLIError(t, code, errs, "unavailable")
	if !strings.Contains(errs, "certificate") {
		t.Fatalf("without --tls-ca: %s; want a certificate error", errs)
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 (its own CA)
// and its key, and returns their paths.
func selfSigned(t *testing.T) (certPath, keyPath string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "paddock-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for p, b := range map[string]*pem.Block{certPath: {Type: "CERTIFICATE", Bytes: der}, keyPath: {Type: "EC PRIVATE KEY", Bytes: kder}} {
		if err := os.WriteFile(p, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certPath, keyPath
}
