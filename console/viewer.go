package console

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/mcpserver"
)

// Viewer is who a console request acts for: a Paddock identity.
type Viewer struct {
	Name string
	Role auth.Role
	// Tenant is the one tenant the viewer may see ("" for every tenant).
	Tenant string
}

// All reports whether the viewer sees every tenant.
func (v Viewer) All() bool { return v.Tenant == "" }

// Admin reports whether the viewer may see the cluster's nodes, pools and
// storage: the engine's and admins' identities.
func (v Viewer) Admin() bool { return v.Role == auth.RoleAdmin || v.Role == auth.RoleEngine }

// May reports whether the viewer may see tenant's sessions.
func (v Viewer) May(tenant string) bool { return v.All() || v.Tenant == tenant }

// viewerOf returns the viewer a credentials' identity is. A node may not
// view (its credentials are a machine's); a client always has a tenant.
func viewerOf(id auth.Identity) (Viewer, error) {
	switch id.Role {
	case auth.RoleAdmin, auth.RoleEngine:
		return Viewer{Name: id.Name, Role: id.Role}, nil
	case auth.RoleClient, auth.RoleAuditor:
		return Viewer{Name: id.Name, Role: id.Role, Tenant: id.Tenant}, nil
	}
	return Viewer{}, errcode.New(errcode.InvalidRequest, "%s is a %s: the console is for admins, auditors and clients", id.Name, id.Role)
}

// Tokens maps console tokens to viewers by the tokens' SHA-256.
type Tokens struct {
	digests [][sha256.Size]byte
	viewers []Viewer
}

// LoadTokens reads a tokens file (mcpserver.LoadTokens: the format of
// engine mcp --tokens) and the credentials file of each entry. It fails
// with invalid_request when the file, or a credentials file, is malformed
// or names a node.
func LoadTokens(path string) (*Tokens, error) {
	tf, err := mcpserver.LoadTokens(path)
	if err != nil {
		return nil, err
	}
	t := &Tokens{}
	for i, e := range tf.Tokens {
		if e.EventsCreds != "" || e.Tenant != "" {
			return nil, errcode.New(errcode.InvalidRequest, "%s: token %d: the console takes only sha256 and creds (the identity names its tenant)", path, i+1)
		}
		c, err := auth.LoadCreds(e.Creds)
		if err != nil {
			return nil, fmt.Errorf("%s: token %d: %w", path, i+1, err)
		}
		v, err := viewerOf(c.Identity)
		if err != nil {
			return nil, fmt.Errorf("%s: token %d: %w", path, i+1, err)
		}
		var d [sha256.Size]byte
		if _, err := hex.Decode(d[:], []byte(e.SHA256)); err != nil {
			return nil, errcode.New(errcode.InvalidRequest, "%s: token %d: digest is not hex", path, i+1)
		}
		t.digests, t.viewers = append(t.digests, d), append(t.viewers, v)
	}
	return t, nil
}

// NewTokens maps the SHA-256 of each token in tokens to its viewer (for
// tests and embedding; LoadTokens reads a file).
func NewTokens(tokens map[string]Viewer) *Tokens {
	t := &Tokens{}
	for tok, v := range tokens {
		t.digests, t.viewers = append(t.digests, sha256.Sum256([]byte(tok))), append(t.viewers, v)
	}
	return t
}

// match returns the viewer of token; ok is false for a token no entry
// names, or one shorter than mcpserver.MinTokenBytes. Every digest is
// compared in constant time.
func (t *Tokens) match(token string) (v Viewer, ok bool) {
	if len(token) < mcpserver.MinTokenBytes {
		return Viewer{}, false
	}
	d := sha256.Sum256([]byte(token))
	found := -1
	for i := range t.digests {
		if subtle.ConstantTimeCompare(d[:], t.digests[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Viewer{}, false
	}
	return t.viewers[found], true
}
