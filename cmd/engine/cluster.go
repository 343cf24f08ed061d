package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/cluster"
	"github.com/paddock-dev/paddock/cmd/internal/bytesize"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
)

const clusterUsage = `usage:
  engine cluster config --out DIR [--servers 3] [--host 127.0.0.1] [--client-port 4222] [--route-port 6222]
                        [--name paddock] [--store-dir DIR] [--listen-host H] [--auth-dir DIR]
                        [--tls] [--insecure] [--tls-dir DIR] [--leaf-port P --site NAME=HOST:PORT ...]
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
      Sites: --leaf-port gives each server a leaf node listener (ports counting up as the others),
      guarded by a secret made in DIR/leaf.secret (and, with TLS, a certificate of the CA); each
      --site NAME=HOST:PORT writes DIR/<name>-site-NAME.conf, the config of the site's leaf server:
      it listens on HOST:PORT for the site's nodes (their --nats-url), keeps no JetStream, and links
      to every server's leaf listener. Printed on stderr: each site's node URL.
  engine cluster wait [--replicas N] [--nodes N] [--timeout 60s]
      waits until every server of --server (a comma-separated list) answers with JetStream;
      with --replicas, until each of Paddock's streams has N replicas, a leader and current
      followers; with --nodes, until N nodes answer. Exits 1 (unavailable) at the timeout.
  engine cluster balance [--json]
      spreads the leaders of the events' partitions over the servers (serve does it at start;
      run it after servers restart and leaders gathered): steps leaders down towards the peer
      leading the fewest, then prints each move and where every partition's leader is.
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
	case "balance":
		return clusterBalanceCmd(ctx, base, args[1:], stdout, stderr)
	}
	return usageErr("%s", clusterUsage)
}

// clusterSpec is what `engine cluster config` is told: its flags, made a
// cluster.Spec by spec.
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
	// leafPort is the first server's leaf node port (0: none); sites are
	// the --site values.
	leafPort int
	sites    []cluster.Site
}

// spec returns the flags as a cluster.Spec.
func (s clusterSpec) spec() cluster.Spec {
	return cluster.Spec{Servers: s.servers, Hosts: s.hosts, ListenHost: s.listenHost, ClientPort: s.clientPort, RoutePort: s.routePort,
		Name: s.name, StoreDir: s.storeDir, MaxStore: s.maxStore, TLS: s.tls, TLSSet: s.tlsSet, Insecure: s.insecure, TLSDir: s.tlsDir,
		LeafPort: s.leafPort, Sites: s.sites}
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
	fs.IntVar(&s.leafPort, "leaf-port", 0, "the first server's leaf node port, where the sites' leaf servers connect (0: none)")
	sites := fs.StringArray("site", nil, "NAME=HOST:PORT: write the config of site NAME's leaf server, listening on HOST:PORT for the site's nodes (repeat for each site; needs --leaf-port)")
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
	for _, v := range *sites {
		site, err := cluster.ParseSite(v)
		if err != nil {
			return err
		}
		s.sites = append(s.sites, site)
	}
	fs.Visit(func(f *flag.Flag) { s.tlsSet = s.tlsSet || f.Name == "tls" })
	if !s.tlsSet && !s.insecure {
		s.tls = s.spec().BeyondLoopback() != ""
	}
	spec := s.spec()
	if err := spec.Validate(); err != nil {
		return err
	}
	if *out == "" {
		return usageErr("--out DIR is required: where to write the servers' configs")
	}
	if spec.TLSDir == "" {
		if spec.TLSDir, err = filepath.Abs(*out); err != nil {
			return errcode.Wrap(errcode.InvalidRequest, err, "--out "+*out)
		}
	}
	if !auth.Open(*authDir).Exists() {
		return usageErr("no identities in the auth store %s: add the engine's, an admin's and each node's first (engine auth add engine engine --auth-dir %s)", *authDir, *authDir)
	}
	accounts, err := cluster.ServerAccounts(*authDir, spec.MaxStore*int64(spec.Servers))
	if err != nil {
		return err
	}
	// Every file is made, and every config rendered, before anything is
	// written.
	files, err := spec.Material(*out, time.Now())
	if err != nil {
		return err
	}
	var names []string
	for _, c := range spec.Confs() {
		var b bytes.Buffer
		if err := c.Write(&b, accounts); err != nil {
			return err
		}
		name := c.ServerName + ".conf"
		files[name] = b.Bytes()
		names = append(names, name)
	}
	siteAccounts, err := cluster.SiteAccounts(*authDir)
	if err != nil {
		return err
	}
	for _, c := range spec.SiteConfs() {
		var b bytes.Buffer
		if err := c.Write(&b, siteAccounts); err != nil {
			return err
		}
		files[c.ServerName+".conf"] = b.Bytes()
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return errcode.Wrap(errcode.InvalidRequest, err, "--out "+*out+": cannot make the directory")
	}
	// The configs hold the route secret, and the other files keys: each
	// is readable by its owner only (the server's user).
	written := slices.Sorted(maps.Keys(files))
	for _, name := range written {
		if err := cluster.WriteSecret(filepath.Join(*out, name), files[name]); err != nil {
			return err
		}
	}
	fmt.Fprintf(stderr, "wrote %s in %s; start each with: engine nats-server -c %s\n", strings.Join(written, ", "), *out, filepath.Join(*out, names[0]))
	if spec.TLS {
		fmt.Fprintf(stderr, "TLS on: server %[1]s-i needs %[1]s-i.conf, %[1]s-i.pem, %[1]s-i-key.pem and ca.pem in %[2]s (ca-key.pem stays here); clients need --tls-ca %[3]s\n", spec.Name, spec.TLSDir, filepath.Join(spec.TLSDir, cluster.CACertFile))
	}
	for _, site := range spec.Sites {
		fmt.Fprintf(stderr, "site %s: run its leaf server with engine nats-server -c %s; its nodes take --nats-url %s\n", site.Name, filepath.Join(*out, spec.SiteServerName(site.Name)+".conf"), spec.SiteURL(site))
	}
	if *jsonOut {
		return printJSON(stdout, clusterConfigResult{Out: *out, Files: written, URLs: strings.Split(spec.ClientURLs(), ",")})
	}
	_, err = fmt.Fprintln(stdout, spec.ClientURLs())
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
	w := cluster.NewWaiter(g.creds, g.tlsCA)
	defer w.Close()
	summary, err := w.Wait(ctx, urls, *replicas, *nodes, *timeout)
	if err != nil {
		return err
	}
	if *jsonOut {
		return printJSON(stdout, statusSummary{Status: "ready", Summary: summary})
	}
	_, err = fmt.Fprintf(stdout, "ready: %s\n", summary)
	return err
}

// clusterBalanceResult is what `engine cluster balance --json` prints.
type clusterBalanceResult struct {
	Moves   []events.LeaderMove `json:"moves"`
	Streams []string            `json:"streams"`
	Leaders []string            `json:"leaders"`
}

// clusterBalanceCmd is `engine cluster balance`.
func clusterBalanceCmd(ctx context.Context, base globals, args []string, stdout, stderr io.Writer) error {
	var g globals
	fs := newFlagSet("cluster balance", stderr)
	g.register(fs, base)
	jsonOut := fs.Bool("json", false, "print {\"moves\", \"streams\", \"leaders\"}")
	pos, rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 || rest != nil {
		return usageErr("cluster balance takes no arguments")
	}
	js, closeConn, err := dialJS(&g)
	if err != nil {
		return err
	}
	defer closeConn()
	if g.consumer() != "" {
		return errcode.New(errcode.PermissionDenied, "%s is an auditor: cluster balance is for the engine's and admins' credentials", g.who.Name)
	}
	log, err := events.OpenLog(ctx, js, "", "")
	if err != nil {
		return err
	}
	res := clusterBalanceResult{Streams: log.Streams()}
	res.Moves, err = log.SpreadLeaders(ctx)
	if err != nil {
		return err
	}
	if res.Leaders, err = log.Leaders(ctx); err != nil {
		return err
	}
	if *jsonOut {
		return printJSON(stdout, res)
	}
	for _, m := range res.Moves {
		if _, err := fmt.Fprintf(stdout, "moved %s: %s -> %s\n", m.Stream, m.From, m.To); err != nil {
			return err
		}
	}
	for k, name := range res.Streams {
		if _, err := fmt.Fprintf(stdout, "%s\tleader %s\n", name, res.Leaders[k]); err != nil {
			return err
		}
	}
	return nil
}
