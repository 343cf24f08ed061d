package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
)

// Store is an auth directory: identities.json, creds/<name>.creds (the
// Paddock credentials, JSON), creds/<name>.nk (the same identity's nkey
// seed, for NATS's own tools) and the generated accounts.conf. Changes take an exclusive lock on the directory,
// so concurrent `engine auth` calls do not lose each other's identities.
type Store struct {
	dir string
}

// Open returns the store in dir; it creates nothing until a change.
func Open(dir string) *Store { return &Store{dir: dir} }

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// ConfigPath is the generated nats-server accounts config.
func (s *Store) ConfigPath() string { return filepath.Join(s.dir, "accounts.conf") }

// CredsPath is where the named identity's credentials file is.
func (s *Store) CredsPath(name string) string {
	return filepath.Join(s.dir, "creds", name+".creds")
}

// NKeyPath is where the named identity's nkey seed file is: the seed on
// one line, what `nats --nkey FILE`, nats.go's NkeyOptionFromSeed and
// nats.py's nkeys_seed= read.
func (s *Store) NKeyPath(name string) string {
	return filepath.Join(s.dir, "creds", name+".nk")
}

// Creds returns the named identity's credentials, from its credentials
// file. An identity the store does not hold is not_found.
func (s *Store) Creds(name string) (*Creds, error) {
	if err := commands.CheckToken("name", name); err != nil {
		return nil, err
	}
	c, err := LoadCreds(s.CredsPath(name))
	if errors.Is(err, ErrNoCreds) {
		return nil, errcode.Wrap(errcode.NotFound, err, "no credentials of identity "+name+" in "+s.dir)
	}
	if err != nil {
		return nil, err
	}
	if c.Name != name {
		return nil, errcode.New(errcode.InvalidRequest, "%s holds the credentials of %s, not %s", s.CredsPath(name), c.Name, name)
	}
	return c, nil
}

func (s *Store) idsPath() string { return filepath.Join(s.dir, "identities.json") }

// Exists reports whether the store holds any identity.
func (s *Store) Exists() bool {
	_, err := os.Stat(s.idsPath())
	return err == nil
}

// Identities returns the identities, by name; none for a new store.
func (s *Store) Identities() ([]Identity, error) {
	b, err := os.ReadFile(s.idsPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("auth: read identities: %w", err)
	}
	var ids []Identity
	if err := json.Unmarshal(b, &ids); err != nil {
		return nil, fmt.Errorf("auth: %s: %w", s.idsPath(), err)
	}
	return ids, nil
}

// Add makes a new identity with a fresh nkey, writes its credentials file
// and its nkey seed file (both 0600) and rewrites the server config. A name already taken is
// already_exists; an invalid one invalid_request.
func (s *Store) Add(name string, role Role, tenant string) (*Creds, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("auth: new key: %w", err)
	}
	defer kp.Wipe()
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	id := Identity{Name: name, Role: role, Tenant: tenant, PublicKey: pub, Created: time.Now().UTC()}
	if err := id.Check(); err != nil {
		return nil, err
	}
	c := &Creds{Format: CredsFormat, Identity: id, Seed: string(seed), Inbox: id.InboxPrefix()}
	err = s.change(func(ids []Identity) ([]Identity, error) {
		for _, o := range ids {
			if o.Name == name {
				return nil, errcode.New(errcode.AlreadyExists, "identity %s exists (a %s)", name, o.Role)
			}
		}
		b, err := json.MarshalIndent(c, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Join(s.dir, "creds"), 0o700); err != nil {
			return nil, err
		}
		if err := writeFile(s.NKeyPath(name), append([]byte(c.Seed), '\n')); err != nil {
			return nil, err
		}
		if err := writeFile(s.CredsPath(name), append(b, '\n')); err != nil {
			return nil, err
		}
		return append(ids, id), nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Remove revokes an identity: it leaves the server config (a server that
// reloads it refuses the key) and its credentials and nkey seed files are
// deleted. An
// unknown name is not_found.
func (s *Store) Remove(name string) error {
	return s.change(func(ids []Identity) ([]Identity, error) {
		out := ids[:0]
		found := false
		for _, id := range ids {
			if id.Name == name {
				found = true
				continue
			}
			out = append(out, id)
		}
		if !found {
			return nil, errcode.New(errcode.NotFound, "no identity %s", name)
		}
		for _, p := range []string{s.CredsPath(name), s.NKeyPath(name)} {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
		}
		return out, nil
	})
}

// NodeKeys returns the public key the store issued to each identity that
// writes session events: each node, and each engine or admin (engine serve
// runs with either, and records the end of a lost node's sessions under
// its name). Names are unique in a store, so no name passes for another's.
func (s *Store) NodeKeys() (map[string]string, error) {
	ids, err := s.Identities()
	if err != nil {
		return nil, err
	}
	keys := map[string]string{}
	for _, id := range ids {
		if id.Role == RoleNode || id.Role == RoleEngine || id.Role == RoleAdmin {
			keys[id.Name] = id.PublicKey
		}
	}
	return keys, nil
}

// WriteConfig rewrites accounts.conf from the identities (Add and Remove
// do it; this is for a store whose config was lost or edited).
func (s *Store) WriteConfig() error {
	return s.change(func(ids []Identity) ([]Identity, error) { return ids, nil })
}

// change runs fn on the identities under the directory's lock and saves
// what it returns, then the server config.
func (s *Store) change(fn func([]Identity) ([]Identity, error)) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(s.dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("auth: lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("auth: lock: %w", err)
	}
	ids, err := s.Identities()
	if err != nil {
		return err
	}
	ids, err = fn(ids)
	if err != nil {
		return err
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].Name < ids[j].Name })
	if ids == nil {
		ids = []Identity{}
	}
	conf, err := ServerConfig(ids)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(ids, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFile(s.idsPath(), append(b, '\n')); err != nil {
		return err
	}
	return writeFile(s.ConfigPath(), conf)
}

// writeFile replaces path atomically with a 0600 file holding b.
func writeFile(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("auth: write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("auth: sync %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	return nil
}

// Bootstrap makes a new store ready for `engine serve`: an engine
// identity, an admin (the CLI's default credentials), a client of tenant
// "default", and a node identity for the in-process node. It does nothing
// to a store that has identities, except adding the node if node is new
// and writing the nkey seed file of an identity that has none.
func (s *Store) Bootstrap(node string) error {
	ids, err := s.Identities()
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, id := range ids {
		have[id.Name] = true
	}
	want := []Identity{{Name: "engine", Role: RoleEngine}, {Name: "admin", Role: RoleAdmin}, {Name: "client-default", Role: RoleClient, Tenant: "default"}}
	if len(ids) > 0 {
		want = nil // an existing store keeps what its operator made of it
	}
	if node != "" {
		want = append(want, Identity{Name: node, Role: RoleNode})
	}
	for _, w := range want {
		if have[w.Name] {
			continue
		}
		if _, err := s.Add(w.Name, w.Role, w.Tenant); err != nil {
			return err
		}
	}
	return s.writeMissingNKeys()
}

// writeMissingNKeys writes the nkey seed file of every identity whose
// credentials file is there and whose seed file is not (a store made
// before the seed files were), under the store's lock.
func (s *Store) writeMissingNKeys() error {
	ids, err := s.Identities()
	if err != nil {
		return err
	}
	missing := false
	for _, id := range ids {
		if _, err := os.Stat(s.NKeyPath(id.Name)); errors.Is(err, os.ErrNotExist) {
			missing = true
		}
	}
	if !missing {
		return nil // the common case: the store's files are left alone
	}
	return s.change(func(ids []Identity) ([]Identity, error) {
		for _, id := range ids {
			if _, err := os.Stat(s.NKeyPath(id.Name)); !errors.Is(err, os.ErrNotExist) {
				continue
			}
			c, err := LoadCreds(s.CredsPath(id.Name))
			if errors.Is(err, ErrNoCreds) {
				continue // handed out and deleted here: nothing to copy
			}
			if err != nil {
				return nil, err
			}
			if err := writeFile(s.NKeyPath(id.Name), append([]byte(c.Seed), '\n')); err != nil {
				return nil, err
			}
		}
		return ids, nil
	})
}

// DefaultStateDir is where `engine serve` keeps its state by default:
// $XDG_DATA_HOME/paddock, else ~/.local/share/paddock.
func DefaultStateDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "paddock")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "paddock")
	}
	return filepath.Join(os.TempDir(), "paddock")
}

// DirIn is the auth store's directory within a state dir.
func DirIn(stateDir string) string { return filepath.Join(stateDir, "auth") }

// DefaultCredsPath is the admin credentials file `engine serve` writes
// under the default state dir: what the CLI and the Go client use when no
// --creds or PADDOCK_CREDS names another.
func DefaultCredsPath() string {
	return Open(DirIn(DefaultStateDir())).CredsPath("admin")
}
