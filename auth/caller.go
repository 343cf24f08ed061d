package auth

import (
	"encoding/json"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/errcode"
)

// RequestInfoHeader is the header nats-server sets on a request that
// crosses a service import with share on: the sender's account and user,
// as the server authenticated them. A client cannot forge it through the
// import: the server replaces whatever the client put there.
const RequestInfoHeader = "Nats-Request-Info"

// Caller is who sent a command.
type Caller struct {
	// Account and User are the sender's account and user (its nkey) as
	// the server vouched for them; both empty when no stamp came with the
	// command (a sender in the PADDOCK account, or a deployment without
	// auth).
	Account string
	User    string
}

// Vouched reports whether the server stamped the command.
func (c Caller) Vouched() bool { return c.Account != "" }

// CallerOf reads the server's stamp on m. A stamp that does not decode is
// a permission_denied error: nothing but the server writes it.
func CallerOf(m *nats.Msg) (Caller, error) {
	if m == nil || m.Header == nil {
		return Caller{}, nil
	}
	raw := m.Header.Get(RequestInfoHeader)
	if raw == "" {
		return Caller{}, nil
	}
	var info struct {
		Account string `json:"acc"`
		User    string `json:"user"`
	}
	if err := json.Unmarshal([]byte(raw), &info); err != nil || info.Account == "" {
		return Caller{}, errcode.New(errcode.PermissionDenied, "the command's %s header does not name its sender", RequestInfoHeader)
	}
	return Caller{Account: info.Account, User: info.User}, nil
}

// Authorize checks that the caller may act for tenant and returns the actor
// to record: the vouched user for a stamped command, else actor as the
// (trusted, PADDOCK-account) sender wrote it. A command stamped with
// another account than the tenant's is permission_denied: the account is
// the tenant, whatever the subject or the body says.
func (c Caller) Authorize(tenant, actor string) (string, error) {
	if !c.Vouched() {
		return actor, nil
	}
	if c.Account != tenant {
		return "", errcode.New(errcode.PermissionDenied, "account %s may not act for tenant %s", c.Account, tenant)
	}
	if c.User == "" {
		return "", errcode.New(errcode.PermissionDenied, "the command's %s header names no user", RequestInfoHeader)
	}
	return c.User, nil
}
