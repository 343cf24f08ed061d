package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/cluster"
	"github.com/paddock-dev/paddock/cmd/internal/bytesize"
)

const authUsage = `usage:
  engine auth add ROLE NAME [--tenant T]   make an identity; prints its credentials file's PATH
                                           (creds/NAME.creds; its nkey seed is in creds/NAME.nk)
                                           ROLE: client (needs --tenant), node (NAME is its node id),
                                           auditor (--tenant: of that tenant only), admin, engine
  engine auth creds NAME [--format paddock|nkey|json]
                                           print the identity's credentials (secret): paddock, the
                                           file --creds reads; nkey, the seed line that nats --nkey
                                           and nats.py's nkeys_seed= read; json, both with the
                                           account, inbox prefix and file paths
  engine auth ls [--json]                  the identities
  engine auth rm NAME                      revoke one (a running engine reloads within a second)
  engine auth server-config [--listen H:P] [--store-dir D]
                                           a nats-server config with Paddock's accounts, for an
                                           external server or cluster (add your cluster block)
  engine auth node-keys                    {node: public key} of every node, for audit verify --node-keys
Every auth command takes --auth-dir (default: the auth store of engine serve's default state dir).
`

// authCmd is `engine auth ...`: the identities in an auth store, on this
// machine's disk (the engine's state dir, or a directory an operator keeps
// for an external cluster).
func authCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageErr("%s", authUsage)
	}
	sub := args[0]
	fs := newFlagSet("auth "+sub, stderr)
	dir := fs.String("auth-dir", auth.DirIn(auth.DefaultStateDir()), "the auth store's directory")
	tenant := fs.String("tenant", "", "the client's (or auditor's) tenant")
	jsonOut := fs.Bool("json", false, "print JSON (creds: as --format json)")
	format := fs.String("format", "paddock", "creds: paddock (the credentials file), nkey (the seed line) or json")
	listen := fs.String("listen", "0.0.0.0:4222", "server-config: the client listener")
	storeDir := fs.String("store-dir", "/var/lib/nats/jetstream", "server-config: JetStream's directory")
	maxStore := fs.String("max-store", "", "server-config: the server's JetStream store, e.g. 100g, which the engine splits among events, snapshots and projection (default: nats-server's, 75% of the free disk, which the engine cannot see)")
	pos, rest, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	if rest != nil {
		return usageErr("%s", authUsage)
	}
	st := auth.Open(*dir)
	switch {
	case sub == "add" && len(pos) == 2:
		c, err := st.Add(pos[1], auth.Role(pos[0]), *tenant)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, st.CredsPath(c.Name))
		fmt.Fprintf(stderr, "%s %s: key %s; keep the credentials file and %s secret (0600); engine auth creds %s prints them\n", c.Role, c.Name, c.PublicKey, st.NKeyPath(c.Name), c.Name)
		return nil
	case sub == "creds" && len(pos) == 1:
		f := *format
		if *jsonOut {
			f = "json"
		}
		return printCreds(stdout, st, pos[0], f)
	case sub == "ls" && len(pos) == 0:
		ids, err := st.Identities()
		if err != nil {
			return err
		}
		if *jsonOut {
			return printJSON(stdout, ids)
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tROLE\tTENANT\tKEY\tACCOUNT")
		for _, id := range ids {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", id.Name, id.Role, orDash(id.Tenant), id.PublicKey, id.Account())
		}
		return tw.Flush()
	case sub == "rm" && len(pos) == 1:
		return st.Remove(pos[0])
	case sub == "server-config" && len(pos) == 0:
		var store int64
		if *maxStore != "" {
			if store, err = bytesize.Parse(*maxStore); err != nil {
				return err
			}
			if store == 0 {
				return usageErr("--max-store 0: give a size, or leave the flag out for nats-server's default")
			}
		}
		accounts, err := cluster.ServerAccounts(*dir, store)
		if err != nil {
			return err
		}
		host, port, err := splitListen(*listen)
		if err != nil {
			return err
		}
		conf := cluster.ServerConf{Comment: "nats-server config for Paddock (engine auth server-config).", Host: host, Port: port, StoreDir: *storeDir, MaxStore: store}
		return conf.Write(stdout, accounts)
	case sub == "node-keys" && len(pos) == 0:
		keys, err := st.NodeKeys()
		if err != nil {
			return err
		}
		return printJSON(stdout, keys)
	}
	if !st.Exists() && sub != "add" {
		fmt.Fprintf(stderr, "note: no auth store at %s\n", *dir)
	}
	return usageErr("%s", authUsage)
}

// credsJSON is what `engine auth creds --format json` prints.
type credsJSON struct {
	Name      string    `json:"name"`
	Role      auth.Role `json:"role"`
	Tenant    string    `json:"tenant,omitempty"`
	Account   string    `json:"account"`
	PublicKey string    `json:"public_key"`
	Seed      string    `json:"seed"`
	Inbox     string    `json:"inbox_prefix"`
	CredsFile string    `json:"creds_file"`
	NKeyFile  string    `json:"nkey_file"`
}

// printCreds prints the named identity's credentials in format: paddock
// (the credentials file's JSON, as --creds reads it), nkey (the seed on
// one line) or json (credsJSON).
func printCreds(stdout io.Writer, st *auth.Store, name, format string) error {
	switch format {
	case "paddock", "nkey", "json":
	default:
		return usageErr("--format %q: want paddock, nkey or json", format)
	}
	c, err := st.Creds(name)
	if err != nil {
		return err
	}
	switch format {
	case "nkey":
		_, err = fmt.Fprintln(stdout, c.Seed)
		return err
	case "json":
		return printJSON(stdout, credsJSON{
			Name: c.Name, Role: c.Role, Tenant: c.Tenant, Account: c.Account(), PublicKey: c.PublicKey,
			Seed: c.Seed, Inbox: c.Inbox, CredsFile: st.CredsPath(name), NKeyFile: st.NKeyPath(name),
		})
	}
	b, err := os.ReadFile(st.CredsPath(name))
	if err != nil {
		return fmt.Errorf("read credentials: %w", err)
	}
	_, err = stdout.Write(b)
	return err
}

// splitListen parses HOST:PORT.
func splitListen(s string) (string, int, error) {
	bc := serveConfig{listen: s, sync: "always"}
	b, err := bc.brokerConfig()
	if err != nil {
		return "", 0, err
	}
	if b.Port <= 0 {
		return "", 0, usageErr("--listen %q needs a fixed port", s)
	}
	return b.Host, b.Port, nil
}
