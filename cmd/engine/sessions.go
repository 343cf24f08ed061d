package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/readiness"
)

// sandboxRead serves `sandbox list` and `sandbox inspect`, which read the
// projection (sbx_sessions) instead of asking a node.
func sandboxRead(ctx context.Context, base globals, sub string, args []string, stdout, stderr io.Writer) error {
	var g globals
	fs := newFlagSet("sandbox "+sub, stderr)
	g.register(fs, base)
	jsonOut := fs.Bool("json", false, "print JSON")
	status := fs.String("status", "", "only sessions in this status (creating, running, stopped, shut_down, lost, deleted, failed)")
	wait := waitFlag(fs, "")
	labels := kvFlag{}
	all := new(bool)
	if sub == "list" {
		fs.Var(labels, "label", "only sessions with this label K=V (repeatable)")
		all = fs.Bool("all", false, "deleted sessions too (hidden unless --all or --status deleted)")
	}
	pos, rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	switch {
	case rest != nil:
		return usageErr("sandbox %s takes no command after --", sub)
	case sub == "list" && len(pos) != 0:
		return usageErr("sandbox list takes no arguments")
	case sub == "inspect" && len(pos) != 1:
		return usageErr("sandbox inspect takes one session id")
	case sub == "inspect" && *status != "":
		return usageErr("sandbox inspect takes no --status")
	}
	switch projection.Status(*status) {
	case "", projection.StatusCreating, projection.StatusRunning, projection.StatusStopped,
		projection.StatusShutDown, projection.StatusLost, projection.StatusDeleted, projection.StatusFailed:
	default:
		return usageErr("--status %q is not one of creating, running, stopped, shut_down, lost, deleted, failed", *status)
	}
	nc, c, err := dial(&g)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := g.mayReadStream(); err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "jetstream")
	}
	read := func(fn func(context.Context) error) error {
		return readiness.Retry(ctx, js, "sessions projection", "KV_"+projector.SessionsBucket, *wait, func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, projectionTry)
			defer cancel()
			return fn(ctx)
		})
	}
	if sub == "inspect" {
		var rec projection.SessionRecord
		err := read(func(ctx context.Context) (err error) {
			rec, err = c.Inspect(ctx, pos[0])
			return err
		})
		if err != nil {
			return err
		}
		if *jsonOut {
			return printJSON(stdout, rec)
		}
		return printRecord(stdout, rec)
	}
	var recs []projection.SessionRecord
	err = read(func(ctx context.Context) (err error) {
		recs, err = c.Sessions(ctx, client.SessionFilter{Status: projection.Status(*status), Labels: labels})
		return err
	})
	if err != nil {
		return err
	}
	if !*all && *status == "" {
		recs = slices.DeleteFunc(recs, func(r projection.SessionRecord) bool { return r.Status == projection.StatusDeleted })
	}
	if *jsonOut {
		if recs == nil {
			recs = []projection.SessionRecord{}
		}
		return printJSON(stdout, recs)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "SESSION\tSTATUS\tNODE\tRUNTIME\tCREATED\tSEQ\tOPEN\tPROBLEMS\n")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", r.ID, orDash(string(r.Status)), orDash(r.Node), orDash(r.Runtime),
			timeOrDash(r.CreatedAt), r.LastSeq, len(r.InFlight), r.ProblemCount)
	}
	return tw.Flush()
}

// printRecord prints one session record for people.
func printRecord(w io.Writer, r projection.SessionRecord) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("session", r.ID)
	row("tenant", r.Tenant)
	row("status", orDash(string(r.Status)))
	row("node", orDash(r.Node))
	row("epoch", fmt.Sprint(r.Epoch))
	row("runtime", orDash(r.Runtime))
	row("image", orDash(r.Image))
	row("container", orDash(r.ContainerID))
	row("created", timeOrDash(r.CreatedAt))
	row("updated", timeOrDash(r.UpdatedAt))
	row("last seq", fmt.Sprint(r.LastSeq))
	row("stream seq", fmt.Sprint(r.StreamSeq))
	if len(r.Labels) > 0 {
		keys := make([]string, 0, len(r.Labels))
		for k := range r.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var kv []string
		for _, k := range keys {
			kv = append(kv, k+"="+r.Labels[k])
		}
		row("labels", strings.Join(kv, " "))
	}
	if s := r.LastSnapshot; s != nil {
		row("last snapshot", fmt.Sprintf("%s (%d bytes, sha256 %s)", s.Name, s.Size, s.SHA256))
	}
	if e := r.LastError; e != nil {
		row("last error", fmt.Sprintf("%s at seq %d: %s: %s", e.Op, e.Seq, e.Code, e.Message))
	}
	spans := make([]string, 0, len(r.InFlight))
	for span := range r.InFlight {
		spans = append(spans, span)
	}
	sort.Slice(spans, func(i, j int) bool { return r.InFlight[spans[i]].Seq < r.InFlight[spans[j]].Seq })
	for _, span := range spans {
		op := r.InFlight[span]
		row("in flight", fmt.Sprintf("%s (span %s) since seq %d, %s", op.Op, span, op.Seq, timeOrDash(op.Started)))
	}
	if r.ProblemCount > 0 {
		row("problems", fmt.Sprint(r.ProblemCount))
		for _, p := range r.Problems {
			row("  problem", p.String())
		}
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func timeOrDash(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return formatTime(t)
}
