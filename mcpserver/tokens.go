package mcpserver

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/paddock-dev/paddock/errcode"
)

// TokensFile is the file engine mcp --http --tokens reads: one entry per
// bearer token, naming the Paddock identity its caller acts as. It holds
// the tokens' SHA-256 digests, never the tokens.
type TokensFile struct {
	Tokens []TokenEntry `json:"tokens"`
}

// TokenEntry maps one bearer token to an identity.
type TokenEntry struct {
	// SHA256 is the hex SHA-256 of the token (sha256sum of its bytes).
	SHA256 string `json:"sha256"`
	// Creds is the identity's credentials file; a relative path is
	// relative to the tokens file.
	Creds string `json:"creds"`
	// EventsCreds is DialConfig.EventsCreds for this identity (optional).
	EventsCreds string `json:"events_creds,omitempty"`
	// Tenant is DialConfig.Tenant (optional; credentials of a tenant name
	// it themselves).
	Tenant string `json:"tenant,omitempty"`
}

// MinTokenBytes is the shortest token a caller may present: 128 bits as
// hex. Issue tokens with `openssl rand -hex 32`.
const MinTokenBytes = 32

// LoadTokens reads and checks a tokens file: every digest 64 hex digits
// and unique, every entry with credentials. Errors are invalid_request
// and name the entry.
func LoadTokens(path string) (TokensFile, error) {
	var f TokensFile
	b, err := os.ReadFile(path)
	if err != nil {
		return f, errcode.Wrap(errcode.InvalidRequest, err, "read the tokens file "+path)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return f, errcode.New(errcode.InvalidRequest, "%s is not a tokens file: %v", path, err)
	}
	if len(f.Tokens) == 0 {
		return f, errcode.New(errcode.InvalidRequest, "%s names no tokens", path)
	}
	seen := map[string]int{}
	dir := filepath.Dir(path)
	for i := range f.Tokens {
		e := &f.Tokens[i]
		d, err := hex.DecodeString(e.SHA256)
		if err != nil || len(d) != sha256.Size {
			return f, errcode.New(errcode.InvalidRequest, "%s: token %d: sha256 must be 64 hex digits", path, i+1)
		}
		if j, dup := seen[string(d)]; dup {
			return f, errcode.New(errcode.InvalidRequest, "%s: tokens %d and %d have the same sha256", path, j+1, i+1)
		}
		seen[string(d)] = i
		if e.Creds == "" {
			return f, errcode.New(errcode.InvalidRequest, "%s: token %d names no creds", path, i+1)
		}
		e.Creds = resolve(dir, e.Creds)
		if e.EventsCreds != "" {
			e.EventsCreds = resolve(dir, e.EventsCreds)
		}
	}
	return f, nil
}

func resolve(dir, p string) string {
	if filepath.IsAbs(p) || p == "none" {
		return p
	}
	return filepath.Join(dir, p)
}

// TokenDigest returns the hex SHA-256 of a token, as a tokens file holds it.
func TokenDigest(token string) string {
	d := sha256.Sum256([]byte(token))
	return hex.EncodeToString(d[:])
}

// tokenSet matches presented tokens against the digests of a tokens file.
type tokenSet struct {
	digests [][sha256.Size]byte
}

func newTokenSet(f TokensFile) (*tokenSet, error) {
	s := &tokenSet{digests: make([][sha256.Size]byte, len(f.Tokens))}
	for i, e := range f.Tokens {
		d, err := hex.DecodeString(e.SHA256)
		if err != nil || len(d) != sha256.Size {
			return nil, fmt.Errorf("token %d: bad sha256", i+1)
		}
		copy(s.digests[i][:], d)
	}
	return s, nil
}

// match returns the index of the entry whose digest is token's, or -1.
// It compares the presented token's digest with every entry's in
// constant time and always compares them all, so neither the time of one
// comparison nor the number made tells how close a guess was or which
// entry it matched.
func (s *tokenSet) match(token string) int {
	if len(token) < MinTokenBytes {
		return -1
	}
	d := sha256.Sum256([]byte(token))
	found := -1
	for i := range s.digests {
		found = subtle.ConstantTimeSelect(subtle.ConstantTimeCompare(d[:], s.digests[i][:]), i, found)
	}
	return found
}
