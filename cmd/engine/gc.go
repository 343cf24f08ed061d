package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/paddock-dev/paddock/retention"
)

// retentionFlags are the retention policy's flags, shared by `engine gc`
// and `engine serve` (which sweeps every --gc-interval).
type retentionFlags struct {
	transferTTL, deleted, orphanGrace time.Duration
	keep                              int
}

func registerRetention(fs *flag.FlagSet) *retentionFlags {
	f := &retentionFlags{}
	fs.DurationVar(&f.transferTTL, "transfer-ttl", retention.DefaultTransferTTL, "remove temporary transfer objects (uploads) older than this")
	fs.DurationVar(&f.orphanGrace, "orphan-grace", retention.DefaultOrphanGrace, "remove the chunks of an unfinished put (its writer killed) this long after their last write (1m or more)")
	fs.DurationVar(&f.deleted, "deleted-retention", retention.DefaultDeletedRetention, "remove the snapshots of sessions deleted this long ago (0: at once)")
	fs.IntVar(&f.keep, "snapshot-keep", 0, "keep a session's newest N snapshots, and always the one it resumes from (0: keep every one)")
	return f
}

func (f *retentionFlags) policy() (retention.Policy, error) {
	p := retention.Policy{TransferTTL: f.transferTTL, OrphanGrace: f.orphanGrace, DeletedRetention: f.deleted, KeepLast: f.keep}
	if err := p.Validate(); err != nil || f.orphanGrace < retention.MinOrphanGrace {
		return p, usageErr("--transfer-ttl above 0, --orphan-grace of %s or more, and no negative --deleted-retention or --snapshot-keep", retention.MinOrphanGrace)
	}
	return p, nil
}

// gcCmd is `engine gc [--dry-run] [--json]`: one retention sweep of the
// workspace bucket, every tenant's, with the engine's or an admin's
// credentials. It prints what it removed, or with --dry-run would.
func gcCmd(ctx context.Context, base globals, args []string, stdout, stderr io.Writer) error {
	var g globals
	fs := newFlagSet("gc", stderr)
	g.register(fs, base)
	dry := fs.Bool("dry-run", false, "remove nothing: print what a sweep would remove")
	jsonOut := fs.Bool("json", false, "print JSON")
	rf := registerRetention(fs)
	pos, rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 || rest != nil {
		return usageErr("gc takes no arguments")
	}
	p, err := rf.policy()
	if err != nil {
		return err
	}
	js, store, closeConn, err := openWorkspaces(ctx, &g, "gc")
	if err != nil {
		return err
	}
	defer closeConn()
	removed, err := retention.Sweep(ctx, store, retention.ProjectedSessions(js), p, *dry, nil)
	if *jsonOut {
		if removed == nil {
			removed = []retention.Removal{}
		}
		if perr := printJSON(stdout, removed); perr != nil {
			return perr
		}
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REASON\tNAME\tSIZE\tCREATED")
	for _, r := range removed {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", r.Reason, r.Name, r.Size, timeOrDash(r.Created))
	}
	total := retention.RemovedBytes(removed)
	verb := "removed"
	if *dry {
		verb = "would remove"
	}
	fmt.Fprintf(tw, "(%s %d, %d bytes)\n", verb, len(removed), total)
	if ferr := tw.Flush(); ferr != nil {
		return ferr
	}
	return err
}
