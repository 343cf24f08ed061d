package cluster

import (
	"fmt"
	"io"
	"strings"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/errcode"
)

// ServerConf is one nats-server's configuration as Paddock writes it: a
// client listener, JetStream on disk, optionally a place in a cluster,
// and Paddock's accounts and users from an auth store. `engine auth
// server-config` writes one; `engine cluster config` writes one per server.
type ServerConf struct {
	// Comment is the first line of the file (without "# ").
	Comment string
	// ServerName names the server ("": nats-server picks one); every
	// server of a JetStream cluster needs its own.
	ServerName string
	Host       string
	Port       int
	StoreDir   string
	// SyncAlways fsyncs every JetStream write before its ack
	// (sync_interval: always); false keeps nats-server's default.
	SyncAlways bool
	// MaxStore bounds the server's JetStream file store (max_file_store);
	// 0 keeps nats-server's default, 75% of the disk's free space.
	MaxStore int64
	// ClientAdvertise, when set, is the host:port the server tells
	// clients to reach it at (its --host: its certificate names it).
	ClientAdvertise string
	// TLS, when set, is the client listener's TLS (server side only:
	// clients authenticate with their credentials).
	TLS *TLSConf
	// Cluster, when set, is the server's route listener and its routes.
	Cluster *RouteConf
	// Leaf, when set, is the server's leaf node listener: where the leaf
	// servers of sites connect.
	Leaf *LeafListenConf
	// Remote, when set, makes the server a site's leaf server: it
	// connects to the core cluster's leaf listeners and keeps no
	// JetStream of its own (the streams live in the core).
	Remote *LeafRemoteConf
}

// TLSConf is a tls block: files of the server's certificate and key,
// and with Verify the CA whose certificates the other end must present.
type TLSConf struct {
	CertFile, KeyFile string
	CAFile            string
	Verify            bool
}

// tlsTimeout is the TLS handshake's bound, in seconds (nats-server's
// default, half a second, is short for a loaded host).
const tlsTimeout = 5

// write writes the block as field: {...}.
func (t TLSConf) write(b *strings.Builder, indent, field string) error {
	var parts []string
	for _, f := range []struct{ name, v string }{{"cert_file", t.CertFile}, {"key_file", t.KeyFile}, {"ca_file", t.CAFile}} {
		if f.v == "" {
			continue
		}
		s, err := confString(field+" "+f.name, f.v)
		if err != nil {
			return err
		}
		parts = append(parts, fmt.Sprintf("%s  %s: %s\n", indent, f.name, s))
	}
	if t.Verify {
		parts = append(parts, indent+"  verify: true\n")
	}
	parts = append(parts, fmt.Sprintf("%s  timeout: %d\n", indent, tlsTimeout))
	fmt.Fprintf(b, "%s%s: {\n%s%s}\n", indent, field, strings.Join(parts, ""), indent)
	return nil
}

// RouteConf is the cluster block of a ServerConf.
type RouteConf struct {
	Name string
	Host string
	Port int
	// Routes are nats-route://[user:password@]host:port URLs of every
	// server of the cluster (a server ignores the route to itself).
	Routes []string
	// User and Password, when set, are the route authorization: a server
	// accepts a route only from a server that presents them.
	User, Password string
	// TLS, when set, is the routes' mutual TLS.
	TLS *TLSConf
	// Advertise, when set, is the host:port the server tells the others
	// to reach its routes at (the one their routes name; by default it
	// would tell its interfaces' addresses, which its certificate may
	// not name).
	Advertise string
}

// ServerAccounts returns the accounts block for the identities of the
// auth store in dir (auth.ServerConfigStore, the PADDOCK account's store
// bounded to accountStore bytes, 0: unbounded): what every server of a
// Paddock deployment must know, identically.
func ServerAccounts(dir string, accountStore int64) ([]byte, error) {
	ids, err := auth.Open(dir).Identities()
	if err != nil {
		return nil, err
	}
	return auth.ServerConfigStore(ids, accountStore)
}

// Write writes the config followed by accounts (from ServerAccounts). A
// name or path the config syntax cannot carry as a plain quoted string
// is invalid_request, and nothing is written.
func (c ServerConf) Write(w io.Writer, accounts []byte) error {
	var b strings.Builder
	str := func(field, v string) (string, error) { return confString(field, v) }
	fmt.Fprintf(&b, "# %s\n", c.Comment)
	if c.ServerName != "" {
		s, err := str("server name", c.ServerName)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "server_name: %s\n", s)
	}
	host, err := str("host", c.Host)
	if err != nil {
		return err
	}
	store := ""
	if c.Remote == nil {
		if store, err = str("store dir", c.StoreDir); err != nil {
			return err
		}
	}
	fmt.Fprintf(&b, "host: %s\nport: %d\n", host, c.Port)
	if c.ClientAdvertise != "" {
		adv, err := str("client advertise", c.ClientAdvertise)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "client_advertise: %s\n", adv)
	}
	if c.Remote == nil {
		js := "store_dir: " + store
		if c.MaxStore > 0 {
			js += fmt.Sprintf(", max_file_store: %d", c.MaxStore)
		}
		if c.SyncAlways {
			js += ", sync_interval: always"
		}

		fmt.Fprintf(&b, "jetstream: {%s}\n", js)
	}
	if c.TLS != nil {
		if err := c.TLS.write(&b, "", "tls"); err != nil {
			return err
		}
	}
	if cl := c.Cluster; cl != nil {
		name, err := str("cluster name", cl.Name)
		if err != nil {
			return err
		}
		listen, err := str("route listener", fmt.Sprintf("%s:%d", cl.Host, cl.Port))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "cluster: {\n  name: %s\n  listen: %s\n", name, listen)
		if cl.Advertise != "" {
			adv, err := str("route advertise", cl.Advertise)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "  advertise: %s\n", adv)
		}
		if cl.User != "" {
			user, err := str("route user", cl.User)
			if err != nil {
				return err
			}
			pass, err := str("route password", cl.Password)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "  authorization: {user: %s, password: %s, timeout: %d}\n", user, pass, tlsTimeout)
		}
		if cl.TLS != nil {
			if err := cl.TLS.write(&b, "  ", "tls"); err != nil {
				return err
			}
		}
		b.WriteString("  routes: [\n")
		for _, r := range cl.Routes {
			s, err := str("route", r)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "    %s\n", s)
		}
		b.WriteString("  ]\n}\n")
	}
	if c.Leaf != nil {
		if err := c.Leaf.write(&b); err != nil {
			return err
		}
	}
	if c.Remote != nil {
		if err := c.Remote.write(&b); err != nil {
			return err
		}
	}
	if c.Leaf != nil || c.Remote != nil {
		// The PADDOCK account's JetStream API crosses the leaf links in
		// both directions, in JetStream's one (default) domain: a site's
		// nodes use the core's JetStream as if connected there (by
		// default a link carries no $JS.API traffic).
		fmt.Fprintf(&b, "default_js_domain: {%q: \"\"}\n", auth.PaddockAccount)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	_, err = w.Write(accounts)
	return err
}

// confString quotes v for a nats-server config. The config parser's
// escapes differ from Go's and JSON's, so a value that would need one (a
// quote, a backslash, a control character) is refused instead.
func confString(field, v string) (string, error) {
	if v == "" {
		return "", errcode.New(errcode.InvalidRequest, "%s is empty", field)
	}
	for _, r := range v {
		if r == '"' || r == '\\' || r < 0x20 || r == 0x7f {
			return "", errcode.New(errcode.InvalidRequest, "%s %q: quotes, backslashes and control characters cannot go into a nats-server config", field, v)
		}
	}
	return `"` + v + `"`, nil
}
