package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/readiness"
	"github.com/paddock-dev/paddock/replay"
)

// replayCmd is `engine replay`: fold the events stream from its first
// event with projection.Apply, print the state (or one session's
// timeline), or verify the KV projection against it.
func replayCmd(ctx context.Context, base globals, args []string, stdout, stderr io.Writer) error {
	var g globals
	fs := newFlagSet("replay", stderr)
	g.register(fs, base)
	verify := fs.Bool("verify", false, "compare the replay with the KV projection; exit 1 on any difference")
	at := fs.String("at", "", "the state as of this stream sequence or RFC 3339 time")
	session := fs.String("session", "", "print one session's history as a timeline (of --tenant)")
	tree := fs.String("tree", "", "print the lineage tree (forks) of this session's family, from its root ancestor (of --tenant)")
	jsonOut := fs.Bool("json", false, "print JSON (with --session: the events as stored, one per line)")
	wait := waitFlag(fs, "; with --verify, also for the projector to reach the stream's end")
	pos, rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 || rest != nil {
		return usageErr("replay takes no arguments")
	}
	if *tree != "" && (*verify || *session != "") {
		return usageErr("replay --tree takes no --verify or --session")
	}
	if *verify && (*at != "" || *session != "") {
		return usageErr("replay --verify compares the whole stream: no --at or --session")
	}
	var opts replay.Options
	if *at != "" {
		if n, err := strconv.ParseUint(*at, 10, 64); err == nil && n > 0 {
			opts.UpToSeq = n
		} else if t, err := time.Parse(time.RFC3339Nano, *at); err == nil {
			opts.UpToTime = t
		} else {
			return usageErr("--at %q is neither a stream sequence nor an RFC 3339 time", *at)
		}
	}
	for _, id := range []string{*session, *tree} {
		if id == "" {
			continue
		}
		if err := commands.CheckToken("session", id); err != nil {
			return err
		}
		if err := commands.CheckToken("tenant", g.tenant); err != nil {
			return err
		}
	}
	js, closeConn, err := dialJS(&g)
	if err != nil {
		return err
	}
	defer closeConn()
	log := events.NewLog(js, "", "")
	if *tree != "" {
		return lineageTree(ctx, js, *wait, log, g.tenant, *tree, opts, *jsonOut, stdout)
	}
	if *session != "" {
		return timeline(ctx, js, *wait, log, g.tenant, *session, opts, *jsonOut, stdout)
	}
	var res replay.Result
	err = readiness.Retry(ctx, js, "events stream", events.DefaultStream, *wait, func(ctx context.Context) error {
		res, err = replay.Rebuild(ctx, log, opts)
		return err
	})
	if err != nil {
		return err
	}
	if *verify {
		return verifyProjection(ctx, js, res, *wait, stdout)
	}
	if *jsonOut {
		return printJSON(stdout, res.Set)
	}
	return printSet(stdout, res)
}

// timeline prints one session's events up to opts' bound, then the state
// they fold to and the problems met.
func timeline(ctx context.Context, js jetstream.JetStream, wait time.Duration, log *events.Log, tenant, id string, opts replay.Options, jsonOut bool, stdout io.Writer) error {
	opts.Filters = []string{log.Subjects().SessionFilter(tenant, id)}
	var msgs []events.Msg
	var res replay.Result
	err := readiness.Retry(ctx, js, "events stream", events.DefaultStream, wait, func(ctx context.Context) error {
		msgs = nil
		opts.Each = func(m events.Msg) { msgs = append(msgs, m) }
		var err error
		res, err = replay.Rebuild(ctx, log, opts)
		return err
	})
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		return errcode.New(errcode.SessionNotFound, "no events of session %s in tenant %s", id, tenant)
	}
	if jsonOut {
		for _, m := range msgs {
			if _, err := fmt.Fprintf(stdout, "%s\n", m.Data); err != nil {
				return err
			}
		}
		return nil
	}
	rec := res.Set.Sessions[projection.SessionKey(tenant, id)]
	if res.Truncated(rec) {
		fmt.Fprintf(stdout, "note: the events stream no longer starts at this session's first event: it begins at stream seq %d (retention), so the history below is incomplete and cannot be folded\n", res.FirstSeq)
	}
	for _, m := range msgs {
		ev, err := m.Decode()
		if err != nil {
			fmt.Fprintf(stdout, "(stream seq %d: undecodable: %v)\n", m.StreamSeq, err)
			continue
		}
		fmt.Fprintln(stdout, formatEvent(ev))
	}
	fmt.Fprintf(stdout, "=> %s", orDash(string(rec.Status)))
	if rec.Node != "" {
		fmt.Fprintf(stdout, " on %s (epoch %d)", rec.Node, rec.Epoch)
	}
	fmt.Fprintf(stdout, ", seq %d, %d in flight, as of stream seq %d\n", rec.LastSeq, len(rec.InFlight), res.UpTo)
	for _, p := range rec.Problems {
		fmt.Fprintf(stdout, "problem: %s\n", p)
	}
	return nil
}

// printSet prints a rebuilt projection for people.
func printSet(w io.Writer, res replay.Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "TENANT\tSESSION\tSTATUS\tNODE\tSEQ\tOPEN\tPROBLEMS\n")
	var truncated []string
	for _, k := range sortedKeys(res.Set.Sessions) {
		r := res.Set.Sessions[k]
		if res.Truncated(r) {
			truncated = append(truncated, r.Tenant+"/"+r.ID)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\n", r.Tenant, r.ID, orDash(string(r.Status)), orDash(r.Node), r.LastSeq, len(r.InFlight), r.ProblemCount)
	}
	fmt.Fprintf(tw, "\nNODE\tSTATUS\tRUNTIMES\tPROBLEMS\n")
	for _, k := range sortedKeys(res.Set.Nodes) {
		n := res.Set.Nodes[k]
		fmt.Fprintf(tw, "%s\t%s\t%v\t%d\n", n.ID, orDash(string(n.Status)), n.Runtimes, n.ProblemCount)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nreplayed %d events, stream seq %d..%d\n", res.Events, res.FirstSeq, res.UpTo)
	if len(truncated) > 0 {
		fmt.Fprintf(w, "the events stream no longer starts at the first event of %d sessions (retention dropped events before stream seq %d); they cannot be rebuilt: %v\n", len(truncated), res.FirstSeq, truncated)
	}
	for _, p := range replay.Problems(res.Set) {
		fmt.Fprintf(w, "problem: %s: %s\n", p.Record, p.Problem)
	}
	return nil
}

// verifyProjection waits until a projector has taken in the stream up to
// the rebuild's end, then compares; differences make the exit code 1.
func verifyProjection(ctx context.Context, js jetstream.JetStream, res replay.Result, wait time.Duration, stdout io.Writer) error {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	// Each partition's projectors must reach where its rebuild stopped.
	upTo := res.PartitionUpTo
	if upTo == nil {
		upTo = []uint64{res.UpTo}
	}
	for {
		_, sts, err := projector.ReadStatus(wctx, js, events.DefaultStream)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return errcode.New(errcode.Unavailable, "no projector has run: bucket %s does not exist", projector.StateBucket)
		}
		best := make([]uint64, len(upTo))
		for _, s := range sts {
			if k := projector.NamePartition(s.Name); k < len(best) {
				best[k] = max(best[k], s.StreamSeq)
			}
		}
		behind := -1
		for k := range upTo {
			if best[k] < upTo[k] {
				behind = k
				break
			}
		}
		if err == nil && behind < 0 {
			break
		}
		select {
		case <-wctx.Done():
			if err != nil {
				return errcode.Wrap(errcode.Unavailable, err, "projector status")
			}
			return errcode.New(errcode.Unavailable, "the projector of partition %d did not reach stream seq %d within %s (it is at %d)", behind, upTo[behind], wait, best[behind])
		case <-time.After(100 * time.Millisecond):
		}
	}
	// Opened, not ensured: a reader must not reset the buckets' replicas
	// or limits to a default.
	b, err := projector.OpenBuckets(ctx, js)
	if err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "projection buckets")
	}
	var rep replay.Report
	err = readiness.Retry(ctx, js, "sessions projection", "KV_"+projector.SessionsBucket, wait, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, projectionTry)
		defer cancel()
		rep, err = replay.Verify(ctx, b, res)
		return err
	})
	if err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "verify")
	}
	for _, d := range rep.Differences {
		fmt.Fprintf(stdout, "DIFFERENT %s\n", d)
	}
	for _, u := range rep.Unverifiable {
		fmt.Fprintf(stdout, "unverifiable %s: the events stream no longer starts at its first event (retention dropped events before stream seq %d)\n", u, res.FirstSeq)
	}
	if rep.Reread > 0 {
		fmt.Fprintf(stdout, "%d records read again from their bucket's leader: the first read showed them behind (a replica catching up)\n", rep.Reread)
	}
	if len(rep.Newer) > 0 {
		fmt.Fprintf(stdout, "%d records took in events after stream seq %d and were not compared\n", len(rep.Newer), res.UpTo)
	}
	if len(rep.Differences) > 0 {
		fmt.Fprintf(stdout, "replay --verify: %d differences between the KV projection and the replay of stream seq %d..%d\n", len(rep.Differences), res.FirstSeq, res.UpTo)
		return exitError{1}
	}
	fmt.Fprintf(stdout, "verified: %d records in KV equal the replay of %d events (stream seq %d..%d)\n", rep.Compared, res.Events, res.FirstSeq, res.UpTo)
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
