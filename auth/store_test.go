package auth_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/errcode"
)

func wantCode(t *testing.T, err error, code errcode.Code) {
	t.Helper()
	var e *errcode.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("got %v, want %s", err, code)
	}
}

func TestStoreAddRemove(t *testing.T) {
	st := auth.Open(filepath.Join(t.TempDir(), "auth"))
	c, err := st.Add("alice", auth.RoleClient, "acme")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(st.CredsPath("alice"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("creds file: %v, mode %v; want 0600", err, fi.Mode())
	}
	loaded, err := auth.LoadCreds(st.CredsPath("alice"))
	if err != nil || loaded.PublicKey != c.PublicKey || loaded.Tenant != "acme" {
		t.Fatalf("load: %+v, %v", loaded, err)
	}
	_, err = st.Add("alice", auth.RoleNode, "")
	wantCode(t, err, errcode.AlreadyExists)
	wantCode(t, st.Remove("bob"), errcode.NotFound)
	if err := st.Remove("alice"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{st.CredsPath("alice"), st.NKeyPath("alice")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("revoked identity's %s still there: %v", p, err)
		}
	}
	conf, _ := os.ReadFile(st.ConfigPath())
	if strings.Contains(string(conf), c.PublicKey) {
		t.Fatal("a revoked key is still in the server config")
	}
}

// TestStoreNKeyFile: Add writes the identity's seed, alone on its line,
// to <name>.nk (0600) beside its credentials; Creds reads an identity's
// credentials back, and refuses unknown or malformed names.
func TestStoreNKeyFile(t *testing.T) {
	st := auth.Open(filepath.Join(t.TempDir(), "auth"))
	c, err := st.Add("alice", auth.RoleClient, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.NKeyPath("alice"), filepath.Join(st.Dir(), "creds", "alice.nk"); got != want {
		t.Fatalf("NKeyPath = %s, want %s", got, want)
	}
	fi, err := os.Stat(st.NKeyPath("alice"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("nkey file: %v, mode %v; want 0600", err, fi.Mode())
	}
	b, err := os.ReadFile(st.NKeyPath("alice"))
	if err != nil || string(b) != c.Seed+"\n" || !strings.HasPrefix(c.Seed, "SU") {
		t.Fatalf("nkey file = %q, %v; want the seed %q and a newline", b, err, c.Seed)
	}
	got, err := st.Creds("alice")
	if err != nil || got.Seed != c.Seed || got.PublicKey != c.PublicKey {
		t.Fatalf("Creds(alice) = %+v, %v", got, err)
	}
	_, err = st.Creds("bob")
	wantCode(t, err, errcode.NotFound)
	_, err = st.Creds("../alice")
	wantCode(t, err, errcode.InvalidRequest)
	// A credentials file under another identity's name is refused.
	if err := os.Rename(st.CredsPath("alice"), st.CredsPath("bob")); err != nil {
		t.Fatal(err)
	}
	_, err = st.Creds("bob")
	wantCode(t, err, errcode.InvalidRequest)
}

// TestBootstrapWritesMissingNKeys: a store made before the nkey seed
// files gets them at the next Bootstrap (engine serve's start), each the
// seed of the identity's credentials.
func TestBootstrapWritesMissingNKeys(t *testing.T) {
	st := auth.Open(filepath.Join(t.TempDir(), "auth"))
	if err := st.Bootstrap("node-1"); err != nil {
		t.Fatal(err)
	}
	ids, err := st.Identities()
	if err != nil || len(ids) != 4 {
		t.Fatalf("identities %v, %v; want 4", ids, err)
	}
	for _, id := range ids {
		if err := os.Remove(st.NKeyPath(id.Name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Bootstrap("node-1"); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		c, err := auth.LoadCreds(st.CredsPath(id.Name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(st.NKeyPath(id.Name))
		if err != nil || string(b) != c.Seed+"\n" {
			t.Errorf("%s: nkey file %q, %v; want its seed", id.Name, b, err)
		}
		if fi, err := os.Stat(st.NKeyPath(id.Name)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: nkey file mode %v, %v; want 0600", id.Name, fi.Mode(), err)
		}
	}
}

// TestStoreConcurrentAdds: concurrent `engine auth add` calls lose no one.
func TestStoreConcurrentAdds(t *testing.T) {
	st := auth.Open(t.TempDir())
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := st.Add(fmt.Sprintf("c%d", i), auth.RoleClient, "t"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	ids, err := st.Identities()
	if err != nil || len(ids) != 16 {
		t.Fatalf("%d identities (%v), want 16", len(ids), err)
	}
}

func TestIdentityRefusals(t *testing.T) {
	st := auth.Open(t.TempDir())
	for _, c := range []struct {
		name, tenant string
		role         auth.Role
	}{
		{"a.b", "", auth.RoleAdmin},       // not a token
		{"x", "", "root"},                 // no such role
		{"x", "", auth.RoleClient},        // a client needs a tenant
		{"x", "acme", auth.RoleNode},      // a node has none
		{"x", "PADDOCK", auth.RoleClient}, // not a tenant name
		{"x", "a>", auth.RoleClient},
		{"", "", auth.RoleAdmin},
	} {
		_, err := st.Add(c.name, c.role, c.tenant)
		wantCode(t, err, errcode.InvalidRequest)
	}
	if st.Exists() {
		t.Fatal("refused identities made a store")
	}
}

func TestLoadCredsRefusals(t *testing.T) {
	st := auth.Open(t.TempDir())
	good, err := st.Add("n1", auth.RoleNode, "")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := auth.Open(t.TempDir()).Add("n2", auth.RoleNode, "")
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if _, err := auth.LoadCreds(filepath.Join(dir, "missing")); !errors.Is(err, auth.ErrNoCreds) {
		t.Fatalf("missing: %v", err)
	}
	swapped := strings.Replace(mustJSON(t, good), good.Seed, other.Seed, 1)
	for name, body := range map[string]string{
		"notjson": "-----BEGIN USER NKEY SEED-----",
		"format":  strings.Replace(mustJSON(t, good), `"paddock_creds": 1`, `"paddock_creds": 9`, 1),
		"swapped": swapped,
		"badseed": strings.Replace(mustJSON(t, good), good.Seed, "SUAXXX", 1),
		"badrole": strings.Replace(mustJSON(t, good), `"node"`, `"god"`, 1),
	} {
		_, err := auth.LoadCreds(write(name, body))
		wantCode(t, err, errcode.InvalidRequest)
	}
}

func mustJSON(t *testing.T, c *auth.Creds) string {
	t.Helper()
	out, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestServerConfigLoads: nats-server accepts the generated config, with
// one account per tenant besides PADDOCK.
func TestServerConfigLoads(t *testing.T) {
	st := auth.Open(t.TempDir())
	for _, id := range [][3]string{{"e", "engine", ""}, {"n1", "node", ""}, {"a", "client", "acme"}, {"b", "client", "beta"}, {"au", "auditor", ""}} {
		if _, err := st.Add(id[0], auth.Role(id[1]), id[2]); err != nil {
			t.Fatal(err)
		}
	}
	opts, err := server.ProcessConfigFile(st.ConfigPath())
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, a := range opts.Accounts {
		names[a.Name] = true
	}
	if len(opts.Nkeys) != 5 || !names["PADDOCK"] || !names["acme"] || !names["beta"] {
		t.Fatalf("config has %d nkey users and accounts %v", len(opts.Nkeys), names)
	}
}

func TestCallerAuthorize(t *testing.T) {
	stamp := func(v string) *nats.Msg {
		m := nats.NewMsg("sbx.cmd.acme.s.exec")
		if v != "" {
			m.Header.Set(auth.RequestInfoHeader, v)
		}
		return m
	}
	for _, c := range []struct {
		name, header, actor, want string
		code                      errcode.Code
	}{
		{"no stamp: the trusted sender's actor", "", "cli", "cli", ""},
		{"own account", `{"acc":"acme","user":"UALICE"}`, "forged", "UALICE", ""},
		{"other account", `{"acc":"evil","user":"UM"}`, "", "", errcode.PermissionDenied},
		{"no user", `{"acc":"acme"}`, "", "", errcode.PermissionDenied},
		{"garbage", `{{`, "", "", errcode.PermissionDenied},
	} {
		t.Run(c.name, func(t *testing.T) {
			caller, err := auth.CallerOf(stamp(c.header))
			var actor string
			if err == nil {
				actor, err = caller.Authorize("acme", c.actor)
			}
			if c.code != "" {
				wantCode(t, err, c.code)
				return
			}
			if err != nil || actor != c.want {
				t.Fatalf("actor %q, %v; want %q", actor, err, c.want)
			}
		})
	}
}
