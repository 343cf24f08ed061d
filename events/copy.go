package events

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/errcode"
)

// CopyStats counts what Copy copied.
type CopyStats struct {
	// Sessions and SessionEvents count the session events copied and the
	// sessions they belong to; NodeEvents the node events.
	Sessions, SessionEvents, NodeEvents int
}

// Copy re-appends every event of from, in from's order, to the log to,
// whose streams must exist and be empty: the step of a repartition that
// moves a deployment's history onto a new layout (docs/scale.md). Each
// event keeps its stored bytes and its signature headers (Log.AppendRaw
// would sign again with the copier's key), so the hash chains and the
// signatures verify on the new layout; a session's events go, in order,
// to the partition PartitionOf names under to's partitions, each guarded
// as a node's append is (the session's last stream sequence there), with
// the event id as message id. Node events go to to's partition 0. The
// stream sequences change, so the projection built from from does not
// fit to: the new deployment's projectors rebuild it.
//
// It fails with invalid_state when a stream of to holds an event (a copy
// that failed midway: delete to's streams and copy again), and with the
// publish's error otherwise; from is only read.
func Copy(ctx context.Context, from, to *Log) (CopyStats, error) {
	var st CopyStats
	from, err := from.resolved(ctx)
	if err != nil {
		return st, err
	}
	to, err = to.resolved(ctx)
	if err != nil {
		return st, err
	}
	for _, name := range to.Streams() {
		s, err := to.js.Stream(ctx, name)
		if err != nil {
			return st, errcode.Wrap(errcode.Unavailable, err, "copy: destination stream "+name)
		}
		if n := s.CachedInfo().State.Msgs; n > 0 {
			return st, errcode.New(errcode.InvalidState, "copy: destination stream %s holds %d events: a copy goes into empty streams (delete them and copy again)", name, n)
		}
	}
	last := map[[2]string]uint64{} // tenant, session -> stream seq of its last copied event
	fs, ts := from.Subjects(), to.Subjects()
	err = from.Read(ctx, ReadOptions{Filters: []string{fs.AllSessions(), fs.AllNodes()}}, func(m Msg) error {
		ref, ok := fs.Parse(m.Subject)
		if !ok {
			return errcode.New(errcode.InvalidState, "copy: stream %s seq %d: subject %q is no event's", m.Stream, m.StreamSeq, m.Subject)
		}
		msg := &nats.Msg{Data: m.Data, Header: nats.Header{}}
		if m.Signer != "" || m.Sig != "" {
			msg.Header.Set(SignerHeader, m.Signer)
			msg.Header.Set(SigHeader, m.Sig)
		}
		if !ref.IsSession() {
			msg.Subject = ts.Node(ref.Node, ref.Kind)
			if _, err := to.js.PublishMsg(ctx, msg); err != nil {
				return fmt.Errorf("copy: node event at %s seq %d: %w", m.Stream, m.StreamSeq, err)
			}
			st.NodeEvents++
			return nil
		}
		var id struct {
			EventID string `json:"event_id"`
		}
		if err := json.Unmarshal(m.Data, &id); err != nil || id.EventID == "" {
			return errcode.New(errcode.InvalidState, "copy: stream %s seq %d: an event without an id", m.Stream, m.StreamSeq)
		}
		key := [2]string{ref.Tenant, ref.Session}
		prev, seen := last[key]
		msg.Subject = ts.Session(ref.Tenant, ref.Session, ref.Op, ref.Phase)
		ack, err := to.js.PublishMsg(ctx, msg, jetstream.WithMsgID(id.EventID),
			jetstream.WithExpectLastSequenceForSubject(prev, ts.SessionFilter(ref.Tenant, ref.Session)))
		if err != nil {
			return fmt.Errorf("copy: session %s/%s at %s seq %d: %w", ref.Tenant, ref.Session, m.Stream, m.StreamSeq, err)
		}
		last[key] = ack.Sequence
		if !seen {
			st.Sessions++
		}
		st.SessionEvents++
		return nil
	})
	return st, err
}
