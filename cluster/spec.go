package cluster

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/paddock-dev/paddock/errcode"
)

// Spec is a cluster of nats-server servers for Paddock: how many, where,
// on which ports, with which store, and its edges (TLS, route secret).
type Spec struct {
	// Servers is how many servers (1 to 32).
	Servers int
	// Hosts are the servers' hosts: one for all, or one per server.
	Hosts []string
	// ListenHost is the address servers listen on ("": each its host).
	ListenHost string
	// ClientPort and RoutePort are the first server's ports; servers on
	// one host take the ports after them.
	ClientPort int
	RoutePort  int
	// Name names the cluster; server i is <Name>-<i>.
	Name string
	// StoreDir is JetStream's directory; each server uses
	// <StoreDir>/<Name>-<i>.
	StoreDir string
	// MaxStore bounds each server's JetStream store (0: nats-server's
	// default); the PADDOCK account may then store servers × MaxStore,
	// every replica counted.
	MaxStore int64
	// TLS puts TLS on the client and route listeners; Insecure lets a
	// server listen beyond loopback without it (TLSSet: TLS was asked for
	// explicitly).
	TLS, TLSSet, Insecure bool
	// TLSDir is where the servers find the certificates.
	TLSDir string
	// RouteSecret is the route password ("": no route authorization,
	// a spec that only validates). Material sets it.
	RouteSecret string
	// LeafPort is the first server's leaf node port (0: no leaf
	// listener); servers on one host take the ports after it.
	LeafPort int
	// Sites are sites of nodes, each behind a leaf server of its own
	// (SiteConfs); they need LeafPort.
	Sites []Site
	// LeafSecret is the password of the sites' leaf links. Material sets
	// it when LeafPort is set.
	LeafSecret string
}

// IsLoopback says whether host names this machine's loopback only.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// BeyondLoopback returns the first address a server listens on that is
// not loopback ("": every server listens on loopback only).
func (s Spec) BeyondLoopback() string {
	for i := range s.Servers {
		if l := s.Listen(i); !IsLoopback(l) {
			return l
		}
	}
	return ""
}

// Listen returns the address server i listens on.
func (s Spec) Listen(i int) string {
	if s.ListenHost != "" {
		return s.ListenHost
	}
	_, host, _, _ := s.Server(i)
	return host
}

// hostRE is what a host may be: a name, an IPv4 or an IPv6 address.
var hostRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,253}$`)

// nameRE is what a cluster name may be: it names the servers and their
// store directories too.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// Validate checks the spec; each problem is invalid_request.
func (s Spec) Validate() error {
	if s.Servers < 1 || s.Servers > 32 {
		return errcode.New(errcode.InvalidRequest, "--servers %d: want 1 to 32 (3 for a cluster that survives the loss of one server)", s.Servers)
	}
	if !nameRE.MatchString(s.Name) {
		return errcode.New(errcode.InvalidRequest, "--name %q: want letters, digits, - and _ (at most 64)", s.Name)
	}
	if len(s.Hosts) != 1 && len(s.Hosts) != s.Servers {
		return errcode.New(errcode.InvalidRequest, "--host names %d hosts for %d servers: give one host, or one per server", len(s.Hosts), s.Servers)
	}
	for _, h := range s.Hosts {
		if !hostRE.MatchString(h) {
			return errcode.New(errcode.InvalidRequest, "--host %q is not a host name or address", h)
		}
	}
	if s.ListenHost != "" && !hostRE.MatchString(s.ListenHost) {
		return errcode.New(errcode.InvalidRequest, "--listen-host %q is not a host name or address", s.ListenHost)
	}
	if s.StoreDir == "" {
		return errcode.New(errcode.InvalidRequest, "--store-dir is empty")
	}
	span := 1 // ports each of the two ranges takes on one host
	if len(s.Hosts) == 1 {
		span = s.Servers
	}
	for _, p := range []struct {
		flag string
		port int
	}{{"--client-port", s.ClientPort}, {"--route-port", s.RoutePort}} {
		if p.port < 1 || p.port+span-1 > 65535 {
			return errcode.New(errcode.InvalidRequest, "%s %d: the ports %d..%d must lie in 1..65535", p.flag, p.port, p.port, p.port+span-1)
		}
	}
	if s.ClientPort < s.RoutePort+span && s.RoutePort < s.ClientPort+span {
		return errcode.New(errcode.InvalidRequest, "client ports %d..%d and route ports %d..%d overlap", s.ClientPort, s.ClientPort+span-1, s.RoutePort, s.RoutePort+span-1)
	}
	if err := s.validateSites(span); err != nil {
		return err
	}
	if s.Insecure && s.TLSSet && s.TLS {
		return errcode.New(errcode.InvalidRequest, "--tls and --insecure: give one (--insecure writes no TLS)")
	}
	if l := s.BeyondLoopback(); l != "" && !s.TLS && !s.Insecure {
		return errcode.New(errcode.InvalidRequest, "servers listen on %s, beyond loopback, and --tls=false: their clients' and routes' traffic (secrets included) would cross the network in clear text; leave --tls on, or give --insecure to mean it", l)
	}
	return nil
}

// Server returns server i's (0-based) name, host, and client and route
// ports.
func (s Spec) Server(i int) (name, host string, clientPort, routePort int) {
	name = fmt.Sprintf("%s-%d", s.Name, i+1)
	if len(s.Hosts) == 1 {
		return name, s.Hosts[0], s.ClientPort + i, s.RoutePort + i
	}
	return name, s.Hosts[i], s.ClientPort, s.RoutePort
}

// Confs returns each server's config.
func (s Spec) Confs() []ServerConf {
	var routes []string
	for i := range s.Servers {
		_, host, _, rp := s.Server(i)
		u := url.URL{Scheme: "nats-route", Host: net.JoinHostPort(host, fmt.Sprint(rp))}
		if s.RouteSecret != "" {
			u.User = url.UserPassword(routeUser, s.RouteSecret)
		}
		routes = append(routes, u.String())
	}
	var out []ServerConf
	for i := range s.Servers {
		name, host, cp, rp := s.Server(i)
		listen := s.Listen(i)
		c := ServerConf{
			Comment:    fmt.Sprintf("nats-server config for Paddock: server %s, %d of %d (engine cluster config).", name, i+1, s.Servers),
			ServerName: name, Host: listen, Port: cp,
			StoreDir: filepath.Join(s.StoreDir, name), SyncAlways: true, MaxStore: s.MaxStore,
		}
		if listen != host {
			c.ClientAdvertise = net.JoinHostPort(host, fmt.Sprint(cp))
		}
		var routeTLS *TLSConf
		if s.TLS {
			certName, keyName := serverCertFiles(name)
			cert, key := filepath.Join(s.TLSDir, certName), filepath.Join(s.TLSDir, keyName)
			c.TLS = &TLSConf{CertFile: cert, KeyFile: key}
			routeTLS = &TLSConf{CertFile: cert, KeyFile: key, CAFile: filepath.Join(s.TLSDir, CACertFile), Verify: true}
		}
		if s.Servers > 1 {
			c.Cluster = &RouteConf{Name: s.Name, Host: listen, Port: rp, Routes: routes, TLS: routeTLS}
			if listen != host {
				c.Cluster.Advertise = net.JoinHostPort(host, fmt.Sprint(rp))
			}
			if s.RouteSecret != "" {
				c.Cluster.User, c.Cluster.Password = routeUser, s.RouteSecret
			}
		}
		c.Leaf = s.leafListen(i)
		out = append(out, c)
	}
	return out
}

// Material returns the files the servers need beside their configs and
// are not in dir already (route.secret, the CA, the servers'
// certificates), and sets s.RouteSecret.
func (s *Spec) Material(dir string, now time.Time) (map[string][]byte, error) {
	files := map[string][]byte{}
	if s.Servers > 1 {
		secret, err := loadSecret(dir, routeSecretFile, files)
		if err != nil {
			return nil, err
		}
		s.RouteSecret = secret
	}
	if s.LeafPort > 0 {
		secret, err := loadSecret(dir, leafSecretFile, files)
		if err != nil {
			return nil, err
		}
		s.LeafSecret = secret
	}
	if !s.TLS {
		return files, nil
	}
	ca, err := loadOrMakeCA(dir, s.Name, now, files)
	if err != nil {
		return nil, err
	}
	for i := range s.Servers {
		name, host, _, _ := s.Server(i)
		if err := ca.serverCert(dir, name, certHosts(host, s.Listen(i)), now, files); err != nil {
			return nil, err
		}
	}
	for _, site := range s.Sites {
		if err := ca.serverCert(dir, s.SiteServerName(site.Name), certHosts(site.Host, site.Host), now, files); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// ClientURLs returns the servers' client URLs, comma separated.
func (s Spec) ClientURLs() string {
	var urls []string
	for i := range s.Servers {
		_, host, cp, _ := s.Server(i)
		urls = append(urls, "nats://"+net.JoinHostPort(host, fmt.Sprint(cp)))
	}
	return strings.Join(urls, ",")
}
