package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/readiness"
	"github.com/paddock-dev/paddock/replay"
)

// lineageTree is engine replay --tree ID: the lineage tree of the
// session's family from its root ancestor, folded from the tenant's
// events. A line per session: its indent, its id, its status and the
// parent point it came from (@seq snapshot root[:12]); --json a nested
// object (projection.TreeNode).
func lineageTree(ctx context.Context, js jetstream.JetStream, wait time.Duration, log *events.Log, tenant, id string, opts replay.Options, jsonOut bool, stdout io.Writer) error {
	opts.Filters = []string{log.Subjects().Filter(tenant, "", "")}
	var res replay.Result
	err := readiness.Retry(ctx, js, "events stream", events.DefaultStream, wait, func(ctx context.Context) error {
		var err error
		res, err = replay.Rebuild(ctx, log, opts)
		return err
	})
	if err != nil {
		return err
	}
	sessions := map[string]projection.Session{}
	for _, rec := range res.Set.Sessions {
		if rec.Tenant == tenant {
			sessions[rec.ID] = rec.Session
		}
	}
	tree, ok := projection.Tree(sessions, id)
	if !ok {
		return errcode.New(errcode.SessionNotFound, "no events of session %s in tenant %s", id, tenant)
	}
	if jsonOut {
		return printJSON(stdout, tree)
	}
	printTree(stdout, tree, 0)
	return nil
}

func printTree(w io.Writer, n projection.TreeNode, depth int) {
	line := strings.Repeat("  ", depth) + n.SessionID
	switch {
	case n.Missing:
		line += " (no history: never came up)"
	default:
		line += " " + string(n.Status)
	}
	if p := n.Parent; p != nil {
		root := p.RootSHA256
		if len(root) > 12 {
			root = root[:12]
		}
		line += fmt.Sprintf(" @%d %s %s", p.Seq, p.Snapshot, root)
	}
	fmt.Fprintln(w, line)
	for _, c := range n.Children {
		printTree(w, c, depth+1)
	}
}
