package audit

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
)

// Lineage is a forked session's create whose parent point its parent's
// chain does not bear out: no ok finish of the parent recordedSnap that
// snapshot with that root by the operation that started at that seq, or
// no fork finish of the parent lists the child.
const Lineage Kind = "lineage"

// recordedSnap is a snapshot a session's chain recordedSnap (an ok finish that
// carries one): its root, and the seq of the start of the op that made it.
type recordedSnap struct {
	root     string
	startSeq uint64
}

// claim is a child's create start that names a parent.
type claim struct {
	tenant, child string
	parent        commands.Parent
	seq           uint64
	streamSeq     uint64
}

// lineage is what the checker keeps to check forks: it sees events in
// stream order, and a child's create may come before its parent's fork
// finish, so claims are settled in Report.
type lineage struct {
	snapshots map[string]map[string][]recordedSnap // session key → snapshot id → recordings
	children  map[string]map[string]bool           // session key → children its fork finishes list
	claims    []claim
	// partial: the checker sees only some sessions (SetPartial).
	partial bool
}

// SetPartial tells the checker that it sees only some sessions (engine
// audit verify --session): a forked session whose parent it has not seen
// is reported as unchecked (kind truncated), not as a failure.
func (c *Checker) SetPartial(partial bool) { c.lineage.partial = partial }

// noteLineage takes in what an event says about forks: a create start's
// parent, an ok finish's snapshot (with the start seq of its op, from
// ch.open, before the finish closes it) and a fork finish's children.
func (c *Checker) noteLineage(ch *chain, ev events.Event, streamSeq uint64) {
	l := &c.lineage
	key := ch.tenant + "\x00" + ch.id
	switch {
	case ev.Phase == events.PhaseStart && ev.Op == string(commands.OpCreate):
		d, err := events.DecodeData[events.CreateStart](ev)
		if err == nil && d.Parent != nil {
			l.claims = append(l.claims, claim{tenant: ch.tenant, child: ch.id, parent: *d.Parent, seq: ev.Seq, streamSeq: streamSeq})
		}
	case ev.Phase == events.PhaseFinish && ev.OK != nil && *ev.OK && len(ev.Data) > 0:
		var d struct {
			Snapshot *commands.Snapshot `json:"snapshot"`
			Children []string           `json:"children"`
		}
		if json.Unmarshal(ev.Data, &d) != nil {
			return
		}
		if o, ok := ch.open[ev.SpanID]; ok && o.op == ev.Op && d.Snapshot != nil && d.Snapshot.ID != "" {
			if l.snapshots == nil {
				l.snapshots = map[string]map[string][]recordedSnap{}
			}
			if l.snapshots[key] == nil {
				l.snapshots[key] = map[string][]recordedSnap{}
			}
			l.snapshots[key][d.Snapshot.ID] = append(l.snapshots[key][d.Snapshot.ID], recordedSnap{root: commands.LineageRoot(d.Snapshot), startSeq: o.seq})
		}
		if ev.Op == string(commands.OpFork) && len(d.Children) > 0 {
			if l.children == nil {
				l.children = map[string]map[string]bool{}
			}
			if l.children[key] == nil {
				l.children[key] = map[string]bool{}
			}
			for _, k := range d.Children {
				l.children[key][k] = true
			}
		}
	}
}

// lineageFindings settles every claim against its parent's chain.
func (c *Checker) lineageFindings() []Finding {
	var out []Finding
	l := &c.lineage
	for _, cl := range l.claims {
		f := Finding{Tenant: cl.tenant, Session: cl.child, Seq: cl.seq, StreamSeq: cl.streamSeq, Kind: Lineage}
		p := cl.parent
		key := cl.tenant + "\x00" + p.SessionID
		if c.sessions[key] == nil {
			switch {
			case l.partial:
				f.Kind = Truncated
				f.Detail = fmt.Sprintf("parent %s is not among the sessions audited: lineage unchecked", p.SessionID)
			case c.firstSeq > 1:
				f.Kind = Truncated
				f.Detail = fmt.Sprintf("parent %s has no events left in the stream (it starts at %d): lineage unchecked", p.SessionID, c.firstSeq)
			default:
				f.Detail = fmt.Sprintf("parent %s has no history", p.SessionID)
			}
			out = append(out, f)
			continue
		}
		recs := l.snapshots[key][p.Snapshot]
		if !slices.Contains(recs, recordedSnap{root: p.RootSHA256, startSeq: p.Seq}) {
			f.Detail = fmt.Sprintf("parent %s never recordedSnap snapshot %s with root %s by the op that started at seq %d (its chain recordedSnap %s)", p.SessionID, p.Snapshot, p.RootSHA256, p.Seq, describe(recs))
			out = append(out, f)
			continue
		}
		if !l.children[key][cl.child] {
			f.Detail = fmt.Sprintf("no fork finish of parent %s lists this child", p.SessionID)
			out = append(out, f)
		}
	}
	return out
}

func describe(recs []recordedSnap) string {
	if len(recs) == 0 {
		return "no snapshot of that id"
	}
	s := ""
	for i, r := range recs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("root %s at seq %d", r.root, r.startSeq)
	}
	return s
}
