package auth

import (
	"encoding/json"
	"net/textproto"
	"strings"

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

// CallerOf reads the server's stamp on m. A message that JetStream
// delivered rather than a sender published (see Delivered), and a stamp
// that does not decode, are permission_denied errors: nothing but the
// server writes a stamp, and nothing acts on a delivery.
func CallerOf(m *nats.Msg) (Caller, error) {
	if m == nil {
		return Caller{}, nil
	}
	if err := Delivered(m); err != nil {
		return Caller{}, err
	}
	if m.Header == nil {
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

// Delivered returns a permission_denied error when m is a message that
// JetStream sent rather than one a sender published on its subject, so
// that a consumer whose deliver subject (or a pull request whose reply
// subject) names a command subject never passes for a command. JetStream
// marks everything it sends: a pushed or pulled stream message has a
// reply subject under $JS.ACK (which no client may set: nats-server
// refuses a client's publish with such a reply), flow control one under
// $JS.FC, a heartbeat or a pull's end a status line, and a direct get or
// a republished message Nats-Stream and Nats-Subject headers. Delivered
// refuses all of these: a reply subject under "$JS.", a status, and any
// header starting "Nats-" but the server's own stamp (RequestInfoHeader).
// A JetStream API response carries none of them; it is refused by the
// receivers' strict decoding and, for requests, by RequireReply.
func Delivered(m *nats.Msg) error {
	if strings.HasPrefix(m.Reply, "$JS.") {
		return errcode.New(errcode.PermissionDenied, "a message JetStream delivered (reply %s) is not a command", clipSubject(m.Reply))
	}
	for k := range m.Header {
		switch k = textproto.CanonicalMIMEHeaderKey(k); {
		case k == RequestInfoHeader:
		case k == statusHeader || strings.HasPrefix(k, "Nats-"):
			return errcode.New(errcode.PermissionDenied, "a message with JetStream's %s header is not a command", k)
		}
	}
	return nil
}

// statusHeader is where nats.go puts a message's status line (a
// JetStream heartbeat, flow control, a pull's end).
const statusHeader = "Status"

// RequireReply returns a permission_denied error unless m is a command
// from a sender: not a JetStream delivery (Delivered) and a request, with
// a reply subject to answer on. A JetStream API response is no request.
func RequireReply(m *nats.Msg) error {
	if err := Delivered(m); err != nil {
		return err
	}
	if m.Reply == "" {
		return errcode.New(errcode.PermissionDenied, "a command on %s without a reply subject", clipSubject(m.Subject))
	}
	return nil
}

// Operator returns a permission_denied error unless the caller may send an
// operator's command (a node admin op, a placement): a sender in the
// PADDOCK account, where the server's permissions let only the engine and
// admins publish on those subjects. A stamp means the command crossed an
// import from a tenant's account, which no operator's command does.
func (c Caller) Operator() error {
	if c.Vouched() {
		return errcode.New(errcode.PermissionDenied, "account %s may not send an operator's command", c.Account)
	}
	return nil
}

func clipSubject(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
