package main

import (
	"context"
	"fmt"
	"io"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
)

// forkedChild is one line of sandbox fork --json: a child drawn, the
// point it came from, and why it did not come up (when it did not).
type forkedChild struct {
	SessionID string              `json:"session_id"`
	Parent    commands.Parent     `json:"parent"`
	Error     *commands.WireError `json:"error,omitempty"`
}

// sandboxFork is engine sandbox fork ID [-n N] [--from SNAPSHOT] [--at SEQ]
// [--secret-env K=V] [--json]: one child id a line (--json: a list of
// children with the parent point). Children that did not come up are
// listed on stderr and the command exits 1.
func sandboxFork(ctx context.Context, base globals, args []string, stdout, stderr io.Writer) error {
	var g globals
	fs := newFlagSet("sandbox fork", stderr)
	g.register(fs, base)
	asJSON := fs.Bool("json", false, "print a JSON list of the children, each with the parent point")
	n := fs.IntP("n", "n", 1, "how many children (1..the operator's maximum, at most 100)")
	from := fs.String("from", "", "fork from this snapshot of the session (one its history recorded)")
	at := fs.Uint64("at", 0, "fork from the last snapshot the session recorded at or before this seq")
	secrets := kvFlag{}
	fs.Var(secrets, "secret-env", "secret environment variable K=V for the children (the parent's are not passed on; repeatable)")
	pos, _, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("sandbox fork takes a session id (see engine help)")
	}
	nc, c, err := dial(&g)
	if err != nil {
		return err
	}
	defer nc.Close()
	res, err := c.Fork(ctx, pos[0], commands.ForkRequest{N: *n, SnapshotID: *from, AtSeq: *at, SecretEnv: secrets})
	if err != nil {
		return err
	}
	if *asJSON {
		out := make([]forkedChild, 0, len(res.Children)+len(res.Failed))
		for _, id := range res.Children {
			out = append(out, forkedChild{SessionID: id, Parent: res.Parent})
		}
		for _, f := range res.Failed {
			out = append(out, forkedChild{SessionID: f.SessionID, Parent: res.Parent, Error: f.Error})
		}
		if err := printJSON(stdout, out); err != nil {
			return err
		}
	} else {
		for _, id := range res.Children {
			fmt.Fprintln(stdout, id)
		}
	}
	if len(res.Failed) > 0 {
		for _, f := range res.Failed {
			fmt.Fprintf(stderr, "child %s did not come up: %s: %s\n", f.SessionID, f.Error.Code, f.Error.Message)
		}
		return errcode.New(errcode.Unavailable, "%d of %d children did not come up", len(res.Failed), len(res.Failed)+len(res.Children))
	}
	return nil
}
