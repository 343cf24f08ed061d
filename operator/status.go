package operator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/provision"
	"github.com/paddock-dev/paddock/storage"
)

// StreamStatus is one of Paddock's streams as `engine status` shows it.
type StreamStatus struct {
	Name      string           `json:"name"`
	Replicas  int              `json:"replicas"`
	Leader    string           `json:"leader,omitempty"`
	Followers []FollowerStatus `json:"followers,omitempty"`
	Messages  uint64           `json:"messages"`
	Bytes     uint64           `json:"bytes"`
	Missing   bool             `json:"missing,omitempty"`
	// MaxBytes is the stream's limit (0: none) and UsedPercent the share
	// of it in use; Warning says the stream is at storage.WarnPercent of
	// its limit or more, and what happens when it is full.
	MaxBytes    int64   `json:"max_bytes,omitempty"`
	UsedPercent float64 `json:"used_percent,omitempty"`
	Warning     string  `json:"warning,omitempty"`
}

// FollowerStatus is one follower of a stream.
type FollowerStatus struct {
	Name    string        `json:"name"`
	Current bool          `json:"current"`
	Offline bool          `json:"offline,omitempty"`
	Lag     uint64        `json:"lag,omitempty"`
	Active  time.Duration `json:"active_ns,omitempty"`
}

// Report is the deployment at a glance, as `engine status` prints it.
type Report struct {
	// Connected is the server the report was read from, Cluster its
	// cluster ("" for a server outside one).
	Connected string `json:"connected,omitempty"`
	Cluster   string `json:"cluster,omitempty"`
	// Servers hold the streams' replicas (see ServersOf).
	Servers    []ServerStatus     `json:"servers,omitempty"`
	Streams    []StreamStatus     `json:"streams"`
	Nodes      []events.NodeInfo  `json:"nodes"`
	Projectors []projector.Status `json:"projectors"`
	// Owners are the partitions' leases: which engine projects each
	// (absent when the engines share no partitions by lease).
	Owners []projector.Owner `json:"partition_owners,omitempty"`
	// Sessions counts every tenant's sessions by status, as the projection
	// has them (absent when it cannot be read).
	Sessions map[string]int `json:"sessions,omitempty"`
	// Unfinished are the workspace bucket's chunks no object names: puts
	// under way, and the orphans of puts whose writer was killed (absent
	// when the bucket cannot be read).
	Unfinished *UnfinishedPuts `json:"unfinished_puts,omitempty"`
}

// UnfinishedPuts sums the chunks of unfinished puts.
type UnfinishedPuts struct {
	Puts  int                  `json:"puts"`
	Bytes int64                `json:"bytes"`
	Each  []objectstore.Chunks `json:"each,omitempty"`
}

// Status gathers the deployment at a glance from js: each of Paddock's
// streams, every events partition's included (replicas, leader,
// followers, storage), the servers that hold
// them, the nodes that heartbeat within wait (asked to at once), the
// projectors' lag and the partitions' owners, the sessions by status and the unfinished puts. It
// fails with unavailable when a stream's info cannot be read or the
// heartbeats cannot be asked for; the parts after (projectors, owners, sessions,
// puts) are left out when they cannot be read.
func Status(ctx context.Context, js jetstream.JetStream, wait time.Duration) (Report, error) {
	var rep Report
	names, err := provision.StreamsOf(ctx, js)
	if err != nil {
		return rep, err
	}
	for _, name := range names {
		st, err := StreamInfo(ctx, js, name)
		if err != nil {
			return rep, err
		}
		rep.Streams = append(rep.Streams, st)
	}
	rep.Connected, rep.Cluster = js.Conn().ConnectedServerName(), js.Conn().ConnectedClusterName()
	rep.Servers = ServersOf(rep.Streams)
	if rep.Nodes, err = Heartbeats(ctx, js.Conn(), wait); err != nil {
		return rep, err
	}
	if _, sts, err := projector.ReadStatus(ctx, js, events.DefaultStream); err == nil {
		rep.Projectors = sts
	}
	if owners, err := projector.ReadOwners(ctx, js); err == nil {
		rep.Owners = owners
	}
	// Every record is read: a status of a deployment of a million sessions
	// takes a while (sandbox list --status reads one tenant's).
	if ss, err := projector.OpenSessions(ctx, js); err == nil {
		if recs, err := ss.List(ctx, ">"); err == nil {
			rep.Sessions = map[string]int{}
			for _, r := range recs {
				rep.Sessions[string(r.Status)]++
			}
		}
	}
	if store, err := objectstore.Open(ctx, js, ""); err == nil {
		if cs, err := store.UnnamedChunks(ctx); err == nil {
			rep.Unfinished = &UnfinishedPuts{Puts: len(cs), Each: cs}
			for _, c := range cs {
				rep.Unfinished.Bytes += c.Bytes
			}
		}
	}
	return rep, nil
}

// StreamInfo returns one stream's status; a stream that does not exist
// is Missing. It fails with unavailable when the stream's info cannot be
// read within 5 seconds.
func StreamInfo(ctx context.Context, js jetstream.JetStream, name string) (StreamStatus, error) {
	st := StreamStatus{Name: name}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := js.Stream(sctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st.Missing = true
		return st, nil
	}
	if err != nil {
		return st, errcode.Wrap(errcode.Unavailable, err, "stream "+name)
	}
	info := s.CachedInfo()
	st.Replicas, st.Messages, st.Bytes = info.Config.Replicas, info.State.Msgs, info.State.Bytes
	storageStatus(&st, storage.UsageOf(info))
	if c := info.Cluster; c != nil {
		st.Leader = c.Leader
		for _, r := range c.Replicas {
			st.Followers = append(st.Followers, FollowerStatus{Name: r.Name, Current: r.Current, Offline: r.Offline, Lag: r.Lag, Active: r.Active})
		}
	}
	return st, nil
}

// storageStatus fills in a stream's limit, the share of it in use and a
// warning at storage.WarnPercent or more.
func storageStatus(st *StreamStatus, u storage.Usage) {
	if u.MaxBytes <= 0 {
		return
	}
	st.MaxBytes = u.MaxBytes
	st.UsedPercent = math.Round(u.Percent()*10) / 10
	if u.Warn() {
		st.Warning = fmt.Sprintf("%.1f%% of its limit in use (warning at %d%%): when it is full %s", u.Percent(), storage.WarnPercent, atFull(st.Name, u))
	}
}

// atFull says what happens when a stream of Paddock's is full.
func atFull(name string, u storage.Usage) string {
	switch {
	case u.DropsOldest:
		return "its oldest messages are dropped"
	case name == events.DefaultStream:
		return "no operation can be recorded (raise --events-max-bytes)"
	case name == objectstore.StreamName(objectstore.DefaultBucket):
		return "persists and transfers fail (engine snapshot rm frees space; or raise --objects-max-bytes)"
	}
	return "the projector stalls (raise --kv-max-bytes)"
}

// Healthy says why the stream is not at n replicas with a leader and
// every follower current, or nil when it is.
func (s StreamStatus) Healthy(n int) error {
	current := 0
	for _, f := range s.Followers {
		if f.Current && !f.Offline {
			current++
		}
	}
	switch {
	case s.Missing:
		return fmt.Errorf("stream %s does not exist yet", s.Name)
	case s.Replicas != n:
		return fmt.Errorf("stream %s has %d replicas, want %d", s.Name, s.Replicas, n)
	case n > 1 && s.Leader == "":
		return fmt.Errorf("stream %s has no leader", s.Name)
	case current != n-1:
		return fmt.Errorf("stream %s: %d of %d followers current", s.Name, current, n-1)
	}
	return nil
}

// ServersOf returns the servers that hold a replica of the streams, by
// name, with the streams each leads; a server that a stream's leader
// reports offline is marked so.
func ServersOf(streams []StreamStatus) []ServerStatus {
	byName := map[string]*ServerStatus{}
	get := func(name string) *ServerStatus {
		if byName[name] == nil {
			byName[name] = &ServerStatus{Name: name}
		}
		return byName[name]
	}
	for _, s := range streams {
		if s.Leader != "" {
			l := get(s.Leader)
			l.Leads = append(l.Leads, s.Name)
		}
		for _, f := range s.Followers {
			srv := get(f.Name)
			srv.Offline = srv.Offline || f.Offline
		}
	}
	out := make([]ServerStatus, 0, len(byName))
	for _, s := range byName {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ServerStatus is one server of the cluster as `engine status` shows it.
type ServerStatus struct {
	Name string `json:"name"`
	// Leads are the streams whose leader it is.
	Leads []string `json:"leads,omitempty"`
	// Offline is true when a stream's leader reports it offline.
	Offline bool `json:"offline,omitempty"`
}
