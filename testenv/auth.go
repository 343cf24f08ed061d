package testenv

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/broker"
)

// StartAuthBroker starts an embedded server on a free loopback port that
// authenticates with the auth store's accounts (auth.Store.ConfigPath).
func StartAuthBroker(t testing.TB, st *auth.Store) *broker.Broker {
	t.Helper()
	return StartBrokerWith(t, broker.Config{StoreDir: t.TempDir(), Port: -1, AccountsFile: st.ConfigPath()})
}

// Conn is a connection as one identity, with the asynchronous errors the
// server sent it (permission violations).
type Conn struct {
	*nats.Conn
	errs chan error
}

// ConnectAs connects to url with the credentials file at path; the test
// fails if the server refuses them. The connection closes with the test.
func ConnectAs(t testing.TB, url, path string) *Conn {
	t.Helper()
	c, err := DialAs(url, path)
	if err != nil {
		t.Fatalf("connect as %s: %v", path, err)
	}
	t.Cleanup(c.Close)
	return c
}

// DialAs is ConnectAs returning the error ("" path: no credentials).
func DialAs(url, path string) (*Conn, error) {
	errs := make(chan error, 64)
	opts := []nats.Option{nats.Timeout(5 * time.Second), nats.MaxReconnects(0),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		})}
	if path != "" {
		creds, err := auth.LoadCreds(path)
		if err != nil {
			return nil, err
		}
		opts = append(opts, creds.Options()...)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, err
	}
	return &Conn{Conn: nc, errs: errs}, nil
}

// WantViolation waits (up to 5s) for the server to report a permissions
// violation on subject, and fails the test if none comes.
func (c *Conn) WantViolation(t testing.TB, subject string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case err := <-c.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
				return
			}
		case <-deadline:
			t.Fatalf("no permissions violation for %q within 5s", subject)
		}
	}
}
