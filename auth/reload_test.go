package auth_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/testenv"
)

// TestReloadAddsTenant: a tenant added while the server runs can command
// at once after Reload (which works around nats-server not starting a new
// account's service imports on the reload that creates it), and a removed
// identity can no longer connect.
func TestReloadAddsTenant(t *testing.T) {
	st := auth.Open(t.TempDir())
	if _, err := st.Add("engine", auth.RoleEngine, ""); err != nil {
		t.Fatal(err)
	}
	br := testenv.StartAuthBroker(t, st)
	eng := testenv.ConnectAs(t, br.ClientURL(), st.CredsPath("engine"))
	if _, err := eng.Subscribe("sbx.cmd.*.create", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }); err != nil {
		t.Fatal(err)
	}
	if err := eng.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Add("alice", auth.RoleClient, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := br.Reload(); err != nil {
		t.Fatal(err)
	}
	alice := testenv.ConnectAs(t, br.ClientURL(), st.CredsPath("alice"))
	if m, err := alice.Request("sbx.cmd.acme.create", nil, 5*time.Second); err != nil || string(m.Data) != "ok" {
		t.Fatalf("new tenant's command after reload: %v", err)
	}
	path := st.CredsPath("alice")
	saved, err := auth.LoadCreds(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Remove("alice"); err != nil {
		t.Fatal(err)
	}
	if err := br.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := nats.Connect(br.ClientURL(), saved.Options()...); err == nil {
		t.Fatal("a removed identity connected")
	}
}

// TestReloadUnderTraffic: reloads while clients of two tenant accounts
// keep commanding (the server updates its accounts' live state meanwhile)
// stay safe under the race detector, lose no command of the Go client,
// and every identity added on the way can connect. A reload drops the
// tenants' imports for a moment (a bare request then finds no responder);
// the client sends such a request again (client.NoResponderGrace).
//
// The clients connect before the reloads, not during them: nats-server
// 2.15 re-authorizes its clients on reload without the lock a connecting
// client's CONNECT holds, a race inside the server that the race detector
// reports (docs/security.md, "Reloads").
func TestReloadUnderTraffic(t *testing.T) {
	st := auth.Open(t.TempDir())
	for _, id := range [][3]string{{"engine", "engine", ""}, {"alice", "client", "acme"}, {"bob", "client", "beta"}} {
		if _, err := st.Add(id[0], auth.Role(id[1]), id[2]); err != nil {
			t.Fatal(err)
		}
	}
	br := testenv.StartAuthBroker(t, st)
	eng := testenv.ConnectAs(t, br.ClientURL(), st.CredsPath("engine"))
	if _, err := eng.Subscribe("sbx.cmd.*.lookup", func(m *nats.Msg) { _ = m.Respond([]byte(`{"version":"1.0"}`)) }); err != nil {
		t.Fatal(err)
	}
	if err := eng.Flush(); err != nil {
		t.Fatal(err)
	}
	type result struct {
		ok   int
		errs []error
	}
	stop := make(chan struct{})
	results := make(chan result, 2)
	for _, c := range []struct{ name, tenant string }{{"alice", "acme"}, {"bob", "beta"}} {
		conn := testenv.ConnectAs(t, br.ClientURL(), st.CredsPath(c.name))
		cl, err := client.New(conn.Conn, client.Options{Tenant: c.tenant, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		go func() { // commands until stop; the test reads its result
			var r result
			defer func() { results <- r }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := cl.Lookup(context.Background(), "s1"); err != nil {
					r.errs = append(r.errs, fmt.Errorf("%s: %w", c.name, err))
					continue
				}
				r.ok++
			}
		}()
	}
	for i := range 10 {
		if _, err := st.Add(fmt.Sprintf("c%d", i), auth.RoleClient, fmt.Sprintf("t%d", i%3)); err != nil {
			t.Fatal(err)
		}
		if err := br.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	for range 2 {
		r := <-results
		if len(r.errs) > 0 || r.ok == 0 {
			t.Errorf("commands during reloads: %d ok, failures %v", r.ok, r.errs)
		}
	}
	for i := range 10 {
		c := testenv.ConnectAs(t, br.ClientURL(), st.CredsPath(fmt.Sprintf("c%d", i)))
		c.Close()
	}
}
