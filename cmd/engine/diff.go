package main

import (
	"context"
	"fmt"
	"io"

	"github.com/paddock-dev/paddock/commands"
)

// sandboxDiff is `engine sandbox diff ID [--from SEQ] [--to SEQ]
// [--limit N] [--json]`: the paths created (+), modified (~) and removed
// (-) between two recorded snapshots of a session, and a summary line.
func sandboxDiff(ctx context.Context, base globals, args []string, stdout, stderr io.Writer) error {
	var g globals
	fs := newFlagSet("sandbox diff", stderr)
	g.register(fs, base)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	from := fs.Uint64("from", 0, "the last snapshot recorded at or before this session seq (0: the one before --to)")
	to := fs.Uint64("to", 0, "the last snapshot recorded at or before this session seq (0: the newest)")
	limit := fs.Int("limit", 0, fmt.Sprintf("list at most this many changes (0: %d; at most %d)", commands.DefaultDiffLimit, commands.MaxDiffLimit))
	pos, rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || rest != nil {
		return usageErr("sandbox diff takes a session id (see engine help)")
	}
	req := commands.DiffRequest{SessionID: pos[0], FromSeq: *from, ToSeq: *to, Limit: *limit}
	if err := req.Validate(); err != nil {
		return err
	}
	nc, c, err := dial(&g)
	if err != nil {
		return err
	}
	defer nc.Close()
	res, err := c.DiffRequest(ctx, req)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdout, res)
	}
	marks := map[string]string{"created": "+", "modified": "~", "removed": "-"}
	for _, ch := range res.Changes {
		fmt.Fprintf(stdout, "%s %s\n", marks[ch.Change], ch.Path)
	}
	fromWhat := "an empty workspace"
	if res.From != nil {
		fromWhat = fmt.Sprintf("%s (seq %d)", res.From.ID, res.From.Seq)
	}
	more := ""
	if res.Truncated {
		more = fmt.Sprintf("; %d listed", len(res.Changes))
	}
	fmt.Fprintf(stdout, "%d created, %d modified, %d removed from %s to %s (seq %d)%s\n",
		res.Created, res.Modified, res.Removed, fromWhat, res.To.ID, res.To.Seq, more)
	return nil
}
