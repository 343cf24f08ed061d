package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/operator"
)

// nodeCmd is `engine node list|cordon|uncordon|drain`.
func nodeCmd(ctx context.Context, base globals, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageErr("node takes list, cordon, uncordon or drain (see engine help)")
	}
	sub := args[0]
	var g globals
	fs := newFlagSet("node "+sub, stderr)
	g.register(fs, base)
	jsonOut := fs.Bool("json", false, "print JSON")
	wait := fs.Duration("wait", time.Second, "list: how long to listen for the nodes' heartbeats")
	pos, rest, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	if rest != nil {
		return usageErr("node %s takes no command after --", sub)
	}
	switch sub {
	case "list":
		if len(pos) != 0 {
			return usageErr("node list takes no arguments")
		}
	case "cordon", "uncordon", "drain":
		if len(pos) != 1 {
			return usageErr("node %s takes a node id", sub)
		}
		if err := commands.CheckToken("node", pos[0]); err != nil {
			return err
		}
	default:
		return usageErr("unknown node command %q (list, cordon, uncordon, drain)", sub)
	}
	nc, _, err := dial(&g)
	if err != nil {
		return err
	}
	defer nc.Close()
	if g.who != nil && g.who.Role != auth.RoleAdmin && g.who.Role != auth.RoleEngine {
		return errcode.New(errcode.PermissionDenied, "%s is a %s: node commands are for the engine's and admins' credentials", g.who.Name, g.who.Role)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "jetstream")
	}
	switch sub {
	case "list":
		rows, err := operator.ListNodes(ctx, nc, js, *wait)
		if err != nil {
			return err
		}
		if *jsonOut {
			return printJSON(stdout, rows)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tSTATUS\tSESSIONS\tRUNTIMES\tLABELS")
		for _, r := range rows {
			st := r.Status
			if r.Cordoned {
				st += ",cordoned"
			}
			if !r.Live {
				st += " (silent)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%s\n", r.Node, st, r.Sessions, r.Capacity, strings.Join(r.Runtimes, ","), labelList(r.Labels))
		}
		return tw.Flush()
	case "cordon", "uncordon":
		info, err := operator.Cordon(ctx, nc, g.actor(), pos[0], sub == "cordon")
		if err != nil {
			return err
		}
		if *jsonOut {
			return printJSON(stdout, info)
		}
		fmt.Fprintf(stdout, "node %s %sed (%d sessions)\n", info.Node, sub, info.Sessions)
		return nil
	}
	rows, err := operator.Drain(ctx, nc, js, g.actor(), pos[0], stderr)
	if err != nil {
		return err
	}
	failed := 0
	for _, r := range rows {
		if r.Outcome == "failed" || r.Outcome == "skipped" {
			failed++
		}
	}
	if *jsonOut {
		if err := printJSON(stdout, rows); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TENANT\tSESSION\tWAS\tOUTCOME\tNODE\tDETAIL")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Tenant, r.Session, r.From, r.Outcome, r.Node, r.Detail)
		}
		_ = tw.Flush()
		fmt.Fprintf(stdout, "node %s drained: %d sessions, %d left on it\n", pos[0], len(rows), failed)
	}
	if failed > 0 {
		return exitError{1}
	}
	return nil
}

func labelList(l map[string]string) string {
	var kv []string
	for k, v := range l {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}
