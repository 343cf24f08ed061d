package cluster

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/errcode"
)

// Sites (docs/architecture.md, "Sites"). A site is a place whose nodes
// reach the core cluster through one NATS leaf node server of their own:
// the nodes connect to the site's leaf server, which holds one
// connection (per core server it reaches) to the core's leaf listeners.
// The leaf server has Paddock's accounts, so nodes authenticate there
// with their own credentials as they would at the core, and it binds
// its PADDOCK account to the core's over the link; it keeps no JetStream:
// the events, the projection and the snapshots live in the core.
//
// The link is guarded as the routes are: the core's leaf listeners accept
// only the user leafUser with the secret in leaf.secret, and with TLS
// they want a certificate of the cluster's CA, which `engine cluster
// config` makes for each site's leaf server.

// leafUser is the user name a site's leaf server authenticates as.
const leafUser = "leaf"

// leafSecretFile holds the leaf link password.
const leafSecretFile = "leaf.secret"

// Site is a site of nodes behind its own leaf server.
type Site struct {
	// Name names the site; its leaf server is <cluster>-site-<Name>.
	Name string
	// Host and Port are where the site's leaf server listens for the
	// site's nodes (and where they reach it: its certificate names Host).
	Host string
	Port int
}

// LeafListenConf is a core server's leafnodes block: the listener the
// sites' leaf servers connect to.
type LeafListenConf struct {
	Host string
	Port int
	// User and Password are the one identity a leaf server may connect
	// as; the link is bound to Paddock's account.
	User, Password string
	// TLS, when set, is the listener's TLS, with Verify: a leaf server
	// must present a certificate of the cluster's CA.
	TLS *TLSConf
}

// write writes the block.
func (l LeafListenConf) write(b *strings.Builder) error {
	listen, err := confString("leaf listener", net.JoinHostPort(l.Host, fmt.Sprint(l.Port)))
	if err != nil {
		return err
	}
	user, err := confString("leaf user", l.User)
	if err != nil {
		return err
	}
	pass, err := confString("leaf password", l.Password)
	if err != nil {
		return err
	}
	acc, err := confString("leaf account", auth.PaddockAccount)
	if err != nil {
		return err
	}
	fmt.Fprintf(b, "leafnodes: {\n  listen: %s\n", listen)
	// A site's leaf server connects to the core servers its config
	// names, not to addresses the servers would gossip (their
	// interfaces', which a certificate may not name, which a site may
	// not reach).
	b.WriteString("  no_advertise: true\n")
	fmt.Fprintf(b, "  authorization: {users: [{user: %s, password: %s, account: %s}], timeout: %d}\n", user, pass, acc, tlsTimeout)
	if l.TLS != nil {
		if err := l.TLS.write(b, "  ", "tls"); err != nil {
			return err
		}
	}
	b.WriteString("}\n")
	return nil
}

// LeafRemoteConf is a site leaf server's leafnodes block: its link to the
// core.
type LeafRemoteConf struct {
	// URLs are nats-leaf://user:password@host:port URLs of every core
	// server's leaf listener (the leaf server connects to one, and moves
	// to another when it goes).
	URLs []string
	// Account is the local account bound to the core's over the link.
	Account string
	// TLS, when set, is the link's TLS: the leaf server's certificate,
	// and the CA the core's must be signed by.
	TLS *TLSConf
}

// write writes the block.
func (r LeafRemoteConf) write(b *strings.Builder) error {
	acc, err := confString("leaf account", r.Account)
	if err != nil {
		return err
	}
	b.WriteString("leafnodes: {\n  remotes: [\n    {\n      urls: [\n")
	for _, u := range r.URLs {
		s, err := confString("leaf remote", u)
		if err != nil {
			return err
		}
		fmt.Fprintf(b, "        %s\n", s)
	}
	fmt.Fprintf(b, "      ]\n      account: %s\n", acc)
	if r.TLS != nil {
		if err := r.TLS.write(b, "      ", "tls"); err != nil {
			return err
		}
	}
	b.WriteString("    }\n  ]\n}\n")
	return nil
}

// ParseSite parses a --site value, NAME=HOST:PORT.
func ParseSite(v string) (Site, error) {
	name, addr, ok := strings.Cut(v, "=")
	host, port, err := net.SplitHostPort(addr)
	var p int
	if err == nil {
		_, err = fmt.Sscanf(port, "%d", &p)
	}
	if !ok || err != nil || fmt.Sprint(p) != port {
		return Site{}, errcode.New(errcode.InvalidRequest, "--site %q: want NAME=HOST:PORT (where the site's leaf server listens for its nodes)", v)
	}
	return Site{Name: name, Host: host, Port: p}, nil
}

// validateSites checks the leaf listener and the sites; called by
// Validate.
func (s Spec) validateSites(span int) error {
	if s.LeafPort == 0 {
		if len(s.Sites) > 0 {
			return errcode.New(errcode.InvalidRequest, "--site needs --leaf-port: the port the core's servers take the sites' leaf servers on")
		}
		return nil
	}
	if s.LeafPort < 1 || s.LeafPort+span-1 > 65535 {
		return errcode.New(errcode.InvalidRequest, "--leaf-port %d: the ports %d..%d must lie in 1..65535", s.LeafPort, s.LeafPort, s.LeafPort+span-1)
	}
	for _, p := range []struct {
		flag string
		port int
	}{{"client", s.ClientPort}, {"route", s.RoutePort}} {
		if s.LeafPort < p.port+span && p.port < s.LeafPort+span {
			return errcode.New(errcode.InvalidRequest, "leaf ports %d..%d and %s ports %d..%d overlap", s.LeafPort, s.LeafPort+span-1, p.flag, p.port, p.port+span-1)
		}
	}
	seen := map[string]bool{}
	for _, site := range s.Sites {
		if !nameRE.MatchString(site.Name) {
			return errcode.New(errcode.InvalidRequest, "--site %q: a site's name is letters, digits, - and _ (at most 64)", site.Name)
		}
		if seen[site.Name] {
			return errcode.New(errcode.InvalidRequest, "--site %q is given twice", site.Name)
		}
		seen[site.Name] = true
		if !hostRE.MatchString(site.Host) {
			return errcode.New(errcode.InvalidRequest, "--site %s: %q is not a host name or address", site.Name, site.Host)
		}
		if site.Port < 1 || site.Port > 65535 {
			return errcode.New(errcode.InvalidRequest, "--site %s: port %d is not in 1..65535", site.Name, site.Port)
		}
		if !IsLoopback(site.Host) && !s.TLS && !s.Insecure {
			return errcode.New(errcode.InvalidRequest, "site %s's leaf server listens on %s, beyond loopback, and --tls=false: leave --tls on, or give --insecure to mean it", site.Name, site.Host)
		}
	}
	return nil
}

// leafListen returns server i's leaf listener, or nil without one.
func (s Spec) leafListen(i int) *LeafListenConf {
	if s.LeafPort == 0 {
		return nil
	}
	name, _, _, _ := s.Server(i)
	l := &LeafListenConf{Host: s.Listen(i), Port: s.leafPort(i), User: leafUser, Password: s.LeafSecret}
	if s.TLS {
		cert, key := serverCertFiles(name)
		l.TLS = &TLSConf{CertFile: filepath.Join(s.TLSDir, cert), KeyFile: filepath.Join(s.TLSDir, key), CAFile: filepath.Join(s.TLSDir, CACertFile), Verify: true}
	}
	return l
}

// leafPort is server i's leaf port.
func (s Spec) leafPort(i int) int {
	if len(s.Hosts) == 1 {
		return s.LeafPort + i
	}
	return s.LeafPort
}

// SiteServerName is the name of site's leaf server.
func (s Spec) SiteServerName(site string) string { return s.Name + "-site-" + site }

// SiteConfs returns each site's leaf server config: it listens for the
// site's nodes on the site's address (with TLS, the cluster's, as the
// core's client listeners), has Paddock's accounts, keeps no JetStream,
// and links its PADDOCK account to every core server's leaf listener.
func (s Spec) SiteConfs() []ServerConf {
	var urls []string
	for i := range s.Servers {
		_, host, _, _ := s.Server(i)
		u := url.URL{Scheme: "nats-leaf", Host: net.JoinHostPort(host, fmt.Sprint(s.leafPort(i))), User: url.UserPassword(leafUser, s.LeafSecret)}
		urls = append(urls, u.String())
	}
	var out []ServerConf
	for _, site := range s.Sites {
		name := s.SiteServerName(site.Name)
		c := ServerConf{
			Comment:    fmt.Sprintf("nats-server config for Paddock: the leaf server of site %s, linked to cluster %s (engine cluster config).", site.Name, s.Name),
			ServerName: name, Host: site.Host, Port: site.Port,
			Remote: &LeafRemoteConf{URLs: urls, Account: auth.PaddockAccount},
		}
		if s.TLS {
			certName, keyName := serverCertFiles(name)
			cert, key := filepath.Join(s.TLSDir, certName), filepath.Join(s.TLSDir, keyName)
			c.TLS = &TLSConf{CertFile: cert, KeyFile: key}
			c.Remote.TLS = &TLSConf{CertFile: cert, KeyFile: key, CAFile: filepath.Join(s.TLSDir, CACertFile)}
		}
		out = append(out, c)
	}
	return out
}

// SiteURL is the client URL the nodes of site give as --nats-url.
func (s Spec) SiteURL(site Site) string {
	return "nats://" + net.JoinHostPort(site.Host, fmt.Sprint(site.Port))
}

// SiteAccounts returns the accounts block of a site's leaf server: the
// identities of the auth store in dir, with no JetStream in any account
// (the PADDOCK account uses the core's through the link).
func SiteAccounts(dir string) ([]byte, error) {
	ids, err := auth.Open(dir).Identities()
	if err != nil {
		return nil, err
	}
	return auth.ServerConfigNoJetStream(ids)
}
