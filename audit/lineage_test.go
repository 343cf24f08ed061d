package audit

import (
	"encoding/json"
	"testing"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
)

// lineageStream is a parent p whose fork (start seq 2) persisted snapshot
// "snap" with root R and listed child c1, and the child's create start,
// with the child's create placed where the caller says among them.
func lineageStream(t *testing.T, childAt int, parent commands.Parent, finishOK bool, children []string) [][]byte {
	t.Helper()
	ok := finishOK
	enc := func(ev events.Event, data any) []byte {
		if data != nil {
			ev.Data, _ = json.Marshal(data)
		}
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	base := events.Event{Version: events.Version, Tenant: "t", SessionID: "p", Node: "n"}
	ev := func(seq uint64, op string, ph events.Phase, span string, okp *bool) events.Event {
		e := base
		e.Seq, e.Op, e.Phase, e.SpanID, e.OK = seq, op, ph, span, okp
		return e
	}
	snap := &commands.Snapshot{ID: "snap", SHA256: "tarsum", RootSHA256: "R", Seq: 2}
	lines := [][]byte{
		enc(ev(1, "create", events.PhaseStart, "a", nil), events.CreateStart{Runtime: "local"}),
		enc(ev(2, "fork", events.PhaseStart, "b", nil), events.ForkStart{Children: children}),
		enc(ev(3, "fork", events.PhaseFinish, "b", &ok), events.ForkFinish{Children: children, Snapshot: snap, Parent: commands.Parent{SessionID: "p", Seq: 2, Snapshot: "snap", RootSHA256: "R"}}),
	}
	child := events.Event{Version: events.Version, Tenant: "t", SessionID: "c1", Node: "n", Seq: 1, Op: "create", Phase: events.PhaseStart, SpanID: "x"}
	c := enc(child, events.CreateStart{Runtime: "local", Parent: &parent})
	return append(lines[:childAt], append([][]byte{c}, lines[childAt:]...)...)
}

// TestLineage: a child's parent point is checked against the parent's
// chain, whatever order the stream has them in.
func TestLineage(t *testing.T) {
	honest := commands.Parent{SessionID: "p", Seq: 2, Snapshot: "snap", RootSHA256: "R"}
	with := func(f func(p *commands.Parent)) commands.Parent { p := honest; f(&p); return p }
	for _, tc := range []struct {
		name     string
		childAt  int
		parent   commands.Parent
		finishOK bool
		children []string
		partial  bool
		want     Kind // "" none
	}{
		{"honest", 3, honest, true, []string{"c1"}, false, ""},
		{"child before the fork finish", 2, honest, true, []string{"c1"}, false, ""},
		{"forged root", 3, with(func(p *commands.Parent) { p.RootSHA256 = "forged" }), true, []string{"c1"}, false, Lineage},
		{"tar sum is not the root of a manifest snapshot", 3, with(func(p *commands.Parent) { p.RootSHA256 = "tarsum" }), true, []string{"c1"}, false, Lineage},
		{"wrong seq", 3, with(func(p *commands.Parent) { p.Seq = 1 }), true, []string{"c1"}, false, Lineage},
		{"unknown snapshot", 3, with(func(p *commands.Parent) { p.Snapshot = "other" }), true, []string{"c1"}, false, Lineage},
		{"failed fork", 3, honest, false, []string{"c1"}, false, Lineage},
		{"child not listed", 3, honest, true, []string{"c2"}, false, Lineage},
		{"no such parent", 3, with(func(p *commands.Parent) { p.SessionID = "ghost" }), true, []string{"c1"}, false, Lineage},
		{"no such parent, one session audited", 3, with(func(p *commands.Parent) { p.SessionID = "ghost" }), true, []string{"c1"}, true, Truncated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := lineageStream(t, tc.childAt, tc.parent, tc.finishOK, tc.children)
			c := NewChecker(events.Subjects{}, 1)
			c.SetPartial(tc.partial)
			for i, l := range lines {
				var ev events.Event
				_ = json.Unmarshal(l, &ev)
				c.Check(events.Msg{StreamSeq: uint64(i + 1), Subject: events.Subjects{}.Session(ev.Tenant, ev.SessionID, ev.Op, ev.Phase), Data: l})
			}
			var got []Finding
			for _, f := range c.Report().Findings {
				if f.Session == "c1" && (f.Kind == Lineage || f.Kind == Truncated) {
					got = append(got, f)
				}
			}
			switch {
			case tc.want == "" && len(got) > 0:
				t.Fatalf("got %v, want no lineage finding", got)
			case tc.want != "" && (len(got) != 1 || got[0].Kind != tc.want || got[0].Seq != 1):
				t.Fatalf("got %v, want one %s finding on c1 seq 1", got, tc.want)
			}
		})
	}
}
