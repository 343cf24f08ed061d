package mcpserver

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/auditfeed"
	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
)

// DialConfig says how to connect one identity.
type DialConfig struct {
	// Connect reaches the deployment with the identity's credentials
	// (Connect.Creds; empty fields fall back to PADDOCK_* as in the CLI).
	Connect client.ConnectOptions
	// Tenant is the tenant for credentials that name none (an admin's);
	// credentials of a tenant are that tenant, and another Tenant is
	// permission_denied.
	Tenant string
	// EventsCreds is a credentials file to read events with: an auditor of
	// the identity's tenant (or of every tenant), or an admin. Empty: the
	// identity's own connection reads them when it may (an admin, or a
	// deployment without auth); a client's sandbox_events is then
	// permission_denied.
	EventsCreds string
}

// Dialed is an identity and the connections it runs on.
type Dialed struct {
	Identity Identity
	conns    []*nats.Conn
}

// Close closes the identity's connections.
func (d *Dialed) Close() {
	for _, nc := range d.conns {
		nc.Close()
	}
}

// Dial connects an identity: a client.Client on a connection of its own
// credentials (every command it sends is that identity's), and its event
// source. Errors are client.Connect's (permission_denied, unavailable)
// and permission_denied for a tenant the credentials do not allow.
func Dial(cfg DialConfig) (*Dialed, error) {
	if cfg.Connect.Name == "" {
		cfg.Connect.Name = "paddock-mcp"
	}
	nc, creds, err := client.Connect(cfg.Connect)
	if err != nil {
		return nil, err
	}
	d := &Dialed{conns: []*nats.Conn{nc}}
	tenant, actor := cfg.Tenant, "mcp"
	if creds != nil {
		actor = creds.Name
		if creds.Tenant != "" {
			if tenant != "" && tenant != creds.Tenant {
				d.Close()
				return nil, errcode.New(errcode.PermissionDenied, "the credentials of %s are for tenant %s, not %s", creds.Name, creds.Tenant, tenant)
			}
			tenant = creds.Tenant
		}
	}
	c, err := client.New(nc, client.Options{Tenant: tenant, Actor: actor})
	if err != nil {
		d.Close()
		return nil, err
	}
	d.Identity = Identity{Name: actor, Client: c}
	switch {
	case cfg.EventsCreds != "":
		ev, err := d.dialEvents(cfg, c.Tenant())
		if err != nil {
			d.Close()
			return nil, err
		}
		d.Identity.Events = ev
	case creds == nil || creds.Role == auth.RoleAdmin:
		js, err := jetstream.New(nc)
		if err != nil {
			d.Close()
			return nil, errcode.Wrap(errcode.Unavailable, err, "jetstream")
		}
		d.Identity.Events = events.NewLog(js, "", "")
	}
	return d, nil
}

// dialEvents connects the events reader of cfg for tenant.
func (d *Dialed) dialEvents(cfg DialConfig, tenant string) (EventSource, error) {
	o := cfg.Connect
	o.Creds, o.Name = cfg.EventsCreds, o.Name+"-events"
	nc, creds, err := client.Connect(o)
	if err != nil {
		return nil, err
	}
	d.conns = append(d.conns, nc)
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "jetstream")
	}
	log := events.NewLog(js, "", "")
	switch {
	case creds == nil || creds.Role == auth.RoleAdmin:
		return log, nil
	case creds.Role == auth.RoleAuditor && (creds.Tenant == "" || creds.Tenant == tenant):
		return &AuditorEvents{Log: log, Consumer: creds.Consumer(), Provision: auditfeed.Provisioner(nc, "", creds.Name, creds.Tenant)}, nil
	case creds.Role == auth.RoleAuditor:
		return nil, errcode.New(errcode.PermissionDenied, "--events-creds: %s audits tenant %s, not %s", creds.Name, creds.Tenant, tenant)
	default:
		return nil, errcode.New(errcode.PermissionDenied, "--events-creds: %s is a %s; events are read by an auditor (engine auth add auditor NAME --tenant %s) or an admin", creds.Name, creds.Role, tenant)
	}
}
