package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
)

// sandboxWorkspace serves the workspace commands:
//
//	engine sandbox persist ID [--json]                 prints the snapshot id
//	engine sandbox hydrate ID --from FILE.tar|-        replace the workspace with an archive
//	engine sandbox hydrate ID --snapshot SNAP          ... or with one of its snapshots
//	engine sandbox checkpoint ID [--leave-running]     processes and memory too; prints the snapshot id
//	engine sandbox resume ID [--secret-env K=V]... [--empty] [--at SEQ] [--egress MODE] [--allow DEST]... [--json]
func sandboxWorkspace(ctx context.Context, base globals, sub string, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var g globals
	fs := newFlagSet("sandbox "+sub, stderr)
	g.register(fs, base)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	from := fs.String("from", "", "hydrate: a tar archive to upload (- for stdin)")
	snapshot := fs.String("snapshot", "", "hydrate: a snapshot id of the session")
	secrets := kvFlag{}
	fs.Var(secrets, "secret-env", "resume: secret environment variable K=V for a re-created sandbox (repeatable)")
	empty := fs.Bool("empty", false, "resume: a session that has no snapshot (a lost one never persisted) comes back with an empty workspace")
	leaveRunning := fs.Bool("leave-running", false, "checkpoint: keep the sandbox running (default: the session stops, as stop --memory)")
	atSeq := fs.Uint64("at", 0, "resume: restore the last snapshot recorded at or before this event seq (point-in-time restore; 0: the newest)")
	var egress egressFlags
	egress.register(fs, "resume")
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
		pr := startProgress(stderr, "persist", false)
		snap, err := c.Persist(ctx, id)
		pr.done()
		if err != nil {
			return err
		}
		result = snap
		if !*asJSON {
			fmt.Fprintln(stdout, snap.ID)
			return nil
		}
	case "checkpoint":
		return checkpoint(ctx, c, id, *leaveRunning, *asJSON, stdout, stderr)
	case "hydrate":
		if (*from == "") == (*snapshot == "") {
			return usageErr("sandbox hydrate takes exactly one of --from and --snapshot")
		}
		var res commands.HydrateResult
		if *snapshot != "" {
			pr := startProgress(stderr, "hydrate", false)
			res, err = c.Hydrate(ctx, id, commands.HydrateArgs{SnapshotID: *snapshot})
			pr.done()
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
			pr := startProgress(stderr, "hydrate", true)
			res, err = c.HydrateFrom(ctx, id, pr.Reader(r))
			pr.done()
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
		pr := startProgress(stderr, "resume", false)
		eg, err := egress.policy()
		if err != nil {
			return err
		}
		res, err := c.ResumeWith(ctx, id, commands.ResumeArgs{SecretEnv: sec, Empty: *empty, Egress: eg, AtSeq: *atSeq})
		pr.done()
		if err != nil {
			return err
		}
		result = res
		if !*asJSON {
			how := "workspace kept"
			switch {
			case res.Restored:
				how = "restored from snapshot " + res.SnapshotID
			case *empty && res.SnapshotID == "":
				how = "no snapshot restored (a re-created sandbox starts empty)"
			}
			fmt.Fprintf(stdout, "%s on %s (epoch %d), %s\n", res.Status, res.Node, res.Epoch, how)
			return nil
		}
	}
	return json.NewEncoder(stdout).Encode(result)
}

// checkpoint runs engine sandbox checkpoint and stop --memory: it prints
// the memory snapshot's id, or the result as JSON.
func checkpoint(ctx context.Context, c *client.Client, id string, leaveRunning, asJSON bool, stdout, stderr io.Writer) error {
	pr := startProgress(stderr, "checkpoint", false)
	res, err := c.Checkpoint(ctx, id, commands.CheckpointArgs{LeaveRunning: leaveRunning})
	pr.done()
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, res)
	}
	fmt.Fprintln(stdout, res.Snapshot.ID)
	return nil
}
