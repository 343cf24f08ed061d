package projection

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
)

func lineageEvents(t *testing.T, id string, parent *commands.Parent, forks ...[]string) []events.Event {
	t.Helper()
	ok, notOK := true, false
	data := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	evs := []events.Event{
		{Tenant: "t", SessionID: id, Seq: 1, Op: "create", Phase: events.PhaseStart, SpanID: "c", Data: data(events.CreateStart{Runtime: "local", Parent: parent})},
		{Tenant: "t", SessionID: id, Seq: 2, Op: "create", Phase: events.PhaseFinish, SpanID: "c", OK: &ok},
	}
	for i, kids := range forks {
		seq := uint64(len(evs) + 1)
		span := string(rune('f' + i))
		snap := &commands.Snapshot{ID: "s" + span, Name: "n", RootSHA256: "r" + span, Seq: seq}
		evs = append(evs,
			events.Event{Tenant: "t", SessionID: id, Seq: seq, Op: "fork", Phase: events.PhaseStart, SpanID: span, Data: data(events.ForkStart{Children: kids})},
			events.Event{Tenant: "t", SessionID: id, Seq: seq + 1, Op: "fork", Phase: events.PhaseFinish, SpanID: span, OK: &ok,
				Data: data(events.ForkFinish{Children: kids, Snapshot: snap, Parent: commands.Parent{SessionID: id, Seq: seq, Snapshot: snap.ID, RootSHA256: snap.RootSHA256}})})
	}
	// A failed fork lists children that must not count.
	seq := uint64(len(evs) + 1)
	evs = append(evs,
		events.Event{Tenant: "t", SessionID: id, Seq: seq, Op: "fork", Phase: events.PhaseStart, SpanID: "z", Data: data(events.ForkStart{Children: []string{"never"}})},
		events.Event{Tenant: "t", SessionID: id, Seq: seq + 1, Op: "fork", Phase: events.PhaseFinish, SpanID: "z", OK: &notOK, ErrorCode: "unavailable"})
	return evs
}

// TestLineageFold: Apply folds a session's parent (its create start) and
// children (its ok fork finishes, once each); the recorded snapshots and
// the tree follow from them.
func TestLineageFold(t *testing.T) {
	root := lineageEvents(t, "root", nil, []string{"a", "b"}, []string{"b", "c"})
	s, err := Fold(root)
	if err != nil {
		t.Fatal(err)
	}
	if s.Parent != nil || !slices.Equal(s.Children, []string{"a", "b", "c"}) || s.Status != StatusRunning {
		t.Fatalf("root: parent %v, children %v, status %s; want none, [a b c], running", s.Parent, s.Children, s.Status)
	}
	if s.LastSnapshot == nil || s.LastSnapshot.ID != "sg" {
		t.Fatalf("root's last snapshot %+v, want the second fork's", s.LastSnapshot)
	}
	rec := RecordedSnapshots(root)
	if len(rec) != 2 || rec[0].Point("root") != (commands.Parent{SessionID: "root", Seq: 3, Snapshot: "sf", RootSHA256: "rf"}) || rec[1].FinishSeq != 6 {
		t.Fatalf("recorded %+v", rec)
	}
	pa := rec[0].Point("root")
	a, err := Fold(lineageEvents(t, "a", &pa, []string{"a1"}))
	if err != nil || a.Parent == nil || *a.Parent != pa {
		t.Fatalf("child a: parent %v (%v), want %v", a.Parent, err, pa)
	}
	sessions := map[string]Session{"root": s, "a": a}
	tree, ok := Tree(sessions, "a")
	if !ok || tree.SessionID != "root" || len(tree.Children) != 3 || tree.Children[0].SessionID != "a" ||
		len(tree.Children[0].Children) != 1 || !tree.Children[0].Children[0].Missing || !tree.Children[1].Missing {
		t.Fatalf("tree from a: %+v", tree)
	}
	if _, ok := Tree(sessions, "nope"); ok {
		t.Fatal("a tree of an unknown session")
	}
	// A forged cycle (a claims to be its own grandparent) still ends.
	a.Children = append(a.Children, "root")
	s.Parent = &commands.Parent{SessionID: "a"}
	sessions["a"], sessions["root"] = a, s
	if tree, ok := Tree(sessions, "root"); !ok || tree.SessionID != "a" || len(tree.Children) != 2 || len(tree.Children[1].Children) != 2 {
		t.Fatalf("tree of a cycle: %+v", tree)
	}
}
