package main

import (
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/testenv"
)

// logLines is a nats-server logger that keeps the lines it is given.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}

func (l *logLines) Noticef(format string, v ...any) { l.add(format, v...) }
func (l *logLines) Warnf(format string, v ...any)   { l.add(format, v...) }
func (l *logLines) Fatalf(format string, v ...any)  { l.add(format, v...) }
func (l *logLines) Errorf(format string, v ...any)  { l.add(format, v...) }
func (l *logLines) Debugf(format string, v ...any)  { l.add(format, v...) }
func (l *logLines) Tracef(format string, v ...any)  { l.add(format, v...) }

// count returns how many lines match re.
func (l *logLines) count(re *regexp.Regexp) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if re.MatchString(s) {
			n++
		}
	}
	return n
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// runServer starts an in-process nats-server from opts, logging to the
// returned lines; it stops when the test ends.
func runServer(t *testing.T, opts *server.Options) (*server.Server, *logLines) {
	t.Helper()
	opts.NoSigs = true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("server %s: %v", opts.ServerName, err)
	}
	logs := &logLines{}
	ns.SetLoggerV2(logs, false, false, false)
	go ns.Start() // stopped by the cleanup
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	if !ns.ReadyForConnections(30 * time.Second) {
		t.Fatalf("server %s not ready:\n%s", opts.ServerName, logs)
	}
	return ns, logs
}

// routeRefused is what a server logs when it refuses a route: its
// credentials are wrong or missing, or it has no certificate of the
// cluster's CA.
var routeRefused = regexp.MustCompile(`Router connection closed: (Authentication Failure|TLS Handshake Failure)`)

// TestClusterEdges: three servers run from the configs `engine cluster
// config` writes route to each other, and a rogue server that knows the
// route address (and the accounts, which are public keys) never joins and
// sees no message of the cluster's: on loopback, routes authenticate with
// the generated secret; with --tls, a route also needs a certificate of
// the cluster's CA, so even a rogue with the stolen secret and a
// certificate of its own CA is refused. Clients reach a --tls cluster
// with the CA (--tls-ca).
func TestClusterEdges(t *testing.T) {
	st := clusterAuth(t)
	for _, tc := range []struct {
		name  string
		flags []string
		// rogues: does the rogue present the route secret, and a
		// certificate (of its own CA)?
		rogues []struct{ secret, cert bool }
	}{
		{"loopback", nil, []struct{ secret, cert bool }{{false, false}}},
		{"tls", []string{"--tls"}, []struct{ secret, cert bool }{{false, false}, {true, false}, {true, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cp, rp := testenv.FreePortRange(t, 3), testenv.FreePortRange(t, 3)
			out := filepath.Join(dir, "conf")
			args := append([]string{"cluster", "config", "--auth-dir", st.Dir(), "--store-dir", filepath.Join(dir, "js"), "--out", out,
				"--client-port", fmt.Sprint(cp), "--route-port", fmt.Sprint(rp)}, tc.flags...)
			mustCLI(t, "", "", args...)
			tls := len(tc.flags) > 0
			var servers []*server.Server
			var slogs []*logLines
			var routes []*url.URL
			for i := range 3 {
				opts, err := server.ProcessConfigFile(filepath.Join(out, fmt.Sprintf("paddock-%d.conf", i+1)))
				if err != nil {
					t.Fatal(err)
				}
				if opts.Cluster.Username == "" || opts.Cluster.Password == "" || (opts.Cluster.TLSConfig != nil) != tls || (opts.TLSConfig != nil) != tls {
					t.Fatalf("server %d: route user %q, route TLS %v, client TLS %v; want route authorization, and TLS with --tls only", i+1, opts.Cluster.Username, opts.Cluster.TLSConfig != nil, opts.TLSConfig != nil)
				}
				routes = opts.Routes
				ns, l := runServer(t, opts)
				servers = append(servers, ns)
				slogs = append(slogs, l)
			}
			testenv.Eventually(t, time.Minute, func() error {
				for _, ns := range servers {
					if n := ns.NumRemotes(); n != 2 {
						return fmt.Errorf("%s routes to %d servers, want 2", ns.Name(), n)
					}
				}
				return nil
			})

			// The cluster is reached as the configs' identities, over TLS
			// with the CA.
			copts := []nats.Option{nats.Timeout(5 * time.Second)}
			creds, err := auth.LoadCreds(st.CredsPath("admin"))
			if err != nil {
				t.Fatal(err)
			}
			copts = append(copts, creds.Options()...)
			if tls {
				copts = append(copts, nats.RootCAs(filepath.Join(out, "ca.pem")))
			}
			admin, err := nats.Connect(servers[0].ClientURL(), copts...)
			if err != nil {
				t.Fatalf("admin to the cluster: %v", err)
			}
			defer admin.Close()
			if tls && !admin.TLSRequired() {
				t.Errorf("the client connection to a --tls server is not TLS")
			}

			for _, r := range tc.rogues {
				t.Run(fmt.Sprintf("secret=%v,cert=%v", r.secret, r.cert), func(t *testing.T) {
					// The rogue: a server of its own making, with the
					// cluster's accounts and a password user of its own
					// in the PADDOCK account, soliciting every route.
					rdir := filepath.Join(t.TempDir(), "rogue")
					rargs := []string{"cluster", "config", "--servers", "1", "--auth-dir", st.Dir(), "--store-dir", filepath.Join(rdir, "js"), "--out", rdir}
					if r.cert {
						rargs = append(rargs, "--tls")
					}
					mustCLI(t, "", "", rargs...)
					ropts, err := server.ProcessConfigFile(filepath.Join(rdir, "paddock-1.conf"))
					if err != nil {
						t.Fatal(err)
					}
					ropts.Cluster.Name, ropts.Cluster.Host, ropts.Cluster.Port = "paddock", "127.0.0.1", -1
					if r.cert {
						// Its own CA's certificate, presented on its routes;
						// it trusts whatever the cluster's servers present.
						ropts.Cluster.TLSConfig, ropts.Cluster.TLSTimeout = ropts.TLSConfig.Clone(), 5
						ropts.Cluster.TLSConfig.InsecureSkipVerify = true
					}
					ropts.ServerName, ropts.Port, ropts.TLSConfig = "rogue", -1, nil
					ropts.Routes = nil
					for _, u := range routes {
						ru := *u
						if !r.secret {
							ru.User = nil
						}
						ropts.Routes = append(ropts.Routes, &ru)
					}
					var paddock *server.Account
					for _, nk := range ropts.Nkeys {
						if nk.Account != nil && nk.Account.Name == auth.PaddockAccount {
							paddock = nk.Account
						}
					}
					if paddock == nil {
						t.Fatal("no PADDOCK account in the config")
					}
					ropts.Users = append(ropts.Users, &server.User{Username: "rogue", Password: "rogue", Account: paddock})
					var before []int
					for _, l := range slogs {
						before = append(before, l.count(routeRefused))
					}
					rogue, logs := runServer(t, ropts)
					spy, err := nats.Connect(rogue.ClientURL(), nats.UserInfo("rogue", "rogue"))
					if err != nil {
						t.Fatal(err)
					}
					defer spy.Close()
					seen, err := spy.SubscribeSync(">")
					if err != nil {
						t.Fatal(err)
					}
					if err := spy.Flush(); err != nil {
						t.Fatal(err)
					}

					// Every server has refused the rogue's route, twice (it
					// tries again each second), and the rogue has no route.
					// (Its own side registers a route for the instant
					// between the server's INFO and the refusal, so its
					// count is read in the loop; a rogue that joins keeps
					// its routes.)
					testenv.Eventually(t, time.Minute, func() error {
						if n := rogue.NumRoutes(); n != 0 {
							return fmt.Errorf("the rogue has %d routes, want 0:\n%s", n, logs)
						}
						for i, l := range slogs {
							if n := l.count(routeRefused) - before[i]; n < 2 {
								return fmt.Errorf("server %d refused %d routes since the rogue started, want 2; the rogue's log:\n%s", i+1, n, logs)
							}
						}
						return nil
					})
					for range 10 {
						if err := admin.Publish("sbx.node.n1.place", []byte(`{"secret_env":{"TOKEN":"s3cret"}}`)); err != nil {
							t.Fatal(err)
						}
					}
					if err := admin.Flush(); err != nil {
						t.Fatal(err)
					}
					if err := spy.Flush(); err != nil {
						t.Fatal(err)
					}
					if n, _, _ := seen.Pending(); n != 0 {
						m, _ := seen.NextMsg(0)
						t.Errorf("the rogue's subscriber got %d messages of the cluster's (%v); want none", n, m)
					}
					// No server of the cluster holds a route to it: the
					// side that forwards the cluster's messages.
					for _, ns := range servers {
						rz, err := ns.Routez(nil)
						if err != nil {
							t.Fatal(err)
						}
						for _, r := range rz.Routes {
							if r.RemoteName == "rogue" {
								t.Errorf("%s has a route to the rogue: %+v", ns.Name(), r)
							}
						}
						if n := ns.NumRemotes(); n != 2 {
							t.Errorf("%s routes to %d servers with the rogue knocking, want 2", ns.Name(), n)
						}
					}
				})
			}
		})
	}
}
