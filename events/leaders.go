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
// that hold their replicas, so that the numbers of streams the servers
// lead differ by one at most where the replicas allow it (4 streams on 3
// servers: 2, 1, 1): it plans the fewest moves, each stream's lead to an
// online peer leading fewer, steps those leaders down in favour of the
// peer planned, and waits for each new leader; up to three rounds, since
// the server may hand a lead to another peer than the one asked. It returns the moves made (none for a
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
// while some stream's leader leads at least two more streams than
// another server of that stream's group, that stream's lead goes to the
// server leading the fewest. It ends with the leaders' counts within one
// of each other where the groups' peers allow it (4 streams on 3 servers:
// 2, 1, 1), moving as few leaders as it takes.
func planSpread(ctx context.Context, js jetstream.JetStream, streams []string) ([]LeaderMove, error) {
	type group struct {
		stream, leader, lead string   // lead: the leader planned
		servers              []string // the online servers of the group
	}
	var groups []*group
	led := map[string]int{}
	for _, name := range streams {
		info, err := streamInfo(ctx, js, name)
		if err != nil {
			return nil, err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) == 0 {
			continue // not replicated, or no leader to move
		}
		g := &group{stream: name, leader: info.Cluster.Leader, lead: info.Cluster.Leader, servers: []string{info.Cluster.Leader}}
		for _, r := range info.Cluster.Replicas {
			if _, ok := led[r.Name]; !ok {
				led[r.Name] = 0 // a server leading none counts
			}
			if !r.Offline { // a peer still catching up may lead: the server judges its health
				g.servers = append(g.servers, r.Name)
			}
		}
		led[g.leader]++
		groups = append(groups, g)
	}
	// Each move lowers the sum of the squared counts, so this ends; the
	// bound is a guard.
	for range len(groups) * len(led) {
		var best *group
		to, gain := "", 1
		for _, g := range groups {
			for _, p := range g.servers {
				if d := led[g.lead] - led[p]; d > gain {
					best, to, gain = g, p, d
				}
			}
		}
		if best == nil {
			break
		}
		led[best.lead]--
		led[to]++
		best.lead = to
	}
	var plan []LeaderMove
	for _, g := range groups {
		if g.lead != g.leader {
			plan = append(plan, LeaderMove{Stream: g.stream, From: g.leader, To: g.lead})
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
