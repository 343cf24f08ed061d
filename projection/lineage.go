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
	p := commands.Parent{SessionID: session, Seq: r.StartSeq, Snapshot: r.Snapshot.ID, RootSHA256: commands.LineageRoot(&r.Snapshot)}
	if r.Snapshot.IsMemory() {
		p.Memory = r.Snapshot.Memory
	}
	return p
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

// TreeNode is one session of a lineage tree: where it came from (nil for
// the root) and the sessions forked from it. Missing is set for a child
// a fork named that has no history (it never came up).
type TreeNode struct {
	SessionID string           `json:"session_id"`
	Status    Status           `json:"status,omitempty"`
	Parent    *commands.Parent `json:"parent,omitempty"`
	Missing   bool             `json:"missing,omitempty"`
	Children  []TreeNode       `json:"children,omitempty"`
}

// maxTreeDepth bounds a lineage tree (a cycle cannot happen in honest
// histories, but a fold of forged ones must still end).
const maxTreeDepth = 1000

// Tree returns the lineage tree of session id's family, from its root
// ancestor, as the sessions of one tenant (by session id) record it.
// ok is false when sessions has no id.
func Tree(sessions map[string]Session, id string) (TreeNode, bool) {
	s, ok := sessions[id]
	if !ok {
		return TreeNode{}, false
	}
	seen := map[string]bool{id: true}
	for s.Parent != nil {
		p, ok := sessions[s.Parent.SessionID]
		if !ok || seen[p.ID] {
			break
		}
		seen[p.ID] = true
		s = p
	}
	return subtree(sessions, s.ID, map[string]bool{}, 0), true
}

func subtree(sessions map[string]Session, id string, done map[string]bool, depth int) TreeNode {
	s, ok := sessions[id]
	n := TreeNode{SessionID: id, Missing: !ok}
	if !ok {
		return n
	}
	n.Status, n.Parent = s.Status, s.Parent
	done[id] = true
	if depth >= maxTreeDepth {
		return n
	}
	for _, c := range s.Children {
		if done[c] {
			continue
		}
		n.Children = append(n.Children, subtree(sessions, c, done, depth+1))
	}
	return n
}
