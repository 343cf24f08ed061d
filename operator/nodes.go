package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
)

// NodeRow is one node as an operator sees it (`engine node list`): live from its
// heartbeat when it answers, else as its events left it.
type NodeRow struct {
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

// DrainRow is what Drain did with one session.
type DrainRow struct {
	Tenant  string `json:"tenant"`
	Session string `json:"session_id"`
	From    string `json:"from_status"`
	Node    string `json:"node,omitempty"` // where it runs now
	Outcome string `json:"outcome"`        // moved, released, skipped, failed
	Detail  string `json:"detail,omitempty"`
}

// Heartbeats asks every node to heartbeat now and collects what comes
// within wait, one per node.
func Heartbeats(ctx context.Context, nc *nats.Conn, wait time.Duration) ([]events.NodeInfo, error) {
	subj := commands.Subjects{}
	ch := make(chan *nats.Msg, 256)
	sub, err := nc.ChanSubscribe(subj.HeartbeatAll(), ch)
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "subscribe heartbeats")
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Publish(subj.Announce(), nil); err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "announce")
	}
	seen := map[string]events.NodeInfo{}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		select {
		case m := <-ch:
			var info events.NodeInfo
			if json.Unmarshal(m.Data, &info) == nil && m.Subject == subj.Heartbeat(info.Node) {
				seen[info.Node] = info
			}
		case <-deadline.C:
			out := make([]events.NodeInfo, 0, len(seen))
			for _, n := range seen {
				out = append(out, n)
			}
			sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
			return out, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// ListNodes merges the nodes that heartbeat within wait with those the
// nodes projection records.
func ListNodes(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, wait time.Duration) ([]NodeRow, error) {
	live, err := Heartbeats(ctx, nc, wait)
	if err != nil {
		return nil, err
	}
	rows := map[string]NodeRow{}
	if kv, err := js.KeyValue(ctx, projector.NodesBucket); err == nil {
		recs, err := projector.ReadAll[projection.NodeRecord](ctx, kv, ">")
		if err != nil {
			return nil, errcode.Wrap(errcode.Unavailable, err, "nodes projection")
		}
		for _, r := range recs {
			rows[r.ID] = NodeRow{Node: r.ID, Status: string(r.Status), Cordoned: r.Cordoned, Capacity: r.Capacity, Runtimes: r.Runtimes, Labels: r.Labels}
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, errcode.Wrap(errcode.Unavailable, err, "nodes projection")
	}
	for _, n := range live {
		rows[n.Node] = NodeRow{Node: n.Node, Status: n.Status, Cordoned: n.Cordoned, Sessions: n.Sessions, Capacity: n.Capacity, Runtimes: n.Runtimes, Labels: n.Labels, Live: true}
	}
	out := make([]NodeRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, nil
}

// NodeRequest sends a node admin op (commands.NodeCordon, NodeRelease,
// ...) to node as actor and decodes its result into out (nothing when out
// is nil). It fails with unavailable when the node does not answer within
// 30 seconds, and with the node's own error when it refuses.
func NodeRequest(ctx context.Context, nc *nats.Conn, actor, node, op string, args, out any) error {
	body, err := client.EncodeRequest(commands.Request{Version: commands.Version, Actor: actor}, args)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	m, err := client.Requester{Conn: nc}.Send(rctx, commands.Subjects{}.Node(node, op), nil, body)
	if errors.Is(err, nats.ErrNoResponders) {
		return errcode.New(errcode.Unavailable, "node %s does not answer (stopped or lost: engine node list)", node)
	}
	if err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "node "+node+" "+op)
	}
	rep, err := client.DecodeReply(m.Data)
	if err != nil {
		return err
	}
	return client.ReplyResult(rep, out)
}

// Cordon cordons node (on) or lifts its cordon, as actor, and returns the
// node's state after. A cordoned node takes no new sessions. It fails as
// NodeRequest does.
func Cordon(ctx context.Context, nc *nats.Conn, actor, node string, on bool) (events.NodeInfo, error) {
	op := commands.NodeUncordon
	if on {
		op = commands.NodeCordon
	}
	var info events.NodeInfo
	err := NodeRequest(ctx, nc, actor, node, op, nil, &info)
	return info, err
}

// Drain cordons node and moves each of its sessions: a running one is
// stopped (which persists it), shut down, released by the node and resumed
// by the scheduler on another node; a stopped one the same, then stopped
// again where it landed; a shut-down one is released (it resumes wherever
// it is asked to). A session whose create declared secret variables is
// skipped: only its client can give their values again.
func Drain(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, actor, node string, progress io.Writer) ([]DrainRow, error) {
	if _, err := Cordon(ctx, nc, actor, node, true); err != nil {
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
	var rows []DrainRow
	for _, s := range todo {
		c := clients[s.Tenant]
		if c == nil {
			if c, err = client.New(nc, client.Options{Tenant: s.Tenant, Actor: "drain"}); err != nil {
				return rows, err
			}
			clients[s.Tenant] = c
		}
		row := DrainRow{Tenant: s.Tenant, Session: s.ID, From: string(s.Status)}
		row.Outcome, row.Node, row.Detail = moveSession(ctx, c, nc, log, actor, node, s)
		fmt.Fprintf(progress, "drain: %s/%s (%s): %s %s %s\n", s.Tenant, s.ID, s.Status, row.Outcome, row.Node, row.Detail)
		rows = append(rows, row)
	}
	return rows, nil
}

// moveSession moves one session off node (see Drain).
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
	if err := NodeRequest(ctx, nc, actor, node, commands.NodeRelease, commands.ReleaseArgs{Tenant: s.Tenant, SessionID: s.ID}, nil); err != nil && errcode.Of(err) != errcode.SessionNotFound {
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
