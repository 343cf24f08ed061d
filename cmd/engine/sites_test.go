package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/scheduler"
	"github.com/paddock-dev/paddock/testenv"
	"github.com/paddock-dev/paddock/testenv/control"
)

// leafRefused is what a core server logs when it refuses a leaf link: no
// or wrong credentials, or no certificate of the cluster's CA.
var leafRefused = regexp.MustCompile(`Leafnode connection closed: (Authentication Failure|TLS Handshake Failure)`)

// sitesAuth returns an auth store with an engine, an admin, the nodes na
// and nb and a client of tenant default.
func sitesAuth(t *testing.T) *auth.Store {
	t.Helper()
	st := auth.Open(filepath.Join(t.TempDir(), "auth"))
	for _, id := range [][3]string{{"engine", "engine", ""}, {"admin", "admin", ""}, {"na", "node", ""}, {"nb", "node", ""}, {"cli", "client", "default"}} {
		if _, err := st.Add(id[0], auth.Role(id[1]), id[2]); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// confOpts reads a config `engine cluster config` wrote.
func confOpts(t *testing.T, dir, name string) *server.Options {
	t.Helper()
	opts, err := server.ProcessConfigFile(filepath.Join(dir, name+".conf"))
	if err != nil {
		t.Fatal(err)
	}
	return opts
}

// siteAgent starts node id with label site=<site> and a local runtime,
// connected with its own credentials to url (its site's leaf server).
func siteAgent(t *testing.T, st *auth.Store, url, id, site string, log *testenv.SyncBuffer) *nodes.Agent {
	t.Helper()
	creds, err := auth.LoadCreds(st.CredsPath(id))
	if err != nil {
		t.Fatal(err)
	}
	kp, err := creds.KeyPair()
	if err != nil {
		t.Fatal(err)
	}
	nc := testenv.ConnectAs(t, url, st.CredsPath(id))
	rt, err := local.New(local.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	a, err := nodes.New(nc.Conn, events.NewLog(testenv.JetStream(t, nc.Conn), "", ""), nodes.Config{
		ID: id, Labels: map[string]string{"site": site}, HeartbeatInterval: 200 * time.Millisecond, Signer: kp,
	}, slog.New(slog.NewTextHandler(log, nil)).With("node", id), rt)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(testenv.Context(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Close(ctx) // a node fenced after its loss may report its sessions' teardown
	})
	return a
}

// TestSites: a three-server core cluster and two sites, each a leaf
// server (from the configs `engine cluster config --leaf-port --site`
// writes) with one node. Site a's leaf link runs through a TCP proxy;
// cutting it makes site a's session lost, while site b's session keeps
// serving execs and never sees a loss; when the link is mended, site a's
// node is heard again and auto-resume brings the session back onto it
// (the only node of its site), with its files. A client inside site a
// (connected to its leaf server) reaches the core's engines through the
// link: its commands work before and after the cut, and during the cut
// fail with a retryable error rather than hang: the events stream, the
// projection and placement live in the core. Leaf servers without the
// link's secret are refused.
func TestSites(t *testing.T) {
	st := sitesAuth(t)
	dir := t.TempDir()
	// One range for every port: separate picks could overlap.
	base := testenv.FreePortRange(t, 11)
	cp, rp, lp, sp := base, base+3, base+6, base+9
	out := filepath.Join(dir, "conf")
	mustCLI(t, "", "", "cluster", "config", "--auth-dir", st.Dir(), "--store-dir", filepath.Join(dir, "js"), "--out", out,
		"--client-port", fmt.Sprint(cp), "--route-port", fmt.Sprint(rp), "--leaf-port", fmt.Sprint(lp),
		"--site", fmt.Sprintf("a=127.0.0.1:%d", sp), "--site", fmt.Sprintf("b=127.0.0.1:%d", sp+1))

	var core []*server.Server
	var coreLogs []*logLines
	for i := range 3 {
		opts := confOpts(t, out, fmt.Sprintf("paddock-%d", i+1))
		if opts.LeafNode.Port != lp+i || len(opts.LeafNode.Users) != 1 || opts.LeafNode.Users[0].Account == nil || opts.LeafNode.Users[0].Account.Name != auth.PaddockAccount {
			t.Fatalf("server %d: leaf port %d, leaf users %+v; want port %d and one user bound to %s", i+1, opts.LeafNode.Port, opts.LeafNode.Users, lp+i, auth.PaddockAccount)
		}
		ns, l := runServer(t, opts)
		core = append(core, ns)
		coreLogs = append(coreLogs, l)
	}
	// Site a's link goes through a proxy the test can cut; site b's is
	// the config as written.
	proxy := testenv.StartTCPProxy(t, fmt.Sprintf("127.0.0.1:%d", lp))
	var leaves []*server.Server
	for _, site := range []string{"a", "b"} {
		opts := confOpts(t, out, "paddock-site-"+site)
		if opts.JetStream || len(opts.LeafNode.Remotes) != 1 || len(opts.LeafNode.Remotes[0].URLs) != 3 || opts.LeafNode.Remotes[0].LocalAccount != auth.PaddockAccount {
			t.Fatalf("site %s: JetStream %v, remotes %+v; want no JetStream and one remote to the three servers, of %s", site, opts.JetStream, opts.LeafNode.Remotes, auth.PaddockAccount)
		}
		if site == "a" {
			u := *opts.LeafNode.Remotes[0].URLs[0]
			u.Host = proxy.Addr()
			opts.LeafNode.Remotes[0].URLs = []*url.URL{&u}
		}
		ns, _ := runServer(t, opts)
		leaves = append(leaves, ns)
	}
	linked := func(want int) func() error {
		return func() error {
			for i, ns := range leaves {
				w := 1
				if i == 0 {
					w = want
				}
				if n := ns.NumLeafNodes(); n != w {
					return fmt.Errorf("site %d's leaf server has %d links, want %d", i, n, w)
				}
			}
			return nil
		}
	}
	testenv.Eventually(t, time.Minute, linked(1))

	// The engine, in the core.
	ctx := testenv.Context(t, 5*time.Minute)
	engine := testenv.ConnectAs(t, core[0].ClientURL(), st.CredsPath("engine"))
	js := testenv.JetStream(t, engine.Conn)
	schedLog := &testenv.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the scheduler's and the nodes' log:\n%s", schedLog)
		}
	})
	sched, _ := control.Start(t, ctx, engine.Conn, js, 3, scheduler.Config{
		Name: "core", NodeTTL: 3 * time.Second, LostCheck: 200 * time.Millisecond, AutoResume: true, LostSweep: 500 * time.Millisecond,
	}, projector.Config{Name: "projector_core"}, slog.New(slog.NewTextHandler(schedLog, nil)))

	// A node per site, on its leaf server.
	siteAgent(t, st, leaves[0].ClientURL(), "na", "a", schedLog)
	siteAgent(t, st, leaves[1].ClientURL(), "nb", "b", schedLog)
	testenv.Eventually(t, time.Minute, func() error {
		if n := len(sched.Nodes()); n != 2 {
			return fmt.Errorf("the engine knows %d nodes, want na and nb", n)
		}
		return nil
	})
	newClient := func(url string) *client.Client {
		t.Helper()
		cl, err := client.New(testenv.ConnectAs(t, url, st.CredsPath("cli")).Conn, client.Options{Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	coreClient, siteClient := newClient(core[1].ClientURL()), newClient(leaves[0].ClientURL())
	sa, err := siteClient.Create(ctx, commands.CreateArgs{Runtime: "local", NodeLabels: map[string]string{"site": "a"}})
	if err != nil {
		t.Fatalf("create from a client inside site a: %v", err)
	}
	sb, err := coreClient.Create(ctx, commands.CreateArgs{Runtime: "local", NodeLabels: map[string]string{"site": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	for id, node := range map[string]string{sa.SessionID: "na", sb.SessionID: "nb"} {
		if l, err := coreClient.Lookup(ctx, id); err != nil || l.Node != node {
			t.Fatalf("session %s: %+v, %v; want on %s", id, l, err, node)
		}
	}
	if _, err := siteClient.WriteFile(ctx, sa.SessionID, "notes.md", []byte("site a\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := siteClient.Persist(ctx, sa.SessionID); err != nil {
		t.Fatal(err)
	}
	echo := func(cl *client.Client, id string) error {
		res, err := cl.Exec(ctx, id, commands.ExecArgs{Argv: []string{"echo", "ok"}})
		if err == nil && (res.ExitCode != 0 || string(res.Stdout) != "ok\n") {
			err = fmt.Errorf("exec in %s: exit %d, stdout %q", id, res.ExitCode, res.Stdout)
		}
		return err
	}
	for _, id := range []string{sa.SessionID, sb.SessionID} {
		if err := echo(coreClient, id); err != nil {
			t.Fatal(err)
		}
	}

	// The cut. Site b keeps working throughout: each round of the wait
	// execs there first.
	proxy.Cut()
	testenv.Eventually(t, time.Minute, linked(0))
	bExecs := 0
	testenv.Eventually(t, time.Minute, func() error {
		if err := echo(coreClient, sb.SessionID); err != nil {
			t.Fatalf("site b during site a's cut: %v", err)
		}
		bExecs++
		if n := leaves[0].NumLeafNodes(); n != 0 {
			t.Fatalf("site a's leaf server linked again (%d links) during the cut", n)
		}
		l, err := coreClient.Lookup(ctx, sa.SessionID)
		if err != nil {
			return err
		}
		if l.Status != "lost" {
			return fmt.Errorf("site a's session is %s, want lost", l.Status)
		}
		return nil
	})
	// Commands to site a's session fail, typed and retryable, from the
	// core and from inside the site.
	for name, cl := range map[string]*client.Client{"the core": coreClient, "inside site a": siteClient} {
		err := echo(cl, sa.SessionID)
		if code := errcode.Of(err); err == nil || !code.Retryable() {
			t.Errorf("exec in site a's session from %s during the cut: %v (%s); want a retryable error", name, err, code)
		}
	}
	if err := echo(coreClient, sb.SessionID); err != nil {
		t.Fatalf("site b during site a's cut: %v", err)
	}
	t.Logf("site b served %d execs while site a's session went lost", bExecs+1)

	// The link comes back: na is heard again, and the session comes back
	// onto it (site a's only node) from its snapshot.
	proxy.Restore()
	testenv.Eventually(t, time.Minute, linked(1))
	testenv.Eventually(t, 2*time.Minute, func() error {
		l, err := coreClient.Lookup(ctx, sa.SessionID)
		if err != nil {
			return err
		}
		if l.Status != "running" || l.Node != "na" {
			return fmt.Errorf("site a's session: %s on %s; want running on na", l.Status, l.Node)
		}
		return nil
	})
	if got, err := siteClient.ReadFile(ctx, sa.SessionID, "notes.md"); err != nil || string(got) != "site a\n" {
		t.Fatalf("notes.md after the link came back: %q, %v", got, err)
	}
	for _, cl := range []*client.Client{coreClient, siteClient} {
		if err := echo(cl, sa.SessionID); err != nil {
			t.Fatalf("site a's session after the link came back: %v", err)
		}
	}
	log := events.NewLog(js, "", "")
	for id, wantLost := range map[string]bool{sa.SessionID: true, sb.SessionID: false} {
		evs, err := log.Session(ctx, "default", id)
		if err != nil {
			t.Fatal(err)
		}
		lost := slices.ContainsFunc(evs, func(e events.Event) bool { return e.Op == string(commands.OpNodeLost) })
		if lost != wantLost {
			t.Errorf("session %s: node_lost in its history %v, want %v", id, lost, wantLost)
		}
	}
	if l, err := coreClient.Lookup(ctx, sb.SessionID); err != nil || l.Status != "running" || l.Node != "nb" {
		t.Fatalf("site b's session after the cut: %+v, %v", l, err)
	}

	// Attack: leaf servers that know the core's leaf addresses (and the
	// accounts, which are public keys) but not the link's secret.
	for _, rogue := range []struct{ name, user string }{{"no credentials", ""}, {"a wrong password", "leaf:guess"}} {
		t.Run("rogue leaf with "+rogue.name, func(t *testing.T) {
			opts := confOpts(t, out, "paddock-site-b")
			opts.ServerName, opts.Port = "rogue", -1
			var urls []*url.URL
			for _, u := range opts.LeafNode.Remotes[0].URLs {
				ru := *u
				ru.User = nil
				if rogue.user != "" {
					name, pass, _ := strings.Cut(rogue.user, ":")
					ru.User = url.UserPassword(name, pass)
				}
				urls = append(urls, &ru)
			}
			opts.LeafNode.Remotes[0].URLs = urls
			assertLeafRefused(t, opts, coreLogs)
		})
	}
}

// assertLeafRefused runs a leaf server from opts and checks that the core
// servers refuse its link, twice (it tries again each second), and that
// it never holds one.
func assertLeafRefused(t *testing.T, opts *server.Options, coreLogs []*logLines) {
	t.Helper()
	var before int
	for _, l := range coreLogs {
		before += l.count(leafRefused)
	}
	rogue, logs := runServer(t, opts)
	testenv.Eventually(t, time.Minute, func() error {
		if n := rogue.NumLeafNodes(); n != 0 {
			return fmt.Errorf("the rogue holds %d leaf links:\n%s", n, logs)
		}
		n := -before
		for _, l := range coreLogs {
			n += l.count(leafRefused)
		}
		if n < 2 {
			return fmt.Errorf("the core refused %d leaf links since the rogue started, want 2; the rogue's log:\n%s", n, logs)
		}
		return nil
	})
	if n := rogue.NumLeafNodes(); n != 0 {
		t.Fatalf("the rogue holds %d leaf links", n)
	}
}

// TestSiteLeafTLS: with --tls, a site's leaf server links to the core
// over mutual TLS with the certificate `engine cluster config` made for
// it; a leaf server with the link's secret but no certificate, or one of
// another CA, is refused.
func TestSiteLeafTLS(t *testing.T) {
	st := sitesAuth(t)
	dir := t.TempDir()
	base := testenv.FreePortRange(t, 4)
	out := filepath.Join(dir, "conf")
	args := func(out string, base int) []string {
		return []string{"cluster", "config", "--servers", "1", "--tls", "--auth-dir", st.Dir(), "--store-dir", filepath.Join(dir, "js"), "--out", out,
			"--client-port", fmt.Sprint(base), "--route-port", fmt.Sprint(base + 1), "--leaf-port", fmt.Sprint(base + 2),
			"--site", fmt.Sprintf("a=127.0.0.1:%d", base+3)}
	}
	mustCLI(t, "", "", args(out, base)...)
	opts := confOpts(t, out, "paddock-1")
	if opts.LeafNode.TLSConfig == nil || opts.LeafNode.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatalf("the core's leaf listener: TLS %+v; want mutual TLS", opts.LeafNode.TLSConfig)
	}
	_, l := runServer(t, opts)
	coreLogs := []*logLines{l}
	sopts := confOpts(t, out, "paddock-site-a")
	if r := sopts.LeafNode.Remotes[0]; r.TLSConfig == nil || len(r.TLSConfig.Certificates) != 1 {
		t.Fatalf("site a's link: TLS %+v; want its certificate", r.TLSConfig)
	}
	site, _ := runServer(t, sopts)
	testenv.Eventually(t, time.Minute, func() error {
		if n := site.NumLeafNodes(); n != 1 {
			return fmt.Errorf("site a has %d links to the core, want 1", n)
		}
		return nil
	})

	// Another deployment's material: a CA and a site certificate of its own.
	other := filepath.Join(dir, "other")
	mustCLI(t, "", "", args(other, testenv.FreePortRange(t, 4))...)
	foreign := confOpts(t, other, "paddock-site-a").LeafNode.Remotes[0].TLSConfig
	for _, rogue := range []struct {
		name string
		edit func(*server.RemoteLeafOpts)
	}{
		{"the secret and no certificate", func(r *server.RemoteLeafOpts) { r.TLSConfig.Certificates = nil }},
		{"the secret and another CA's certificate", func(r *server.RemoteLeafOpts) {
			r.TLSConfig.Certificates = foreign.Certificates
		}},
	} {
		t.Run("rogue leaf with "+rogue.name, func(t *testing.T) {
			ropts := confOpts(t, out, "paddock-site-a")
			ropts.ServerName, ropts.Port, ropts.TLSConfig = "rogue", -1, nil
			rogue.edit(ropts.LeafNode.Remotes[0])
			assertLeafRefused(t, ropts, coreLogs)
		})
	}
}
