package auth

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
)

// user is one nkey user of an account, as nats-server's config takes it.
type user struct {
	Nkey        string       `json:"nkey"`
	Permissions *Permissions `json:"permissions,omitempty"`
}

// export and import are an account's service exports and imports.
type export struct {
	Service  string   `json:"service"`
	Accounts []string `json:"accounts"`
}

type importRef struct {
	Account string `json:"account"`
	Subject string `json:"subject"`
}

type importSvc struct {
	Service importRef `json:"service"`
	// Share makes the server stamp each request with the sender's account
	// and user (Nats-Request-Info), which Caller reads.
	Share bool `json:"share"`
}

type account struct {
	// JetStream is "enabled", or jsLimits.
	JetStream any         `json:"jetstream,omitempty"`
	Users     []user      `json:"users"`
	Exports   []export    `json:"exports,omitempty"`
	Imports   []importSvc `json:"imports,omitempty"`
}

// jsLimits is an account's JetStream with a bound on what it stores.
type jsLimits struct {
	// MaxFile bounds the account's file storage, every replica counted
	// (nats-server's un-tiered limits count a stream of R replicas R
	// times).
	MaxFile int64 `json:"max_file"`
}

// ServerConfig returns the nats-server configuration fragment (an
// "accounts" block) that gives each identity its account and permissions:
// the PADDOCK account with JetStream for the engine, admins, nodes and
// auditors, and one account per tenant that has clients, importing its
// command subjects with share on. An embedded server loads it; an external
// server includes it (`include paddock-accounts.conf`). The output is
// deterministic for a given set of identities.
func ServerConfig(ids []Identity) ([]byte, error) {
	return ServerConfigStore(ids, 0)
}

// ServerConfigStore is ServerConfig with the PADDOCK account's JetStream
// file storage bounded to maxFile bytes, every replica counted (0: no
// bound). An engine reads the bound from its account and splits it among
// Paddock's streams (events, snapshots, projection), so that a deployment
// on an external cluster reserves space for its events as an embedded one
// does.
func ServerConfigStore(ids []Identity, maxFile int64) ([]byte, error) {
	if maxFile < 0 {
		return nil, fmt.Errorf("auth: negative JetStream store bound %d", maxFile)
	}
	var js any = "enabled"
	if maxFile > 0 {
		js = jsLimits{MaxFile: maxFile}
	}
	return serverConfig(ids, js)
}

// ServerConfigNoJetStream is ServerConfig with no JetStream in any
// account: the accounts of a leaf server whose PADDOCK account uses the
// core cluster's JetStream through its link (default_js_domain).
func ServerConfigNoJetStream(ids []Identity) ([]byte, error) {
	return serverConfig(ids, nil)
}

// serverConfig writes the accounts block, the PADDOCK account's
// JetStream being js (nil: none).
func serverConfig(ids []Identity, js any) ([]byte, error) {
	accounts := map[string]*account{PaddockAccount: {JetStream: js, Users: []user{}}}
	sorted := append([]Identity(nil), ids...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, id := range sorted {
		if err := id.Check(); err != nil {
			return nil, fmt.Errorf("identity %s: %w", id.Name, err)
		}
		name := id.Account()
		acc := accounts[name]
		if acc == nil {
			cmd := subjectPrefix + ".cmd." + id.Tenant + ".>"
			acc = &account{Users: []user{}, Imports: []importSvc{{Service: importRef{Account: PaddockAccount, Subject: cmd}, Share: true}}}
			accounts[name] = acc
			p := accounts[PaddockAccount]
			p.Exports = append(p.Exports, export{Service: cmd, Accounts: []string{name}})
		}
		acc.Users = append(acc.Users, user{Nkey: id.PublicKey, Permissions: PermissionsOf(id)})
	}
	var b bytes.Buffer
	b.WriteString("# Paddock's accounts and users, written by `engine auth`; edits are overwritten.\n")
	b.WriteString("# Include it in a nats-server config (docs/security.md).\n")
	b.WriteString("accounts: ")
	// The server's config parser knows no \u escapes: keep > and & as is.
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(accounts); err != nil {
		return nil, fmt.Errorf("auth: encode server config: %w", err)
	}
	return b.Bytes(), nil
}
