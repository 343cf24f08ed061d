package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/operator"
	"github.com/paddock-dev/paddock/provision"
)

// Waiter keeps one connection to each server between checks, and
// one subscription to the nodes' heartbeats: a subscription made afresh
// for each check could miss the heartbeats of a node on another server
// until the cluster has spread its interest there.
type Waiter struct {
	creds, tlsCA string
	conns        map[string]*nats.Conn
	hbSub        *nats.Subscription
	hb           chan *nats.Msg
	heard        map[string]time.Time // node id → when its last "up" heartbeat came
}

// NewWaiter returns a Waiter that connects with the credentials file
// creds and trusts the CA file tlsCA ("": none).
func NewWaiter(creds, tlsCA string) *Waiter {
	return &Waiter{creds: creds, tlsCA: tlsCA, conns: map[string]*nats.Conn{}}
}

// Close closes the Waiter's connections.
func (w *Waiter) Close() {
	if w.hbSub != nil {
		_ = w.hbSub.Unsubscribe()
	}
	for _, nc := range w.conns {
		nc.Close()
	}
}

// heardWithin is how recent a node's last heartbeat must be for cluster
// wait to count it up: a couple of its 2s heartbeats.
const heardWithin = 5 * time.Second

// nodesUp asks the nodes to heartbeat and returns those heard from, up,
// within heardWithin; it returns as soon as want are, or after a second.
func (w *Waiter) nodesUp(ctx context.Context, nc *nats.Conn, want int) ([]string, error) {
	subj := commands.Subjects{}
	if w.hbSub == nil || !w.hbSub.IsValid() {
		w.hb = make(chan *nats.Msg, 1024)
		sub, err := nc.ChanSubscribe(subj.HeartbeatAll(), w.hb)
		if err != nil {
			return nil, errcode.Wrap(errcode.Unavailable, err, "subscribe heartbeats")
		}
		w.hbSub, w.heard = sub, map[string]time.Time{}
	}
	if err := nc.Publish(subj.Announce(), nil); err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "announce")
	}
	up := func() []string {
		var ids []string
		for id, at := range w.heard {
			if time.Since(at) < heardWithin {
				ids = append(ids, id)
			}
		}
		sort.Strings(ids)
		return ids
	}
	deadline := time.NewTimer(time.Second)
	defer deadline.Stop()
	for {
		if ids := up(); len(ids) >= want {
			return ids, nil
		}
		select {
		case m := <-w.hb:
			var info events.NodeInfo
			if json.Unmarshal(m.Data, &info) == nil && m.Subject == subj.Heartbeat(info.Node) {
				if info.Status == "up" {
					w.heard[info.Node] = time.Now()
				} else {
					delete(w.heard, info.Node)
				}
			}
		case <-deadline.C:
			return up(), nil
		case <-ctx.Done():
			return up(), nil
		}
	}
}

// conn returns a connection to the one server at url.
func (w *Waiter) conn(url string) (*nats.Conn, error) {
	if nc := w.conns[url]; nc != nil && nc.IsConnected() {
		return nc, nil
	} else if nc != nil {
		nc.Close()
		delete(w.conns, url)
	}
	nc, who, err := client.Connect(client.ConnectOptions{URL: url, Creds: w.creds, TLSCA: w.tlsCA, Name: "paddock-cli",
		Extra: []nats.Option{nats.DontRandomize(), nats.NoReconnect(), nats.Timeout(2 * time.Second)}})
	if err != nil {
		return nil, err
	}
	if who != nil && (who.Role == auth.RoleClient || who.Role == auth.RoleAuditor) {
		nc.Close()
		return nil, errcode.New(errcode.PermissionDenied, "%s is a %s: cluster wait reads the streams, with the engine's or an admin's credentials", who.Name, who.Role)
	}
	w.conns[url] = nc
	return nc, nil
}

// Ready returns a summary of the deployment when it is as asked, else why
// not.
func (w *Waiter) Ready(ctx context.Context, urls []string, replicas, nodes int) (string, error) {
	var names []string
	var first *nats.Conn
	for _, url := range urls {
		nc, err := w.conn(url)
		if err != nil {
			return "", err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			return "", err
		}
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = js.AccountInfo(actx)
		cancel()
		if err != nil {
			return "", fmt.Errorf("%s (%s): JetStream does not answer: %w", url, nc.ConnectedServerName(), err)
		}
		names = append(names, nc.ConnectedServerName())
		if first == nil {
			first = nc
		}
	}
	summary := fmt.Sprintf("%d servers answer with JetStream (%s)", len(names), strings.Join(names, ", "))
	if replicas > 0 {
		js, err := jetstream.New(first)
		if err != nil {
			return "", err
		}
		streams, err := provision.StreamsOf(ctx, js)
		if err != nil {
			return "", err
		}
		for _, name := range streams {
			st, err := operator.StreamInfo(ctx, js, name)
			if err != nil {
				return "", err
			}
			if err := st.Healthy(replicas); err != nil {
				return "", err
			}
		}
		summary += fmt.Sprintf("; %d streams at %d replicas, each with a leader and current followers", len(streams), replicas)
	}
	if nodes > 0 {
		up, err := w.nodesUp(ctx, first, nodes)
		if err != nil {
			return "", err
		}
		if len(up) < nodes {
			return "", fmt.Errorf("%d nodes up (%s), want %d", len(up), strings.Join(up, ", "), nodes)
		}
		summary += fmt.Sprintf("; nodes up: %d (%s)", len(up), strings.Join(up, ", "))
	}
	return summary, nil
}

// Wait checks the servers at urls every quarter second until Ready says
// they are as asked, and returns its summary. It fails with
// permission_denied at once when the credentials may not read the
// streams, with unavailable saying what was missing when timeout passes,
// and with ctx's error, saying what the last check found missing, when
// ctx ends.
func (w *Waiter) Wait(ctx context.Context, urls []string, replicas, nodes int, timeout time.Duration) (string, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var why error // what the last check that ran whole found missing
	for {
		summary, err := w.Ready(wctx, urls, replicas, nodes)
		if err == nil {
			return summary, nil
		}
		if errcode.Of(err) == errcode.PermissionDenied {
			return "", err
		}
		if wctx.Err() == nil || why == nil {
			why = err // not a check the deadline cut short, unless it is the only one
		}
		t := time.NewTimer(250 * time.Millisecond)
		select {
		case <-wctx.Done():
			t.Stop()
			if ctx.Err() != nil {
				if why != nil {
					return "", fmt.Errorf("%w (the last check found: %v)", ctx.Err(), why)
				}
				return "", ctx.Err()
			}
			return "", errcode.New(errcode.Unavailable, "not ready within %s: %v", timeout, why)
		case <-t.C:
		}
	}
}
