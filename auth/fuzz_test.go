package auth_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/errcode"
)

// FuzzCallerOf: any stamp either names an account or is refused with
// permission_denied; none panics, and a refused stamp authorizes nothing.
func FuzzCallerOf(f *testing.F) {
	for _, s := range []string{`{"acc":"acme","user":"UA"}`, `{"acc":""}`, `{{`, `null`, `{"acc":1}`, ""} {
		f.Add(s, "acme")
	}
	f.Fuzz(func(t *testing.T, stamp, tenant string) {
		m := nats.NewMsg("sbx.cmd.x.y.exec")
		m.Header.Set(auth.RequestInfoHeader, stamp)
		c, err := auth.CallerOf(m)
		if err != nil {
			if errcode.Of(err) != errcode.PermissionDenied {
				t.Fatalf("stamp %q: %v, want permission_denied", stamp, err)
			}
			return
		}
		actor, err := c.Authorize(tenant, "claimed")
		switch {
		case !c.Vouched():
			if err != nil || actor != "claimed" {
				t.Fatalf("no stamp: %q, %v", actor, err)
			}
		case err == nil && (c.Account != tenant || actor != c.User || actor == ""):
			t.Fatalf("stamp %q authorized %q for tenant %q", stamp, actor, tenant)
		}
	})
}

// FuzzLoadCreds: a credentials file is loaded only when whole and
// consistent; anything else is an error, never a panic.
func FuzzLoadCreds(f *testing.F) {
	st := auth.Open(f.TempDir())
	if _, err := st.Add("n1", auth.RoleNode, ""); err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(st.CredsPath("n1"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"paddock_creds":1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "x.creds")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := auth.LoadCreds(p)
		if err != nil {
			return
		}
		if c.Identity.Check() != nil {
			t.Fatalf("loaded an inconsistent identity %+v", c.Identity)
		}
		if _, err := c.KeyPair(); err != nil {
			t.Fatalf("loaded credentials whose seed is not its key: %v", err)
		}
	})
}
