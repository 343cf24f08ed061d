package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/operator"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/retention"
)

// statusCmd is `engine status`: the deployment at a glance: each stream's
// replicas, leader and followers, the nodes that answer (asked to
// heartbeat at once), the projectors' lag and which engine projects each
// partition.
func statusCmd(ctx context.Context, base globals, args []string, stdout, stderr io.Writer) error {
	var g globals
	fs := newFlagSet("status", stderr)
	g.register(fs, base)
	jsonOut := fs.Bool("json", false, "print the status as JSON")
	wait := fs.Duration("wait", time.Second, "how long to listen for the nodes' heartbeats")
	pos, rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 || rest != nil {
		return usageErr("status takes no arguments")
	}
	js, closeConn, err := dialJS(&g)
	if err != nil {
		return err
	}
	defer closeConn()
	if g.consumer() != "" {
		return errcode.New(errcode.PermissionDenied, "%s is an auditor: status is for the engine's and admins' credentials", g.who.Name)
	}
	rep, err := operator.Status(ctx, js, *wait)
	if err != nil {
		return err
	}
	if *jsonOut {
		return printJSON(stdout, rep)
	}
	return printStatus(stdout, rep)
}

func printStatus(w io.Writer, rep operator.Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if rep.Cluster != "" {
		fmt.Fprintf(tw, "connected to %s of cluster %s\n\n", rep.Connected, rep.Cluster)
		fmt.Fprintln(tw, "SERVER\tSTATE\tLEADS")
		for _, s := range rep.Servers {
			state := "online"
			if s.Offline {
				state = "offline"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, state, orDash(strings.Join(s.Leads, ", ")))
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintln(tw, "STREAM\tREPLICAS\tLEADER\tFOLLOWERS\tMESSAGES\tBYTES")
	for _, s := range rep.Streams {
		if s.Missing {
			fmt.Fprintf(tw, "%s\t-\t-\t(missing)\t-\t-\n", s.Name)
			continue
		}
		var fl []string
		for _, f := range s.Followers {
			state := "current"
			switch {
			case f.Offline:
				state = "offline"
			case !f.Current:
				state = fmt.Sprintf("behind %d", f.Lag)
			}
			fl = append(fl, f.Name+" "+state)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\n", s.Name, s.Replicas, orDash(s.Leader), orDash(strings.Join(fl, ", ")), s.Messages, s.Bytes)
	}
	printStorage(tw, rep.Streams)
	if u := rep.Unfinished; u != nil && u.Puts > 0 {
		fmt.Fprintf(tw, "UNFINISHED PUTS\t%d, %d bytes of chunks no snapshot names (a sweep removes them %s after their last write)\n", u.Puts, u.Bytes, retention.DefaultOrphanGrace)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "NODE\tSTATUS\tRUNTIMES\tSESSIONS\tCAPACITY")
	for _, n := range rep.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", n.Node, n.Status, strings.Join(n.Runtimes, ","), n.Sessions, n.Capacity)
	}
	if len(rep.Nodes) == 0 {
		fmt.Fprintln(tw, "(no node answered)")
	}
	printDisks(tw, rep.Nodes)
	fmt.Fprintln(tw)
	if rep.Sessions != nil {
		var parts []string
		for _, st := range []string{"creating", "running", "stopped", "shut_down", "lost", "failed", "deleted"} {
			if n := rep.Sessions[st]; n > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", n, st))
			}
		}
		fmt.Fprintf(tw, "SESSIONS\t%s\n\n", orDash(strings.Join(parts, ", ")))
	}
	fmt.Fprintln(tw, "PROJECTOR\tCHECKPOINT\tLAG")
	for _, p := range rep.Projectors {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", p.Name, p.StreamSeq, p.Lag)
	}
	printOwners(tw, rep.Owners)
	return tw.Flush()
}

// printOwners prints which engine projects each partition (nothing when
// the engines share no partitions by lease).
func printOwners(tw io.Writer, owners []projector.Owner) {
	if len(owners) == 0 {
		return
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "PARTITION\tSTREAM\tOWNER\tPROJECTOR\tRENEWED")
	for _, o := range owners {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", o.Partition, o.Stream, o.Owner, o.Projector, formatTime(o.RenewedAt))
	}
}

// printStorage prints each stream's bytes against its limit.
func printStorage(tw io.Writer, streams []operator.StreamStatus) {
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "STORAGE\tBYTES\tLIMIT\tUSED")
	for _, s := range streams {
		if s.Missing {
			continue
		}
		limit, used := "-", "-"
		if s.MaxBytes > 0 {
			limit, used = fmt.Sprint(s.MaxBytes), fmt.Sprintf("%.1f%%", s.UsedPercent)
		}
		if s.Warning != "" {
			used += " WARNING: " + s.Warning
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", s.Name, s.Bytes, limit, used)
	}
}
