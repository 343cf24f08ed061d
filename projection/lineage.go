package projection

import (
	"encoding/json"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
)

// Recorded is a snapshot a session's chain recorded: in the data of an
// ok finish (persist, stop, shutdown, fork), with the seq of that
// operation's start (the point the snapshot is of) and of its finish (when
// the chain recorded it).
type Recorded struct {
	Snapshot  commands.Snapshot
	Op        string
	StartSeq  uint64
	FinishSeq uint64
}

// Point is the lineage point a child of this snapshot records.
func (r Recorded) Point(session string) commands.Parent {
	return commands.Parent{SessionID: session, Seq: r.StartSeq, Snapshot: r.Snapshot.ID, RootSHA256: commands.LineageRoot(&r.Snapshot)}
}

// RecordedSnapshots returns the snapshots one session's events (in seq
// order) recorded, oldest first. A finish whose start is missing counts
// with its snapshot's own Seq as the start.
func RecordedSnapshots(evs []events.Event) []Recorded {
	starts := map[string]uint64{} // span → start seq
	var out []Recorded
	for _, ev := range evs {
		if ev.Phase == events.PhaseStart {
			starts[ev.SpanID] = ev.Seq
			continue
		}
		if ev.OK == nil || !*ev.OK || len(ev.Data) == 0 {
			continue
		}
		var d struct {
			Snapshot *commands.Snapshot `json:"snapshot"`
		}
		if json.Unmarshal(ev.Data, &d) != nil || d.Snapshot == nil || d.Snapshot.ID == "" {
			continue
		}
		start, ok := starts[ev.SpanID]
		if !ok {
			start = d.Snapshot.Seq
		}
		out = append(out, Recorded{Snapshot: *d.Snapshot, Op: ev.Op, StartSeq: start, FinishSeq: ev.Seq})
	}
	return out
}
