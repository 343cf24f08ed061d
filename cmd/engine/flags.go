package main

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/nats-io/nats.go/jetstream"
	flag "github.com/spf13/pflag"

	"github.com/paddock-dev/paddock/auditfeed"
	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/paddock-dev/paddock/errcode"
)

// globals are the flags every CLI command takes.
type globals struct {
	server string
	tenant string
	// tenantSet is true when --tenant or PADDOCK_TENANT named the tenant
	// (a client's credentials name it otherwise).
	tenantSet bool
	creds     string
	tlsCA     string
	// who is the identity dial connected as (nil: no credentials).
	who *auth.Creds
}

// mayReadStream refuses, before anything is sent, what the identity's
// permissions would refuse on the wire (where a refused request gets no
// answer, only a timeout): a client has no JetStream at all.
func (g *globals) mayReadStream() error {
	if g.who != nil && g.who.Role == auth.RoleClient {
		return errcode.New(errcode.PermissionDenied, "%s is a client of tenant %s: clients drive sandboxes, auditors read events and projections (engine auth add auditor NAME --tenant %s)", g.who.Name, g.who.Tenant, g.who.Tenant)
	}
	return nil
}

// consumer is the events consumer name the identity must read through:
// an auditor's own (auth.Identity.Consumer), else "" (any).
func (g *globals) consumer() string {
	if g.who != nil && g.who.Role == auth.RoleAuditor {
		return g.who.Consumer()
	}
	return ""
}

// actor is who the CLI says it is in an operator's command (a node admin
// op): its identity's public key, as the events name a vouched sender,
// or "cli" without credentials.
func (g *globals) actor() string {
	if g.who != nil {
		return g.who.PublicKey
	}
	return "cli"
}

// provisioner is how the identity gets its events consumer: an auditor
// asks the engine (package auditfeed), which makes it; anyone else makes
// its own (nil).
func (g *globals) provisioner(js jetstream.JetStream) events.Provisioner {
	if g.consumer() == "" {
		return nil
	}
	return auditfeed.Provisioner(js.Conn(), "", g.who.Name, g.who.Tenant)
}

// defaultGlobals returns the global flags' values from the environment.
func defaultGlobals() globals {
	return globals{
		server:    envOr("PADDOCK_URL", "nats://127.0.0.1:4222"),
		tenant:    envOr("PADDOCK_TENANT", "default"),
		tenantSet: os.Getenv("PADDOCK_TENANT") != "",
		creds:     os.Getenv("PADDOCK_CREDS"),
		tlsCA:     os.Getenv("PADDOCK_TLS_CA"),
	}
}

// register adds the global flags to a command's flag set, defaulting to
// base (the environment and any flags given before the command).
func (g *globals) register(fs *flag.FlagSet, base globals) {
	*g = base
	g.flags(fs)
}

// flags adds the global flags to fs.
func (g *globals) flags(fs *flag.FlagSet) {
	fs.StringVar(&g.server, "server", g.server, "NATS URL of the Paddock deployment (env PADDOCK_URL)")
	fs.Func("tenant", "tenant (env PADDOCK_TENANT; default: the credentials' tenant, else \"default\")", func(v string) error {
		g.tenant, g.tenantSet = v, true
		return nil
	})
	fs.StringVar(&g.creds, "creds", g.creds, "credentials file (env PADDOCK_CREDS; default: the admin credentials engine serve wrote, when present; none: no credentials)")
	fs.StringVar(&g.tlsCA, "tls-ca", g.tlsCA, "CA certificate that signed the server's (env PADDOCK_TLS_CA)")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// parseInterleaved parses flags that may stand before, between or after
// positional arguments, docker style. Everything after a bare "--" is
// returned as rest, unparsed. In a declaration pass (declareFlags) it
// parses nothing and hands the flag set over.
func parseInterleaved(fs *flag.FlagSet, args []string) (pos, rest []string, err error) {
	if d, ok := fs.Output().(*declaration); ok {
		d.fs = fs
		return nil, nil, errDeclared
	}
	for i, a := range args {
		if a == "--" {
			rest = args[i+1:]
			if rest == nil {
				rest = []string{}
			}
			args = args[:i]
			break
		}
	}
	// Print the usage only when asked for (-h), so that an error is one
	// "error: ..." line.
	out := fs.Output()
	var usage bytes.Buffer
	fs.SetOutput(&usage)
	defer fs.SetOutput(out)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, _ = out.Write(usage.Bytes())
			return nil, nil, err
		}
		return nil, nil, errcode.New(errcode.InvalidRequest, "%s: %v", fs.Name(), err)
	}
	return fs.Args(), rest, nil
}

// kvFlag collects repeated K=V flags.
type kvFlag map[string]string

func (f kvFlag) String() string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func (f kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want K=V, got %q", s)
	}
	f[k] = v
	return nil
}

// portsFlag is a repeatable flag of TCP ports ("8080", or "8080,3000").
type portsFlag []int

func (p *portsFlag) String() string { return fmt.Sprint([]int(*p)) }

func (p *portsFlag) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%q is not a port (1 to 65535)", f)
		}
		*p = append(*p, n)
	}
	return nil
}

// egressFlags are --egress MODE and --allow DEST (repeatable, or
// comma-separated), of sandbox create and resume.
type egressFlags struct {
	mode  string
	allow listFlag
}

func (e *egressFlags) register(fs *flag.FlagSet, what string) {
	fs.StringVar(&e.mode, "egress", "", what+": egress policy none, allow (with --allow) or open (default none; allow is implied by --allow)")
	fs.Var(&e.allow, "allow", what+": a destination the sandbox may reach through the node's egress proxy: host[:port], *.domain[:port], IP[:port], CIDR (repeatable, or comma-separated)")
}

// policy is the policy the flags ask for, nil when they ask for none.
func (e *egressFlags) policy() (*commands.Egress, error) {
	mode := e.mode
	if mode == "" && len(e.allow) > 0 {
		mode = "allow"
	}
	if mode == "" {
		return nil, nil
	}
	eg := &commands.Egress{Mode: mode, Allow: e.allow}
	if err := eg.Validate(); err != nil {
		return nil, err
	}
	return eg, nil
}

// listFlag is a repeatable flag of strings ("a", or "a,b").
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			*l = append(*l, f)
		}
	}
	return nil
}
