package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
)

// sandboxWorkspace serves the workspace commands:
//
//	engine sandbox persist ID [--json]                 prints the snapshot id
//	engine sandbox hydrate ID --from FILE.tar|-        replace the workspace with an archive
//	engine sandbox hydrate ID --snapshot SNAP          ... or with one of its snapshots
//	engine sandbox resume ID [--secret-env K=V]... [--json]
func sandboxWorkspace(ctx context.Context, base globals, sub string, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var g globals
	fs := newFlagSet("sandbox "+sub, stderr)
	g.register(fs, base)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	from := fs.String("from", "", "hydrate: a tar archive to upload (- for stdin)")
	snapshot := fs.String("snapshot", "", "hydrate: a snapshot id of the session")
	secrets := kvFlag{}
	fs.Var(secrets, "secret-env", "resume: secret environment variable K=V for a re-created sandbox (repeatable)")
	pos, _, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("sandbox %s takes a session id (see engine help)", sub)
	}
	id := pos[0]
	nc, c, err := dial(&g)
	if err != nil {
		return err
	}
	defer nc.Close()
	var result any
	switch sub {
	case "persist":
		snap, err := c.Persist(ctx, id)
		if err != nil {
			return err
		}
		result = snap
		if !*asJSON {
			fmt.Fprintln(stdout, snap.ID)
			return nil
		}
	case "hydrate":
		if (*from == "") == (*snapshot == "") {
			return usageErr("sandbox hydrate takes exactly one of --from and --snapshot")
		}
		var res commands.HydrateResult
		if *snapshot != "" {
			res, err = c.Hydrate(ctx, id, commands.HydrateArgs{SnapshotID: *snapshot})
		} else {
			r := stdin
			if *from != "-" {
				f, ferr := os.Open(*from)
				if ferr != nil {
					return errcode.Wrap(errcode.InvalidRequest, ferr, "--from")
				}
				defer f.Close()
				r = f
			}
			res, err = c.HydrateFrom(ctx, id, r)
		}
		if err != nil {
			return err
		}
		result = res
		if !*asJSON {
			fmt.Fprintf(stdout, "%d members, %d bytes\n", res.Members, res.Bytes)
			return nil
		}
	case "resume":
		var sec map[string]string
		if len(secrets) > 0 {
			sec = secrets
		}
		res, err := c.Resume(ctx, id, sec)
		if err != nil {
			return err
		}
		result = res
		if !*asJSON {
			how := "workspace kept"
			if res.Restored {
				how = "restored from snapshot " + res.SnapshotID
			}
			fmt.Fprintf(stdout, "%s on %s (epoch %d), %s\n", res.Status, res.Node, res.Epoch, how)
			return nil
		}
	}
	return json.NewEncoder(stdout).Encode(result)
}
