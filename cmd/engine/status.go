package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/operator"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/provision"
	"github.com/paddock-dev/paddock/retention"
	"github.com/paddock-dev/paddock/storage"
)

// streamStatus is one of Paddock's streams as `engine status` shows it.
type streamStatus struct {
	Name      string           `json:"name"`
	Replicas  int              `json:"replicas"`
	Leader    string           `json:"leader,omitempty"`
	Followers []followerStatus `json:"followers,omitempty"`
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

type followerStatus struct {
	Name    string        `json:"name"`
	Current bool          `json:"current"`
	Offline bool          `json:"offline,omitempty"`
	Lag     uint64        `json:"lag,omitempty"`
	Active  time.Duration `json:"active_ns,omitempty"`
}

// statusReport is what `engine status` prints.
type statusReport struct {
	// Connected is the server the report was read from, Cluster its
	// cluster ("" for a server outside one).
	Connected string `json:"connected,omitempty"`
	Cluster   string `json:"cluster,omitempty"`
	// Servers hold the streams' replicas (see serversOf).
	Servers    []serverStatus     `json:"servers,omitempty"`
	Streams    []streamStatus     `json:"streams"`
	Nodes      []nodes.Info       `json:"nodes"`
	Projectors []projector.Status `json:"projectors"`
	// Sessions counts every tenant's sessions by status, as the projection
	// has them (absent when it cannot be read).
	Sessions map[string]int `json:"sessions,omitempty"`
	// Unfinished are the workspace bucket's chunks no object names: puts
	// under way, and the orphans of puts whose writer was killed (absent
	// when the bucket cannot be read).
	Unfinished *unfinishedPuts `json:"unfinished_puts,omitempty"`
}

// unfinishedPuts sums the chunks of unfinished puts.
type unfinishedPuts struct {
	Puts  int                  `json:"puts"`
	Bytes int64                `json:"bytes"`
	Each  []objectstore.Chunks `json:"each,omitempty"`
}

// statusCmd is `engine status`: the deployment at a glance: each stream's
// replicas, leader and followers, the nodes that answer (asked to
// heartbeat at once), and the projectors' lag.
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
	var rep statusReport
	for _, name := range provision.Streams() {
		st, err := streamInfo(ctx, js, name)
		if err != nil {
			return err
		}
		rep.Streams = append(rep.Streams, st)
	}
	rep.Connected, rep.Cluster = js.Conn().ConnectedServerName(), js.Conn().ConnectedClusterName()
	rep.Servers = serversOf(rep.Streams)
	if rep.Nodes, err = operator.Heartbeats(ctx, js.Conn(), *wait); err != nil {
		return err
	}
	if _, sts, err := projector.ReadStatus(ctx, js, events.DefaultStream); err == nil {
		rep.Projectors = sts
	}
	// Every record is read: a status of a deployment of a million sessions
	// takes a while (sandbox list --status reads one tenant's).
	if recs, err := retention.ProjectedSessions(js)(ctx); err == nil {
		rep.Sessions = map[string]int{}
		for _, r := range recs {
			rep.Sessions[string(r.Status)]++
		}
	}
	if store, err := objectstore.Open(ctx, js, ""); err == nil {
		if cs, err := store.UnnamedChunks(ctx); err == nil {
			rep.Unfinished = &unfinishedPuts{Puts: len(cs), Each: cs}
			for _, c := range cs {
				rep.Unfinished.Bytes += c.Bytes
			}
		}
	}
	if *jsonOut {
		return printJSON(stdout, rep)
	}
	return printStatus(stdout, rep)
}

func streamInfo(ctx context.Context, js jetstream.JetStream, name string) (streamStatus, error) {
	st := streamStatus{Name: name}
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
			st.Followers = append(st.Followers, followerStatus{Name: r.Name, Current: r.Current, Offline: r.Offline, Lag: r.Lag, Active: r.Active})
		}
	}
	return st, nil
}

func printStatus(w io.Writer, rep statusReport) error {
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
	return tw.Flush()
}

// storageStatus fills in a stream's limit, the share of it in use and a
// warning at storage.WarnPercent or more.
func storageStatus(st *streamStatus, u storage.Usage) {
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

// printStorage prints each stream's bytes against its limit.
func printStorage(tw io.Writer, streams []streamStatus) {
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
