package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
)

// Role is what an identity may do on the bus.
type Role string

// The roles. docs/security.md tables what each may publish and receive.
const (
	// RoleEngine is the control plane: everything in the PADDOCK account.
	RoleEngine Role = "engine"
	// RoleAdmin is an operator at the CLI: the engine's rights.
	RoleAdmin Role = "admin"
	// RoleNode is one node agent: its own node subjects, session command
	// subjects, appending events, the object store.
	RoleNode Role = "node"
	// RoleClient is one identity of one tenant: that tenant's command
	// subjects and its own inbox, nothing else.
	RoleClient Role = "client"
	// RoleAuditor reads events (of one tenant, or of all) through its own
	// consumer and publishes nothing else.
	RoleAuditor Role = "auditor"
)

// Valid reports whether r is a known role.
func (r Role) Valid() bool {
	switch r {
	case RoleEngine, RoleAdmin, RoleNode, RoleClient, RoleAuditor:
		return true
	}
	return false
}

// PaddockAccount is the account of the engine, the nodes and the auditors.
// Tenants' accounts are named for the tenant; tenant names are lowercase
// here, so no tenant can be named PADDOCK.
const PaddockAccount = "PADDOCK"

// Identity is one credential holder, as the store records it (without its
// seed).
type Identity struct {
	// Name is unique in the store and a subject token; a node's name is its
	// node id.
	Name string `json:"name"`
	Role Role   `json:"role"`
	// Tenant is the client's tenant, or the auditor's (empty: every tenant).
	Tenant string `json:"tenant,omitempty"`
	// PublicKey is the identity's nkey (a user key, "U...").
	PublicKey string    `json:"public_key"`
	Created   time.Time `json:"created"`
}

// Account is the NATS account the identity lives in.
func (id Identity) Account() string {
	if id.Role == RoleClient {
		return id.Tenant
	}
	return PaddockAccount
}

// InboxPrefix is the identity's private inbox prefix: its permissions let
// only it subscribe below it.
func (id Identity) InboxPrefix() string { return "_INBOX." + id.PublicKey }

// Consumer is the one events consumer name an auditor may use: consumer
// names are global to the stream, so a fixed name per auditor is what keeps
// one auditor from reading through another's consumer.
func (id Identity) Consumer() string { return "audit_" + id.Name }

// Check returns an invalid_request error unless the identity is complete
// and consistent.
func (id Identity) Check() error {
	if err := commands.CheckToken("name", id.Name); err != nil {
		return err
	}
	if !id.Role.Valid() {
		return errcode.New(errcode.InvalidRequest, "unknown role %q (engine, admin, node, client, auditor)", id.Role)
	}
	switch {
	case id.Role == RoleClient && id.Tenant == "":
		return errcode.New(errcode.InvalidRequest, "a client needs a tenant")
	case id.Role != RoleClient && id.Role != RoleAuditor && id.Tenant != "":
		return errcode.New(errcode.InvalidRequest, "a %s has no tenant", id.Role)
	}
	if id.Tenant != "" {
		if err := CheckTenant(id.Tenant); err != nil {
			return err
		}
	}
	if !nkeys.IsValidPublicUserKey(id.PublicKey) {
		return errcode.New(errcode.InvalidRequest, "%q is not a user nkey", id.PublicKey)
	}
	return nil
}

// CheckTenant refuses a tenant name that cannot name a NATS account here:
// it must be a subject token of lowercase letters, digits, '-' and '_'
// (so that it can never be PADDOCK or $SYS, nor widen a permission).
func CheckTenant(t string) error {
	if err := commands.CheckToken("tenant", t); err != nil {
		return err
	}
	for _, r := range t {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return errcode.New(errcode.InvalidRequest, "tenant %q: only a-z, 0-9, '-' and '_' may name a tenant with auth on", t)
		}
	}
	return nil
}

// CredsFormat is the format version of a credentials file.
const CredsFormat = 1

// Creds is a credentials file: an identity and its nkey seed. It is JSON
// so that any language's client can read it; keep it 0600.
type Creds struct {
	Format int `json:"paddock_creds"`
	Identity
	// Seed is the nkey seed ("SU..."): the secret.
	Seed string `json:"seed"`
	// Inbox is the identity's inbox prefix (Identity.InboxPrefix).
	Inbox string `json:"inbox_prefix"`
}

// ErrNoCreds is returned by LoadCreds for a missing file.
var ErrNoCreds = errors.New("auth: no credentials file")

// LoadCreds reads and checks a credentials file. A missing file is
// ErrNoCreds; a malformed one, or a seed that is not the identity's key,
// an invalid_request error.
func LoadCreds(path string) (*Creds, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNoCreds, path)
	}
	if err != nil {
		return nil, fmt.Errorf("auth: read credentials: %w", err)
	}
	var c Creds
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, errcode.Wrap(errcode.InvalidRequest, err, fmt.Sprintf("%s is not a Paddock credentials file", path))
	}
	if c.Format != CredsFormat {
		return nil, errcode.New(errcode.InvalidRequest, "%s: credentials format %d, want %d", path, c.Format, CredsFormat)
	}
	if err := c.Identity.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	kp, err := c.KeyPair()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	kp.Wipe()
	return &c, nil
}

// KeyPair returns the identity's key pair from its seed; an invalid_request
// error if the seed is malformed or not the identity's key.
func (c *Creds) KeyPair() (nkeys.KeyPair, error) {
	kp, err := nkeys.FromSeed([]byte(c.Seed))
	if err != nil {
		return nil, errcode.New(errcode.InvalidRequest, "credentials hold no valid nkey seed")
	}
	pub, err := kp.PublicKey()
	if err != nil || pub != c.PublicKey {
		return nil, errcode.New(errcode.InvalidRequest, "the credentials' seed is not the key of %s", c.Name)
	}
	return kp, nil
}

// Options returns the nats.go options that authenticate as the identity
// (nkey challenge) and keep its replies in its private inbox.
func (c *Creds) Options() []nats.Option {
	seed := []byte(c.Seed)
	sign := func(nonce []byte) ([]byte, error) {
		kp, err := nkeys.FromSeed(seed)
		if err != nil {
			return nil, err
		}
		defer kp.Wipe()
		return kp.Sign(nonce)
	}
	inbox := c.Inbox
	if inbox == "" {
		inbox = c.InboxPrefix()
	}
	return []nats.Option{nats.Nkey(c.PublicKey, sign), nats.CustomInboxPrefix(inbox)}
}
