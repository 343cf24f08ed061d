package client

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/errcode"
)

// ConnectOptions say how to reach a Paddock deployment. Each empty field
// falls back to its environment variable, then to its default.
type ConnectOptions struct {
	// URL of the NATS server(s), comma separated (PADDOCK_URL, default
	// nats://127.0.0.1:4222).
	URL string
	// Creds is a credentials file (PADDOCK_CREDS; default: the admin
	// credentials `engine serve` wrote under its default state dir, when
	// that file exists). "none" connects without credentials.
	Creds string
	// TLSCA is a PEM file of the CA that signed the server's certificate
	// (PADDOCK_TLS_CA); a tls:// URL without it uses the system roots.
	TLSCA string
	// Name names the connection in the server's monitoring.
	Name string
	// Extra options go last (reconnect policy, handlers, ...).
	Extra []nats.Option
}

// Connect connects to the deployment with the credentials it finds and
// returns the connection and those credentials (nil when none). A server
// that wants credentials and got none, or refused them, is
// permission_denied; one that cannot be reached is unavailable.
func Connect(o ConnectOptions) (*nats.Conn, *auth.Creds, error) {
	o.URL = orEnv(o.URL, "PADDOCK_URL", "nats://127.0.0.1:4222")
	o.TLSCA = orEnv(o.TLSCA, "PADDOCK_TLS_CA", "")
	path := orEnv(o.Creds, "PADDOCK_CREDS", "")
	explicit := path != ""
	if !explicit {
		path = auth.DefaultCredsPath()
	}
	var creds *auth.Creds
	if path != "none" {
		c, err := auth.LoadCreds(path)
		switch {
		case err == nil:
			creds = c
		case errors.Is(err, auth.ErrNoCreds) && !explicit:
			// No default credentials: try without (a deployment without auth).
		default:
			return nil, nil, err
		}
	}
	opts := []nats.Option{nats.Name(o.Name), nats.Timeout(5 * time.Second)}
	if creds != nil {
		opts = append(opts, creds.Options()...)
	}
	if o.TLSCA != "" {
		opts = append(opts, nats.RootCAs(o.TLSCA))
	}
	opts = append(opts, o.Extra...)
	nc, err := nats.Connect(o.URL, opts...)
	if err != nil {
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
			if creds == nil {
				return nil, nil, errcode.Wrap(errcode.PermissionDenied, err, fmt.Sprintf("%s wants credentials: pass --creds FILE or set PADDOCK_CREDS (engine serve writes %s)", o.URL, auth.DefaultCredsPath()))
			}
			return nil, nil, errcode.Wrap(errcode.PermissionDenied, err, fmt.Sprintf("%s refused the credentials of %s (%s)", o.URL, creds.Name, creds.Role))
		}
		return nil, nil, errcode.Wrap(errcode.Unavailable, err, "cannot reach Paddock at "+o.URL)
	}
	return nc, creds, nil
}

func orEnv(v, env, def string) string {
	if v != "" {
		return v
	}
	if e := os.Getenv(env); e != "" {
		return e
	}
	return def
}
