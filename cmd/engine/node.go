package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
)

// nodeRow is one node as `engine node list` shows it: live from its
// heartbeat when it answers, else as its events left it.
type nodeRow struct {
	Node     string            `json:"node"`
	Status   string            `json:"status"`
	Cordoned bool              `json:"cordoned,omitempty"`
	Sessions int               `json:"sessions"`
	Capacity int               `json:"capacity"`
	Runtimes []string          `json:"runtimes,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	// Live says whether the node heartbeat when asked.
	Live bool `json:"live"`
}

// drainRow is what drain did with one session.
type drainRow struct {
	Tenant  string `json:"tenant"`
	Session string `json:"session_id"`
	From    string `json:"from_status"`
	Node    string `json:"node,omitempty"` // where it runs now
	Outcome string `json:"outcome"`        // moved, released, skipped, failed
	Detail  string `json:"detail,omitempty"`
}

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
		rows, err := listNodes(ctx, nc, js, *wait)
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
		info, err := cordon(ctx, nc, g.actor(), pos[0], sub == "cordon")
		if err != nil {
			return err
		}
		if *jsonOut {
			return printJSON(stdout, info)
		}
		fmt.Fprintf(stdout, "node %s %sed (%d sessions)\n", info.Node, sub, info.Sessions)
		return nil
	}
	rows, err := drain(ctx, nc, js, g, pos[0], stderr)
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

// listNodes merges the nodes that heartbeat within wait with those the
// nodes projection records.
func listNodes(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, wait time.Duration) ([]nodeRow, error) {
	live, err := heartbeats(ctx, nc, wait)
	if err != nil {
		return nil, err
	}
	rows := map[string]nodeRow{}
	if kv, err := js.KeyValue(ctx, projector.NodesBucket); err == nil {
		recs, err := projector.ReadAll[projection.NodeRecord](ctx, kv, ">")
		if err != nil {
			return nil, errcode.Wrap(errcode.Unavailable, err, "nodes projection")
		}
		for _, r := range recs {
			rows[r.ID] = nodeRow{Node: r.ID, Status: string(r.Status), Cordoned: r.Cordoned, Capacity: r.Capacity, Runtimes: r.Runtimes, Labels: r.Labels}
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, errcode.Wrap(errcode.Unavailable, err, "nodes projection")
	}
	for _, n := range live {
		rows[n.Node] = nodeRow{Node: n.Node, Status: n.Status, Cordoned: n.Cordoned, Sessions: n.Sessions, Capacity: n.Capacity, Runtimes: n.Runtimes, Labels: n.Labels, Live: true}
	}
	out := make([]nodeRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, nil
}

// nodeRequest sends a node admin op and decodes its result.
func nodeRequest(ctx context.Context, nc *nats.Conn, actor, node, op string, args, out any) error {
	req := commands.Request{Version: commands.Version, Actor: actor}
	if args != nil {
		req.Args, _ = json.Marshal(args)
	}
	body, _ := json.Marshal(req)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(rctx, commands.Subjects{}.Node(node, op), body)
	if errors.Is(err, nats.ErrNoResponders) {
		return errcode.New(errcode.Unavailable, "node %s does not answer (stopped or lost: engine node list)", node)
	}
	if err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "node "+node+" "+op)
	}
	var rep commands.Reply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return errcode.Wrap(errcode.Internal, err, "decode reply")
	}
	if rep.Error != nil {
		return rep.Error.Err()
	}
	if out != nil && len(rep.Result) > 0 {
		return json.Unmarshal(rep.Result, out)
	}
	return nil
}

func cordon(ctx context.Context, nc *nats.Conn, actor, node string, on bool) (nodes.Info, error) {
	op := commands.NodeUncordon
	if on {
		op = commands.NodeCordon
	}
	var info nodes.Info
	err := nodeRequest(ctx, nc, actor, node, op, nil, &info)
	return info, err
}

// drain cordons node and moves each of its sessions: a running one is
// stopped (which persists it), shut down, released by the node and resumed
// by the scheduler on another node; a stopped one the same, then stopped
// again where it landed; a shut-down one is released (it resumes wherever
// it is asked to). A session whose create declared secret variables is
// skipped: only its client can give their values again.
func drain(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, g globals, node string, progress io.Writer) ([]drainRow, error) {
	if _, err := cordon(ctx, nc, g.actor(), node, true); err != nil {
		return nil, err
	}
	ss, err := projector.OpenSessions(ctx, js)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	recs, err := ss.List(ctx, ">")
	if err != nil {
		return nil, err
	}
	var todo []projection.Session
	for _, r := range recs {
		switch r.Status {
		case projection.StatusRunning, projection.StatusStopped, projection.StatusShutDown:
			if r.Node == node {
				todo = append(todo, r.Session)
			}
		}
	}
	sort.Slice(todo, func(i, j int) bool { return todo[i].Tenant+todo[i].ID < todo[j].Tenant+todo[j].ID })
	log := events.NewLog(js, "", "")
	clients := map[string]*client.Client{}
	var rows []drainRow
	for _, s := range todo {
		c := clients[s.Tenant]
		if c == nil {
			if c, err = client.New(nc, client.Options{Tenant: s.Tenant, Actor: "drain"}); err != nil {
				return rows, err
			}
			clients[s.Tenant] = c
		}
		row := drainRow{Tenant: s.Tenant, Session: s.ID, From: string(s.Status)}
		row.Outcome, row.Node, row.Detail = moveSession(ctx, c, nc, log, g.actor(), node, s)
		fmt.Fprintf(progress, "drain: %s/%s (%s): %s %s %s\n", s.Tenant, s.ID, s.Status, row.Outcome, row.Node, row.Detail)
		rows = append(rows, row)
	}
	return rows, nil
}

// moveSession moves one session off node (see drain).
func moveSession(ctx context.Context, c *client.Client, nc *nats.Conn, log *events.Log, actor, node string, s projection.Session) (outcome, at, detail string) {
	fail := func(step string, err error) (string, string, string) {
		return "failed", "", step + ": " + err.Error()
	}
	evs, err := log.Session(ctx, s.Tenant, s.ID)
	if err != nil {
		return fail("read history", err)
	}
	for _, ev := range evs {
		if ev.Op == string(commands.OpCreate) && ev.Phase == events.PhaseStart {
			if d, err := events.DecodeData[events.CreateStart](ev); err == nil && len(d.SecretEnvKeys) > 0 {
				return "skipped", "", "has secret variables: its client must resume it with their values (stop it, shut it down, then resume with secret_env)"
			}
		}
	}
	if s.Status == projection.StatusRunning {
		if err := c.Stop(ctx, s.ID); err != nil {
			return fail("stop", err)
		}
	}
	if s.Status != projection.StatusShutDown {
		if err := c.Shutdown(ctx, s.ID); err != nil {
			return fail("shutdown", err)
		}
	}
	if err := nodeRequest(ctx, nc, actor, node, commands.NodeRelease, commands.ReleaseArgs{Tenant: s.Tenant, SessionID: s.ID}, nil); err != nil && errcode.Of(err) != errcode.SessionNotFound {
		return fail("release", err)
	}
	if s.Status == projection.StatusShutDown {
		return "released", "", "shut down: resumes on another node when asked"
	}
	res, err := c.Resume(ctx, s.ID, nil)
	if err != nil {
		return fail("resume", err)
	}
	if s.Status == projection.StatusStopped {
		if err := c.Stop(ctx, s.ID); err != nil {
			return fail("stop again on "+res.Node, err)
		}
	}
	return "moved", res.Node, fmt.Sprintf("epoch %d, snapshot %s", res.Epoch, res.SnapshotID)
}
