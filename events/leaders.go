package events

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/errcode"
)

// The meta layer places each partition's Raft group and its first leader
// by its own rules, which do not spread the leaders of one deployment's
// partitions: measured here, four partitions on three servers got three
// leaders on one server, whose CPU then carried three quarters of the
// appends. SpreadLeaders moves leaders with a stream leader stepdown that
// names a preferred server among the group's peers (nats-server 2.11+:
// $JS.API.STREAM.LEADER.STEPDOWN.<stream> with {"placement":{"preferred":
// <server>}}); a stream's placement cannot name a preferred server at
// creation (the server refuses it).

// LeaderMove is one leader SpreadLeaders moved.
type LeaderMove struct {
	// Stream is the stream whose leader moved.
	Stream string `json:"stream"`
	// From and To are the servers that led it before and lead it after.
	From string `json:"from"`
	To   string `json:"to"`
}

// spreadWait bounds how long SpreadLeaders waits for one stream's new
// leader after a stepdown.
const spreadWait = 15 * time.Second

// SpreadLeaders spreads the leaders of the log's streams over the servers
// that hold their replicas, so that no server leads more than
// ceil(streams/servers) of them where the replicas allow it: it keeps the
// leaders already within that share (in stream order) and steps the others
// down, each in favour of its least-loaded online peer, waiting for the
// new leader; up to three rounds, since the server may hand a lead to
// another peer than the one asked. It returns the moves made (none for a
// log of one stream, an R1 deployment or a single server). A stepdown
// refused or a leader not elected in time is an unavailable error; the
// moves made before it stand.
func (l *Log) SpreadLeaders(ctx context.Context) ([]LeaderMove, error) {
	l, err := l.resolved(ctx)
	if err != nil {
		return nil, err
	}
	return SpreadLeaders(ctx, l.js, l.Streams())
}

// spreadRounds bounds SpreadLeaders' rounds: a stepdown may hand the lead
// to another peer than the one asked (the server prefers a healthy one),
// and the next round plans again from where the leaders are.
const spreadRounds = 3

// SpreadLeaders spreads the leaders of the named streams over their
// servers (see Log.SpreadLeaders).
func SpreadLeaders(ctx context.Context, js jetstream.JetStream, streams []string) ([]LeaderMove, error) {
	if len(streams) < 2 {
		return nil, nil
	}
	var moves []LeaderMove
	for range spreadRounds {
		plan, err := planSpread(ctx, js, streams)
		if err != nil || len(plan) == 0 {
			return moves, err
		}
		for _, m := range plan {
			to, err := MoveLeader(ctx, js, m.Stream, m.To)
			if err != nil {
				return moves, err
			}
			moves = append(moves, LeaderMove{Stream: m.Stream, From: m.From, To: to})
		}
	}
	return moves, nil
}

// planSpread is the leader moves that would spread the streams' leaders:
// each server keeps the leaders within its share (in stream order), and
// each other stream goes to its peer that leads the fewest, when that is
// fewer than its own server.
func planSpread(ctx context.Context, js jetstream.JetStream, streams []string) ([]LeaderMove, error) {
	type group struct {
		stream, leader string
		peers          []string // the other servers that could lead it
	}
	groups := make([]group, 0, len(streams))
	servers := map[string]bool{}
	for _, name := range streams {
		info, err := streamInfo(ctx, js, name)
		if err != nil {
			return nil, err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) == 0 {
			continue // not replicated, or no leader to move
		}
		g := group{stream: name, leader: info.Cluster.Leader}
		servers[g.leader] = true
		for _, r := range info.Cluster.Replicas {
			servers[r.Name] = true
			if !r.Offline { // a peer still catching up may lead: the server judges its health
				g.peers = append(g.peers, r.Name)
			}
		}
		groups = append(groups, g)
	}
	if len(groups) < 2 || len(servers) < 2 {
		return nil, nil
	}
	share := (len(groups) + len(servers) - 1) / len(servers)
	led := map[string]int{}
	var over []group
	for _, g := range groups {
		if led[g.leader] < share {
			led[g.leader]++
			continue
		}
		over = append(over, g)
	}
	var plan []LeaderMove
	for _, g := range over {
		to := g.leader
		for _, p := range g.peers {
			if led[p] < led[to] {
				to = p
			}
		}
		led[to]++
		if to != g.leader {
			plan = append(plan, LeaderMove{Stream: g.stream, From: g.leader, To: to})
		}
	}
	return plan, nil
}

// streamInfo is the named stream's info, fresh from the server.
func streamInfo(ctx context.Context, js jetstream.JetStream, name string) (*jetstream.StreamInfo, error) {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "stream "+name)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "stream info "+name)
	}
	return info, nil
}

// stepDownRequest is the body of a stream leader stepdown naming the
// server that should lead next.
type stepDownRequest struct {
	Placement struct {
		Preferred string `json:"preferred"`
	} `json:"placement"`
}

// stepDownResponse is the server's answer to a stepdown.
type stepDownResponse struct {
	Success bool `json:"success"`
	Error   *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
}

// MoveLeader asks the leader of stream to step down in favour of server
// to, one of its peers, and waits (within 15 s) until a new leader is
// elected. It returns the server that leads then: to, or another peer
// when the server judged to not healthy enough to lead. Its error is
// unavailable when the server refuses (to is no peer of the stream, or
// already leads it: JetStream error 10005) or no new leader is elected in
// time.
func MoveLeader(ctx context.Context, js jetstream.JetStream, stream, to string) (string, error) {
	wctx, cancel := context.WithTimeout(ctx, spreadWait)
	defer cancel()
	before, err := streamInfo(wctx, js, stream)
	if err != nil {
		return "", err
	}
	from := ""
	if before.Cluster != nil {
		from = before.Cluster.Leader
	}
	var req stepDownRequest
	req.Placement.Preferred = to
	body, err := json.Marshal(req)
	if err != nil {
		return "", fmt.Errorf("stepdown request: %w", err)
	}
	msg, err := js.Conn().RequestWithContext(wctx, apiPrefix(js)+"STREAM.LEADER.STEPDOWN."+stream, body)
	if err != nil {
		return "", errcode.Wrap(errcode.Unavailable, err, "leader stepdown of "+stream)
	}
	var resp stepDownResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return "", errcode.Wrap(errcode.Unavailable, err, "leader stepdown of "+stream+": bad answer")
	}
	if resp.Error != nil || !resp.Success {
		desc := "not done"
		if resp.Error != nil {
			desc = fmt.Sprintf("%s (%d)", resp.Error.Description, resp.Error.ErrCode)
		}
		return "", errcode.New(errcode.Unavailable, "leader stepdown of %s to %s: %s", stream, to, desc)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := streamInfo(wctx, js, stream)
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" && info.Cluster.Leader != from {
			return info.Cluster.Leader, nil
		}
		select {
		case <-wctx.Done():
			return "", errcode.New(errcode.Unavailable, "leader stepdown of %s: no new leader within %s", stream, spreadWait)
		case <-tick.C:
		}
	}
}

// apiPrefix is the prefix of js's JetStream API subjects, ending in a dot.
func apiPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		if !strings.HasSuffix(o.APIPrefix, ".") {
			return o.APIPrefix + "."
		}
		return o.APIPrefix
	}
	return jetstream.DefaultAPIPrefix
}

// Leaders names the server leading each of the log's streams, in the
// order of Streams ("" for a stream with no leader, or not replicated).
// Its error is unavailable when a stream cannot be read.
func (l *Log) Leaders(ctx context.Context) ([]string, error) {
	l, err := l.resolved(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, l.Partitions())
	for _, name := range l.Streams() {
		info, err := streamInfo(ctx, l.js, name)
		if err != nil {
			return nil, err
		}
		leader := ""
		if info.Cluster != nil {
			leader = info.Cluster.Leader
		}
		out = append(out, leader)
	}
	return out, nil
}
