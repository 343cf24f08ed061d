package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/testenv"
)

// clusterAuth returns an auth store with an engine, an admin and node n1.
func clusterAuth(t *testing.T) *auth.Store {
	t.Helper()
	st := auth.Open(filepath.Join(t.TempDir(), "auth"))
	for _, id := range [][2]string{{"engine", "engine"}, {"admin", "admin"}, {"n1", "node"}} {
		if _, err := st.Add(id[0], auth.Role(id[1]), ""); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// TestClusterConfig: `engine cluster config` writes one config per server
// that nats-server reads as a JetStream cluster member with fsync before
// every ack, routes to every server and Paddock's users; it prints the
// servers' client URLs.
func TestClusterConfig(t *testing.T) {
	st := clusterAuth(t)
	for _, tc := range []struct {
		name      string
		args      []string
		urls      string
		host      string
		ports     [3][2]int // client, route port of each server
		routeHost [3]string
	}{
		{"one host", []string{"--client-port", "14222", "--route-port", "16222"},
			"nats://127.0.0.1:14222,nats://127.0.0.1:14223,nats://127.0.0.1:14224", "127.0.0.1",
			[3][2]int{{14222, 16222}, {14223, 16223}, {14224, 16224}}, [3]string{"127.0.0.1", "127.0.0.1", "127.0.0.1"}},
		{"a host per server", []string{"--host", "n1.example,n2.example,n3.example", "--listen-host", "0.0.0.0"},
			"nats://n1.example:4222,nats://n2.example:4222,nats://n3.example:4222", "0.0.0.0",
			[3][2]int{{4222, 6222}, {4222, 6222}, {4222, 6222}}, [3]string{"n1.example", "n2.example", "n3.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "conf")
			args := append([]string{"cluster", "config", "--auth-dir", st.Dir(), "--store-dir", "/data/js", "--out", out}, tc.args...)
			if got := mustCLI(t, "", "", args...); got != tc.urls+"\n" {
				t.Fatalf("stdout %q, want %q", got, tc.urls+"\n")
			}
			for i := range 3 {
				name := fmt.Sprintf("paddock-%d", i+1)
				opts, err := server.ProcessConfigFile(filepath.Join(out, name+".conf"))
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if opts.ServerName != name || opts.Host != tc.host || opts.Port != tc.ports[i][0] {
					t.Errorf("%s: server %q on %s:%d, want %q on %s:%d", name, opts.ServerName, opts.Host, opts.Port, name, tc.host, tc.ports[i][0])
				}
				if !opts.JetStream || !opts.SyncAlways || opts.StoreDir != "/data/js/"+name {
					t.Errorf("%s: jetstream %v, sync always %v, store %q; want JetStream, fsync before every ack, /data/js/%s", name, opts.JetStream, opts.SyncAlways, opts.StoreDir, name)
				}
				if opts.Cluster.Name != "paddock" || opts.Cluster.Host != tc.host || opts.Cluster.Port != tc.ports[i][1] || len(opts.Routes) != 3 {
					t.Errorf("%s: cluster %+v with %d routes; want paddock on %s:%d, 3 routes", name, opts.Cluster, len(opts.Routes), tc.host, tc.ports[i][1])
				}
				for j, r := range opts.Routes {
					if want := net.JoinHostPort(tc.routeHost[j], fmt.Sprint(tc.ports[j][1])); r.Host != want {
						t.Errorf("%s: route %d to %s, want %s", name, j, r.Host, want)
					}
				}
				if len(opts.Nkeys) != 3 {
					t.Errorf("%s: %d nkey users, want the store's 3", name, len(opts.Nkeys))
				}
				// Routes authenticate; beyond loopback they and the
				// clients get TLS, mutual on routes.
				if opts.Cluster.Username != "route" || len(opts.Cluster.Password) != 64 {
					t.Errorf("%s: route authorization %q/%d-char password; want route and the generated secret", name, opts.Cluster.Username, len(opts.Cluster.Password))
				}
				for _, r := range opts.Routes {
					if p, _ := r.User.Password(); r.User.Username() != "route" || p != opts.Cluster.Password {
						t.Errorf("%s: route %s does not carry the route credentials", name, r.Redacted())
					}
				}
				if adv := net.JoinHostPort(tc.routeHost[i], fmt.Sprint(tc.ports[i][1])); tc.host == "0.0.0.0" && opts.Cluster.Advertise != adv {
					t.Errorf("%s: routes advertised at %q, want %s (the address the others' routes name)", name, opts.Cluster.Advertise, adv)
				}
				if adv := net.JoinHostPort(tc.routeHost[i], fmt.Sprint(tc.ports[i][0])); tc.host == "0.0.0.0" && opts.ClientAdvertise != adv {
					t.Errorf("%s: clients told %q, want %s", name, opts.ClientAdvertise, adv)
				}
				beyond := tc.host != "127.0.0.1"
				if (opts.TLSConfig != nil) != beyond || (opts.Cluster.TLSConfig != nil) != beyond {
					t.Errorf("%s: client TLS %v, route TLS %v; want both %v", name, opts.TLSConfig != nil, opts.Cluster.TLSConfig != nil, beyond)
				}
				if beyond && (opts.Cluster.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert || opts.Cluster.TLSConfig.ClientCAs == nil) {
					t.Errorf("%s: routes do not require a certificate of the cluster's CA: %v", name, opts.Cluster.TLSConfig.ClientAuth)
				}
			}
			// Every file is the owner's only; a second run keeps the
			// secret and the certificates.
			files, err := os.ReadDir(out)
			if err != nil {
				t.Fatal(err)
			}
			before := map[string][]byte{}
			for _, f := range files {
				info, err := f.Info()
				if err != nil {
					t.Fatal(err)
				}
				if info.Mode().Perm() != 0o600 {
					t.Errorf("%s: mode %v, want 0600", f.Name(), info.Mode().Perm())
				}
				if !strings.HasSuffix(f.Name(), ".conf") {
					before[f.Name()], _ = os.ReadFile(filepath.Join(out, f.Name()))
				}
			}
			if _, ok := before["route.secret"]; !ok || len(before) != map[bool]int{false: 1, true: 9}[tc.host != "127.0.0.1"] {
				t.Errorf("files beside the configs: %d; want route.secret, and with TLS a CA and three certificates and keys", len(before))
			}
			mustCLI(t, "", "", args...)
			for name, b := range before {
				if now, _ := os.ReadFile(filepath.Join(out, name)); string(now) != string(b) {
					t.Errorf("%s changed on a second run", name)
				}
			}
		})
	}
	// --max-store bounds each server's JetStream store and the PADDOCK
	// account's, every replica counted: three servers, three times one.
	out := filepath.Join(t.TempDir(), "conf")
	mustCLI(t, "", "", "cluster", "config", "--auth-dir", st.Dir(), "--max-store", "2g", "--out", out)
	for i := range 3 {
		file := filepath.Join(out, fmt.Sprintf("paddock-%d.conf", i+1))
		opts, err := server.ProcessConfigFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if opts.JetStreamMaxStore != 2<<30 {
			t.Errorf("%s: max_file_store %d, want %d", file, opts.JetStreamMaxStore, 2<<30)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(`"max_file": %d`, 3*(2<<30)); !strings.Contains(string(b), want) {
			t.Errorf("%s: no %s for the PADDOCK account:\n%s", file, want, b)
		}
	}
	// One server is a server, not a cluster.
	out = filepath.Join(t.TempDir(), "conf")
	mustCLI(t, "", "", "cluster", "config", "--servers", "1", "--auth-dir", st.Dir(), "--out", out)
	opts, err := server.ProcessConfigFile(filepath.Join(out, "paddock-1.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if opts.Cluster.Port != 0 || len(opts.Routes) != 0 {
		t.Errorf("one server: cluster %+v, routes %v; want none", opts.Cluster, opts.Routes)
	}
}

// TestClusterConfigBadInput: bad flags are invalid_request (exit 2) and
// write nothing.
func TestClusterConfigBadInput(t *testing.T) {
	st := clusterAuth(t)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no servers", []string{"--servers", "0"}, "--servers 0"},
		{"too many servers", []string{"--servers", "33"}, "--servers 33"},
		{"port 0", []string{"--client-port", "0"}, "--client-port 0"},
		{"ports past 65535", []string{"--client-port", "65534"}, "65534..65536"},
		{"negative route port", []string{"--route-port", "-5"}, "--route-port -5"},
		{"overlapping ports", []string{"--route-port", "4223"}, "overlap"},
		{"hosts for another count", []string{"--host", "a,b"}, "2 hosts for 3 servers"},
		{"bad host", []string{"--host", "a host"}, `--host "a host"`},
		{"bad listen host", []string{"--listen-host", "0.0.0.0/8"}, "--listen-host"},
		{"bad name", []string{"--name", "a b"}, `--name "a b"`},
		{"quote in store dir", []string{"--store-dir", `/x"y`}, "store dir"},
		{"no out", []string{"--out", ""}, "--out DIR is required"},
		{"out under a file", []string{"--out", filepath.Join(file, "conf")}, "cannot make the directory"},
		{"no identities", []string{"--auth-dir", t.TempDir()}, "no identities"},
		{"an argument", []string{"extra"}, "takes no arguments"},
		{"max store 0", []string{"--max-store", "0"}, "--max-store 0"},
		{"max store not a size", []string{"--max-store", "lots"}, "lots"},
		{"negative max store", []string{"--max-store", "-1g"}, "-1g"},
		{"beyond loopback without tls", []string{"--listen-host", "0.0.0.0", "--tls=false"}, "give --insecure to mean it"},
		{"a remote host without tls", []string{"--host", "n1,n2,n3", "--tls=false"}, "beyond loopback"},
		{"tls and insecure", []string{"--tls", "--insecure"}, "--tls and --insecure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "conf")
			args := append([]string{"cluster", "config", "--auth-dir", st.Dir(), "--out", out}, tc.args...)
			code, _, errs := cli(t, "", "", args...)
			if code != 2 || !strings.HasPrefix(errs, "error: invalid_request: ") || !strings.Contains(errs, tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and invalid_request naming %q", code, errs, tc.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%s was made", out)
			}
		})
	}
}

// TestClusterWaitFails: `engine cluster wait` refuses bad flags and ends
// with unavailable at its timeout when no server answers.
func TestClusterWaitFails(t *testing.T) {
	for _, args := range [][]string{{"--replicas", "9"}, {"--nodes", "-1"}, {"--timeout", "0s"}, {"extra"}} {
		code, _, errs := cli(t, "nats://127.0.0.1:1", "", append([]string{"--creds", "none", "cluster", "wait"}, args...)...)
		if code != 2 || !strings.HasPrefix(errs, "error: invalid_request: ") {
			t.Errorf("cluster wait %v: exit %d, %q; want invalid_request", args, code, errs)
		}
	}
	began := time.Now()
	code, _, errs := cli(t, "nats://127.0.0.1:1", "", "--creds", "none", "cluster", "wait", "--timeout", "300ms")
	if code != exitFailure || !strings.HasPrefix(errs, "error: unavailable: not ready within 300ms") {
		t.Errorf("cluster wait with no server: exit %d, %q; want unavailable", code, errs)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Errorf("cluster wait --timeout 300ms took %s", d)
	}
	// The caller's own deadline, shorter than --timeout, ends the wait
	// with what the last check found missing (CI once saw only "context
	// deadline exceeded").
	code, _, errs = cliWithin(t, 700*time.Millisecond, "nats://127.0.0.1:1", "", "--creds", "none", "cluster", "wait", "--timeout", "1m")
	if code == 0 || !strings.Contains(errs, "context deadline exceeded (the last check found: ") || !strings.Contains(errs, "127.0.0.1:1") {
		t.Errorf("cluster wait cut short by its caller: exit %d, %q; want the deadline and what was missing", code, errs)
	}
	if code, _, _ := cli(t, "", "", "cluster"); code != 2 {
		t.Errorf("engine cluster: exit %d, want 2 (usage)", code)
	}
}

// TestNATSServerBadConfig: `engine nats-server` exits non-zero, with a
// typed error, on a missing or broken config and on a port in use.
func TestNATSServerBadConfig(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.conf")
	if err := os.WriteFile(broken, []byte("port: {{{\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{}, {"-c", filepath.Join(dir, "missing.conf")}, {"-c", broken}, {"-c", broken, "extra"}} {
		code, _, errs := cli(t, "", "", append([]string{"nats-server"}, args...)...)
		if code != 2 || !strings.HasPrefix(errs, "error: invalid_request: ") {
			t.Errorf("nats-server %v: exit %d, %q; want 2, invalid_request", args, code, errs)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	out := filepath.Join(dir, "conf")
	mustCLI(t, "", "", "cluster", "config", "--servers", "1", "--client-port", fmt.Sprint(port), "--auth-dir", clusterAuth(t).Dir(), "--store-dir", filepath.Join(dir, "js"), "--out", out)
	code, _, errs := cli(t, "", "", "nats-server", "-c", filepath.Join(out, "paddock-1.conf"))
	// The server's own log comes first on stderr; the command's error last.
	if code != exitFailure || !strings.Contains(errs, "\nerror: unavailable: nats-server: Error listening on port") {
		t.Errorf("nats-server on a port in use: exit %d, %q; want 125, unavailable", code, errs)
	}
}

var serverReadyRE = regexp.MustCompile(`Server is ready`)

// TestNATSServerProcess: `engine nats-server -c FILE` runs a server that
// authenticates Paddock's identities, reloads its config on SIGHUP (a new
// identity can connect) and exits 0 on SIGTERM.
func TestNATSServerProcess(t *testing.T) {
	st := clusterAuth(t)
	dir := t.TempDir()
	port := testenv.FreePortRange(t, 1)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	config := func() {
		mustCLI(t, "", "", "cluster", "config", "--servers", "1", "--client-port", fmt.Sprint(port), "--auth-dir", st.Dir(), "--store-dir", filepath.Join(dir, "js"), "--out", filepath.Join(dir, "conf"))
	}
	config()
	p := testenv.NewProc(t, "nats-server", testenv.BuildBinary(t, "./cmd/engine"), "nats-server", "-c", filepath.Join(dir, "conf", "paddock-1.conf"))
	p.Start(t)
	p.WaitLog(t, serverReadyRE, 30*time.Second)
	testenv.ConnectAs(t, url, st.CredsPath("admin"))
	if _, err := st.Add("alice", auth.RoleClient, "acme"); err != nil {
		t.Fatal(err)
	}
	if c, err := testenv.DialAs(url, st.CredsPath("alice")); err == nil {
		c.Close()
		t.Fatal("alice connected before the config had her")
	}
	config()
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		c, err := testenv.DialAs(url, st.CredsPath("alice"))
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.FlushWithContext(ctx)
	})
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(t, 30*time.Second); err != nil {
		t.Fatalf("nats-server on SIGTERM: %v\n%s", err, p.Log())
	}
	if !strings.Contains(p.Log(), "stopping on signal") {
		t.Errorf("log:\n%s", p.Log())
	}
}

// TestClusterConfigInsecure: --insecure writes configs that listen beyond
// loopback without TLS, their routes still authenticated; a route.secret
// that is not one is invalid_request, and nothing is written.
func TestClusterConfigInsecure(t *testing.T) {
	st := clusterAuth(t)
	out := filepath.Join(t.TempDir(), "conf")
	mustCLI(t, "", "", "cluster", "config", "--auth-dir", st.Dir(), "--listen-host", "0.0.0.0", "--insecure", "--out", out)
	opts, err := server.ProcessConfigFile(filepath.Join(out, "paddock-2.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if opts.TLSConfig != nil || opts.Cluster.TLSConfig != nil || opts.Cluster.Username != "route" || opts.Cluster.Password == "" {
		t.Errorf("--insecure: client TLS %v, route TLS %v, route user %q; want no TLS and route authorization", opts.TLSConfig != nil, opts.Cluster.TLSConfig != nil, opts.Cluster.Username)
	}
	if _, err := os.Stat(filepath.Join(out, "ca.pem")); err == nil {
		t.Errorf("--insecure made a CA")
	}

	bad := filepath.Join(t.TempDir(), "conf")
	if err := os.MkdirAll(bad, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, "route.secret"), []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs := cli(t, "", "", "cluster", "config", "--auth-dir", st.Dir(), "--out", bad)
	if code != 2 || !strings.Contains(errs, "not a route secret") {
		t.Errorf("a bad route.secret: exit %d, %q; want invalid_request", code, errs)
	}
	if _, err := os.Stat(filepath.Join(bad, "paddock-1.conf")); err == nil {
		t.Errorf("a config was written beside a bad route.secret")
	}
}
