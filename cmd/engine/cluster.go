package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	flag "github.com/spf13/pflag"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/cmd/internal/bytesize"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes"
)

const clusterUsage = `usage:
  engine cluster config --out DIR [--servers 3] [--host 127.0.0.1] [--client-port 4222] [--route-port 6222]
                        [--name paddock] [--store-dir DIR] [--listen-host H] [--auth-dir DIR]
                        [--tls] [--insecure] [--tls-dir DIR]
      writes DIR/<name>-<i>.conf for each server of a NATS cluster (JetStream on disk with
      sync_interval: always, routes to every server, Paddock's accounts from the auth store)
      and prints the servers' client URLs, comma separated (for --nats-url and PADDOCK_URL).
      Routes authenticate with a secret made in DIR/route.secret. A server that listens beyond
      loopback (or --tls) gets TLS: mutual on routes, server-side for clients (give engines,
      nodes and the CLI --tls-ca DIR/ca.pem), from a CA and certificates made in DIR. Beyond
      loopback without TLS is refused unless --insecure. Files already in DIR are kept.
      One --host: every server on it, ports counting up from --client-port and --route-port.
      A list --host h1,h2,h3 (one per server): server i on host i, every one on the same ports.
      Each server keeps JetStream in --store-dir/<name>-<i>. Run one with engine nats-server -c FILE.
  engine cluster wait [--replicas N] [--nodes N] [--timeout 60s]
      waits until every server of --server (a comma-separated list) answers with JetStream;
      with --replicas, until each of Paddock's streams has N replicas, a leader and current
      followers; with --nodes, until N nodes answer. Exits 1 (unavailable) at the timeout.
`

// clusterCmd is `engine cluster ...`: the configs of a NATS cluster for
// Paddock, and a wait for such a deployment to be ready.
func clusterCmd(ctx context.Context, base globals, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageErr("%s", clusterUsage)
	}
	switch args[0] {
	case "config":
		return clusterConfigCmd(args[1:], stdout, stderr)
	case "wait":
		return clusterWaitCmd(ctx, base, args[1:], stdout, stderr)
	}
	return usageErr("%s", clusterUsage)
}

// clusterSpec is what `engine cluster config` is told.
type clusterSpec struct {
	servers    int
	hosts      []string
	listenHost string
	clientPort int
	routePort  int
	name       string
	storeDir   string
	// maxStore bounds each server's JetStream store (0: nats-server's
	// default); the PADDOCK account may then store servers × maxStore,
	// every replica counted.
	maxStore int64
	// tls puts TLS on the client and route listeners; insecure lets a
	// server listen beyond loopback without it (tlsSet: --tls was given).
	tls, tlsSet, insecure bool
	// tlsDir is where the servers find the certificates.
	tlsDir string
	// routeSecret is the route password ("": no route authorization,
	// a spec that only validates).
	routeSecret string
}

// isLoopback says whether host names this machine's loopback only.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// beyondLoopback returns the first address a server listens on that is
// not loopback ("": every server listens on loopback only).
func (s clusterSpec) beyondLoopback() string {
	for i := range s.servers {
		if l := s.listen(i); !isLoopback(l) {
			return l
		}
	}
	return ""
}

// listen returns the address server i listens on.
func (s clusterSpec) listen(i int) string {
	if s.listenHost != "" {
		return s.listenHost
	}
	_, host, _, _ := s.server(i)
	return host
}

// hostRE is what a host may be: a name, an IPv4 or an IPv6 address.
var hostRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,253}$`)

// nameRE is what a cluster name may be: it names the servers and their
// store directories too.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// validate checks the spec; each problem is invalid_request.
func (s clusterSpec) validate() error {
	if s.servers < 1 || s.servers > 32 {
		return usageErr("--servers %d: want 1 to 32 (3 for a cluster that survives the loss of one server)", s.servers)
	}
	if !nameRE.MatchString(s.name) {
		return usageErr("--name %q: want letters, digits, - and _ (at most 64)", s.name)
	}
	if len(s.hosts) != 1 && len(s.hosts) != s.servers {
		return usageErr("--host names %d hosts for %d servers: give one host, or one per server", len(s.hosts), s.servers)
	}
	for _, h := range s.hosts {
		if !hostRE.MatchString(h) {
			return usageErr("--host %q is not a host name or address", h)
		}
	}
	if s.listenHost != "" && !hostRE.MatchString(s.listenHost) {
		return usageErr("--listen-host %q is not a host name or address", s.listenHost)
	}
	if s.storeDir == "" {
		return usageErr("--store-dir is empty")
	}
	span := 1 // ports each of the two ranges takes on one host
	if len(s.hosts) == 1 {
		span = s.servers
	}
	for _, p := range []struct {
		flag string
		port int
	}{{"--client-port", s.clientPort}, {"--route-port", s.routePort}} {
		if p.port < 1 || p.port+span-1 > 65535 {
			return usageErr("%s %d: the ports %d..%d must lie in 1..65535", p.flag, p.port, p.port, p.port+span-1)
		}
	}
	if s.clientPort < s.routePort+span && s.routePort < s.clientPort+span {
		return usageErr("client ports %d..%d and route ports %d..%d overlap", s.clientPort, s.clientPort+span-1, s.routePort, s.routePort+span-1)
	}
	if s.insecure && s.tlsSet && s.tls {
		return usageErr("--tls and --insecure: give one (--insecure writes no TLS)")
	}
	if l := s.beyondLoopback(); l != "" && !s.tls && !s.insecure {
		return usageErr("servers listen on %s, beyond loopback, and --tls=false: their clients' and routes' traffic (secrets included) would cross the network in clear text; leave --tls on, or give --insecure to mean it", l)
	}
	return nil
}

// server returns server i's (0-based) name, host, and client and route
// ports.
func (s clusterSpec) server(i int) (name, host string, clientPort, routePort int) {
	name = fmt.Sprintf("%s-%d", s.name, i+1)
	if len(s.hosts) == 1 {
		return name, s.hosts[0], s.clientPort + i, s.routePort + i
	}
	return name, s.hosts[i], s.clientPort, s.routePort
}

// confs returns each server's config.
func (s clusterSpec) confs() []natsConf {
	var routes []string
	for i := range s.servers {
		_, host, _, rp := s.server(i)
		u := url.URL{Scheme: "nats-route", Host: net.JoinHostPort(host, fmt.Sprint(rp))}
		if s.routeSecret != "" {
			u.User = url.UserPassword(routeUser, s.routeSecret)
		}
		routes = append(routes, u.String())
	}
	var out []natsConf
	for i := range s.servers {
		name, host, cp, rp := s.server(i)
		listen := s.listen(i)
		c := natsConf{
			Comment:    fmt.Sprintf("nats-server config for Paddock: server %s, %d of %d (engine cluster config).", name, i+1, s.servers),
			ServerName: name, Host: listen, Port: cp,
			StoreDir: filepath.Join(s.storeDir, name), SyncAlways: true, MaxStore: s.maxStore,
		}
		if listen != host {
			c.ClientAdvertise = net.JoinHostPort(host, fmt.Sprint(cp))
		}
		var routeTLS *natsTLSConf
		if s.tls {
			certName, keyName := serverCertFiles(name)
			cert, key := filepath.Join(s.tlsDir, certName), filepath.Join(s.tlsDir, keyName)
			c.TLS = &natsTLSConf{CertFile: cert, KeyFile: key}
			routeTLS = &natsTLSConf{CertFile: cert, KeyFile: key, CAFile: filepath.Join(s.tlsDir, caCertFile), Verify: true}
		}
		if s.servers > 1 {
			c.Cluster = &natsClusterConf{Name: s.name, Host: listen, Port: rp, Routes: routes, TLS: routeTLS}
			if listen != host {
				c.Cluster.Advertise = net.JoinHostPort(host, fmt.Sprint(rp))
			}
			if s.routeSecret != "" {
				c.Cluster.User, c.Cluster.Password = routeUser, s.routeSecret
			}
		}
		out = append(out, c)
	}
	return out
}

// material returns the files the servers need beside their configs and
// are not in dir already (route.secret, the CA, the servers'
// certificates), and sets s.routeSecret.
func (s *clusterSpec) material(dir string, now time.Time) (map[string][]byte, error) {
	files := map[string][]byte{}
	if s.servers > 1 {
		secret, err := routeSecret(dir, files)
		if err != nil {
			return nil, err
		}
		s.routeSecret = secret
	}
	if !s.tls {
		return files, nil
	}
	ca, err := loadOrMakeCA(dir, s.name, now, files)
	if err != nil {
		return nil, err
	}
	for i := range s.servers {
		name, host, _, _ := s.server(i)
		if err := ca.serverCert(dir, name, certHosts(host, s.listen(i)), now, files); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// clientURLs returns the servers' client URLs, comma separated.
func (s clusterSpec) clientURLs() string {
	var urls []string
	for i := range s.servers {
		_, host, cp, _ := s.server(i)
		urls = append(urls, "nats://"+net.JoinHostPort(host, fmt.Sprint(cp)))
	}
	return strings.Join(urls, ",")
}

// clusterConfigCmd is `engine cluster config`.
func clusterConfigCmd(args []string, stdout, stderr io.Writer) error {
	var s clusterSpec
	fs := newFlagSet("cluster config", stderr)
	fs.IntVar(&s.servers, "servers", 3, "how many servers")
	hosts := fs.String("host", "127.0.0.1", "the servers' host (all on one), or one per server, comma separated")
	fs.StringVar(&s.listenHost, "listen-host", "", "the address servers listen on (default: each server's --host; 0.0.0.0 for every interface)")
	fs.IntVar(&s.clientPort, "client-port", 4222, "the first server's client port")
	fs.IntVar(&s.routePort, "route-port", 6222, "the first server's route port")
	fs.StringVar(&s.name, "name", "paddock", "the cluster's name; server i is <name>-<i>")
	fs.StringVar(&s.storeDir, "store-dir", "/var/lib/nats/jetstream", "JetStream's directory; each server uses <store-dir>/<name>-<i>")
	out := fs.String("out", "", "the directory to write the configs to (made if missing)")
	authDir := fs.String("auth-dir", auth.DirIn(auth.DefaultStateDir()), "the auth store whose identities the servers accept")
	fs.BoolVar(&s.tls, "tls", false, "TLS on the client and route listeners, from a CA and certificates made in --out (default: on when a server listens beyond loopback)")
	fs.BoolVar(&s.insecure, "insecure", false, "let servers listen beyond loopback without TLS: routes keep their authorization, but every client's and route's traffic crosses the network in clear text")
	fs.StringVar(&s.tlsDir, "tls-dir", "", "where the servers find the certificates (default: --out, made absolute)")
	jsonOut := fs.Bool("json", false, "print {\"out\", \"files\", \"urls\"} (the notes on stderr stay)")
	maxStore := fs.String("max-store", "", "each server's JetStream store, e.g. 100g; the engine splits it among events, snapshots and projection (default: nats-server's, 75% of the free disk, which the engine cannot see: it then reserves nothing unless given --events-max-bytes and the rest)")
	pos, rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if *maxStore != "" {
		if s.maxStore, err = bytesize.Parse(*maxStore); err != nil {
			return err
		}
		if s.maxStore == 0 {
			return usageErr("--max-store 0: give a size, or leave the flag out for nats-server's default")
		}
	}
	if len(pos) > 0 || rest != nil {
		return usageErr("cluster config takes no arguments\n%s", clusterUsage)
	}
	s.hosts = strings.Split(*hosts, ",")
	fs.Visit(func(f *flag.Flag) { s.tlsSet = s.tlsSet || f.Name == "tls" })
	if !s.tlsSet && !s.insecure {
		s.tls = s.beyondLoopback() != ""
	}
	if err := s.validate(); err != nil {
		return err
	}
	if *out == "" {
		return usageErr("--out DIR is required: where to write the servers' configs")
	}
	if s.tlsDir == "" {
		if s.tlsDir, err = filepath.Abs(*out); err != nil {
			return errcode.Wrap(errcode.InvalidRequest, err, "--out "+*out)
		}
	}
	if !auth.Open(*authDir).Exists() {
		return usageErr("no identities in the auth store %s: add the engine's, an admin's and each node's first (engine auth add engine engine --auth-dir %s)", *authDir, *authDir)
	}
	accounts, err := serverAccounts(*authDir, s.maxStore*int64(s.servers))
	if err != nil {
		return err
	}
	// Every file is made, and every config rendered, before anything is
	// written.
	files, err := s.material(*out, time.Now())
	if err != nil {
		return err
	}
	var names []string
	for _, c := range s.confs() {
		var b bytes.Buffer
		if err := c.write(&b, accounts); err != nil {
			return err
		}
		name := c.ServerName + ".conf"
		files[name] = b.Bytes()
		names = append(names, name)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return errcode.Wrap(errcode.InvalidRequest, err, "--out "+*out+": cannot make the directory")
	}
	// The configs hold the route secret, and the other files keys: each
	// is readable by its owner only (the server's user).
	written := slices.Sorted(maps.Keys(files))
	for _, name := range written {
		if err := writeSecret(filepath.Join(*out, name), files[name]); err != nil {
			return err
		}
	}
	fmt.Fprintf(stderr, "wrote %s in %s; start each with: engine nats-server -c %s\n", strings.Join(written, ", "), *out, filepath.Join(*out, names[0]))
	if s.tls {
		fmt.Fprintf(stderr, "TLS on: server %[1]s-i needs %[1]s-i.conf, %[1]s-i.pem, %[1]s-i-key.pem and ca.pem in %[2]s (ca-key.pem stays here); clients need --tls-ca %[3]s\n", s.name, s.tlsDir, filepath.Join(s.tlsDir, caCertFile))
	}
	if *jsonOut {
		return printJSON(stdout, clusterConfigResult{Out: *out, Files: written, URLs: strings.Split(s.clientURLs(), ",")})
	}
	_, err = fmt.Fprintln(stdout, s.clientURLs())
	return err
}

// clusterWaitCmd is `engine cluster wait`.
func clusterWaitCmd(ctx context.Context, base globals, args []string, stdout, stderr io.Writer) error {
	var g globals
	fs := newFlagSet("cluster wait", stderr)
	g.register(fs, base)
	replicas := fs.Int("replicas", 0, "wait until each Paddock stream has this many replicas, a leader and current followers (0: do not wait for streams)")
	nodes := fs.Int("nodes", 0, "wait until this many nodes answer")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	jsonOut := fs.Bool("json", false, "print {\"status\": \"ready\", \"summary\": ...}")
	pos, rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 || rest != nil {
		return usageErr("cluster wait takes no arguments")
	}
	if *replicas < 0 || *replicas > 5 || *nodes < 0 || *timeout <= 0 {
		return usageErr("--replicas takes 0 to 5, --nodes no negative number, --timeout a positive duration")
	}
	var urls []string
	for _, u := range strings.Split(g.server, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 {
		return usageErr("--server names no server")
	}
	w := &clusterWaiter{g: g, conns: map[string]*nats.Conn{}}
	defer w.close()
	wctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var why error // what the last check that ran whole found missing
	for {
		summary, err := w.ready(wctx, urls, *replicas, *nodes)
		if err == nil {
			if *jsonOut {
				return printJSON(stdout, statusSummary{Status: "ready", Summary: summary})
			}
			_, err = fmt.Fprintf(stdout, "ready: %s\n", summary)
			return err
		}
		if errcode.Of(err) == errcode.PermissionDenied {
			return err
		}
		if wctx.Err() == nil || why == nil {
			why = err // not a check the deadline cut short, unless it is the only one
		}
		t := time.NewTimer(250 * time.Millisecond)
		select {
		case <-wctx.Done():
			t.Stop()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errcode.New(errcode.Unavailable, "not ready within %s: %v", *timeout, why)
		case <-t.C:
		}
	}
}

// clusterWaiter keeps one connection to each server between checks, and
// one subscription to the nodes' heartbeats: a subscription made afresh
// for each check could miss the heartbeats of a node on another server
// until the cluster has spread its interest there.
type clusterWaiter struct {
	g     globals
	conns map[string]*nats.Conn
	hbSub *nats.Subscription
	hb    chan *nats.Msg
	heard map[string]time.Time // node id → when its last "up" heartbeat came
}

func (w *clusterWaiter) close() {
	if w.hbSub != nil {
		_ = w.hbSub.Unsubscribe()
	}
	for _, nc := range w.conns {
		nc.Close()
	}
}

// heardWithin is how recent a node's last heartbeat must be for cluster
// wait to count it up: a couple of its 2s heartbeats.
const heardWithin = 5 * time.Second

// nodesUp asks the nodes to heartbeat and returns those heard from, up,
// within heardWithin; it returns as soon as want are, or after a second.
func (w *clusterWaiter) nodesUp(ctx context.Context, nc *nats.Conn, want int) ([]string, error) {
	subj := commands.Subjects{}
	if w.hbSub == nil || !w.hbSub.IsValid() {
		w.hb = make(chan *nats.Msg, 1024)
		sub, err := nc.ChanSubscribe(subj.HeartbeatAll(), w.hb)
		if err != nil {
			return nil, errcode.Wrap(errcode.Unavailable, err, "subscribe heartbeats")
		}
		w.hbSub, w.heard = sub, map[string]time.Time{}
	}
	if err := nc.Publish(subj.Announce(), nil); err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "announce")
	}
	up := func() []string {
		var ids []string
		for id, at := range w.heard {
			if time.Since(at) < heardWithin {
				ids = append(ids, id)
			}
		}
		sort.Strings(ids)
		return ids
	}
	deadline := time.NewTimer(time.Second)
	defer deadline.Stop()
	for {
		if ids := up(); len(ids) >= want {
			return ids, nil
		}
		select {
		case m := <-w.hb:
			var info nodes.Info
			if json.Unmarshal(m.Data, &info) == nil && m.Subject == subj.Heartbeat(info.Node) {
				if info.Status == "up" {
					w.heard[info.Node] = time.Now()
				} else {
					delete(w.heard, info.Node)
				}
			}
		case <-deadline.C:
			return up(), nil
		case <-ctx.Done():
			return up(), nil
		}
	}
}

// conn returns a connection to the one server at url.
func (w *clusterWaiter) conn(url string) (*nats.Conn, error) {
	if nc := w.conns[url]; nc != nil && nc.IsConnected() {
		return nc, nil
	} else if nc != nil {
		nc.Close()
		delete(w.conns, url)
	}
	nc, who, err := client.Connect(client.ConnectOptions{URL: url, Creds: w.g.creds, TLSCA: w.g.tlsCA, Name: "paddock-cli",
		Extra: []nats.Option{nats.DontRandomize(), nats.NoReconnect(), nats.Timeout(2 * time.Second)}})
	if err != nil {
		return nil, err
	}
	if who != nil && (who.Role == auth.RoleClient || who.Role == auth.RoleAuditor) {
		nc.Close()
		return nil, errcode.New(errcode.PermissionDenied, "%s is a %s: cluster wait reads the streams, with the engine's or an admin's credentials", who.Name, who.Role)
	}
	w.conns[url] = nc
	return nc, nil
}

// ready returns a summary of the deployment when it is as asked, else why
// not.
func (w *clusterWaiter) ready(ctx context.Context, urls []string, replicas, nodes int) (string, error) {
	var names []string
	var first *nats.Conn
	for _, url := range urls {
		nc, err := w.conn(url)
		if err != nil {
			return "", err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			return "", err
		}
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = js.AccountInfo(actx)
		cancel()
		if err != nil {
			return "", fmt.Errorf("%s (%s): JetStream does not answer: %w", url, nc.ConnectedServerName(), err)
		}
		names = append(names, nc.ConnectedServerName())
		if first == nil {
			first = nc
		}
	}
	summary := fmt.Sprintf("%d servers answer with JetStream (%s)", len(names), strings.Join(names, ", "))
	if replicas > 0 {
		js, err := jetstream.New(first)
		if err != nil {
			return "", err
		}
		streams := paddockStreams()
		for _, name := range streams {
			st, err := streamInfo(ctx, js, name)
			if err != nil {
				return "", err
			}
			if err := st.healthy(replicas); err != nil {
				return "", err
			}
		}
		summary += fmt.Sprintf("; %d streams at %d replicas, each with a leader and current followers", len(streams), replicas)
	}
	if nodes > 0 {
		up, err := w.nodesUp(ctx, first, nodes)
		if err != nil {
			return "", err
		}
		if len(up) < nodes {
			return "", fmt.Errorf("%d nodes up (%s), want %d", len(up), strings.Join(up, ", "), nodes)
		}
		summary += fmt.Sprintf("; nodes up: %d (%s)", len(up), strings.Join(up, ", "))
	}
	return summary, nil
}

// healthy says why the stream is not at n replicas with a leader and
// every follower current, or nil when it is.
func (s streamStatus) healthy(n int) error {
	current := 0
	for _, f := range s.Followers {
		if f.Current && !f.Offline {
			current++
		}
	}
	switch {
	case s.Missing:
		return fmt.Errorf("stream %s does not exist yet", s.Name)
	case s.Replicas != n:
		return fmt.Errorf("stream %s has %d replicas, want %d", s.Name, s.Replicas, n)
	case n > 1 && s.Leader == "":
		return fmt.Errorf("stream %s has no leader", s.Name)
	case current != n-1:
		return fmt.Errorf("stream %s: %d of %d followers current", s.Name, current, n-1)
	}
	return nil
}

// serversOf returns the servers that hold a replica of the streams, by
// name, with the streams each leads; a server that a stream's leader
// reports offline is marked so.
func serversOf(streams []streamStatus) []serverStatus {
	byName := map[string]*serverStatus{}
	get := func(name string) *serverStatus {
		if byName[name] == nil {
			byName[name] = &serverStatus{Name: name}
		}
		return byName[name]
	}
	for _, s := range streams {
		if s.Leader != "" {
			l := get(s.Leader)
			l.Leads = append(l.Leads, s.Name)
		}
		for _, f := range s.Followers {
			srv := get(f.Name)
			srv.Offline = srv.Offline || f.Offline
		}
	}
	out := make([]serverStatus, 0, len(byName))
	for _, s := range byName {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// serverStatus is one server of the cluster as `engine status` shows it.
type serverStatus struct {
	Name string `json:"name"`
	// Leads are the streams whose leader it is.
	Leads []string `json:"leads,omitempty"`
	// Offline is true when a stream's leader reports it offline.
	Offline bool `json:"offline,omitempty"`
}
