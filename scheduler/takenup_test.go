package scheduler

import (
	"testing"
	"time"

	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
)

// TestTakenUp: a loss is not recorded over a take-over in progress. The
// race it holds down was met on CI: node-b's placed resume had written its
// start when an engine declared node-a lost, closed that resume as if
// node-a had left it open, and fenced node-b out of the resume that was
// bringing the session back.
func TestTakenUp(t *testing.T) {
	ok := true
	ev := func(seq uint64, node, op string, phase events.Phase, span string) events.Event {
		e := events.Event{Version: events.Version, Tenant: "t", SessionID: "s", Seq: seq, Node: node, Op: op, Phase: phase, SpanID: span, TS: time.Unix(int64(seq), 0)}
		if phase == events.PhaseFinish {
			e.OK = &ok
		}
		return e
	}
	base := []events.Event{
		ev(1, "node-a", "create", events.PhaseStart, "c"),
		ev(2, "node-a", "create", events.PhaseFinish, "c"),
	}
	cases := []struct {
		name string
		more []events.Event
		want string
	}{
		{"nothing open", nil, ""},
		{"the lost node's exec open", []events.Event{ev(3, "node-a", "exec", events.PhaseStart, "x")}, ""},
		{"another node's resume open", []events.Event{ev(3, "node-b", "resume", events.PhaseStart, "r")}, "node-b"},
		{"the lost node's exec and another's resume open", []events.Event{
			ev(3, "node-a", "exec", events.PhaseStart, "x"),
			ev(4, "node-b", "resume", events.PhaseStart, "r"),
		}, "node-b"},
		{"another node's resume ended", []events.Event{
			ev(3, "node-b", "resume", events.PhaseStart, "r"),
			ev(4, "node-b", "resume", events.PhaseFinish, "r"),
		}, ""},
	}
	for _, c := range cases {
		evs := append(append([]events.Event(nil), base...), c.more...)
		st, err := projection.Fold(evs)
		if err != nil {
			t.Fatalf("%s: fold: %v", c.name, err)
		}
		if got := takenUp(evs, st, "node-a"); got != c.want {
			t.Errorf("%s: takenUp = %q, want %q", c.name, got, c.want)
		}
	}
}
