package projection

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/events"
)

type history struct {
	evs []events.Event
	n   int
}

func (h *history) op(op string, ok bool) *history {
	h.n++
	span := op + string(rune('a'+h.n))
	ts := time.Unix(int64(len(h.evs)), 0).UTC()
	start := events.Event{Version: events.Version, Tenant: "t", SessionID: "s", Seq: uint64(len(h.evs) + 1), Op: op, Phase: events.PhaseStart, SpanID: span, Node: "n1", TS: ts}
	if op == "create" {
		start.Data = json.RawMessage(`{"runtime":"local","epoch":1}`)
	}
	fin := events.Event{Version: events.Version, Tenant: "t", SessionID: "s", Seq: uint64(len(h.evs) + 2), Op: op, Phase: events.PhaseFinish, SpanID: span, OK: &ok, TS: ts}
	h.evs = append(h.evs, start, fin)
	return h
}

func TestApplyLifecycle(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    *history
		want Status
		err  error
	}{
		{"created", new(history).op("create", true), StatusRunning, nil},
		{"create failed", new(history).op("create", false), StatusFailed, nil},
		{"stopped", new(history).op("create", true).op("exec", true).op("stop", true), StatusStopped, nil},
		{"restarted", new(history).op("create", true).op("stop", true).op("start", true), StatusRunning, nil},
		{"failed stop keeps state", new(history).op("create", true).op("stop", false), StatusRunning, nil},
		{"shut down", new(history).op("create", true).op("shutdown", true), StatusShutDown, nil},
		{"deleted", new(history).op("create", true).op("shutdown", true).op("delete", true), StatusDeleted, nil},
		{"start after shutdown", new(history).op("create", true).op("shutdown", true).op("start", true), StatusShutDown, ErrBadTransition},
		{"op after delete", new(history).op("create", true).op("delete", true).op("exec", true), StatusDeleted, ErrBadTransition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Fold(tc.h.evs)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if s.Status != tc.want {
				t.Fatalf("status = %s, want %s", s.Status, tc.want)
			}
		})
	}
}

func TestApplyRejectsImpossibleHistories(t *testing.T) {
	h := new(history).op("create", true).op("exec", true)
	gap := append([]events.Event{}, h.evs[:2]...)
	gap = append(gap, h.evs[3]) // seq 4 after 2
	if _, err := Fold(gap); !errors.Is(err, ErrSeqGap) {
		t.Fatalf("gap: got %v, want ErrSeqGap", err)
	}
	orphan := append([]events.Event{}, h.evs[:2]...)
	o := h.evs[3]
	o.Seq = 3
	orphan = append(orphan, o)
	if _, err := Fold(orphan); !errors.Is(err, ErrFinishOrphan) {
		t.Fatalf("orphan finish: got %v, want ErrFinishOrphan", err)
	}
	if _, err := Fold(h.evs[2:]); !errors.Is(err, ErrNotCreatedFirst) {
		t.Fatalf("no create: got %v, want ErrNotCreatedFirst", err)
	}
	var pe *Error
	_, err := Fold(gap)
	if !errors.As(err, &pe) || pe.Session != "s" || pe.Seq != 4 {
		t.Fatalf("error %v does not name session s seq 4", err)
	}
}

func TestInFlight(t *testing.T) {
	h := new(history).op("create", true)
	s, err := Fold(append(h.evs, events.Event{Tenant: "t", SessionID: "s", Seq: 3, Op: "exec", Phase: events.PhaseStart, SpanID: "x"}))
	if err != nil {
		t.Fatal(err)
	}
	if s.InFlight["x"].Op != "exec" || s.LastSeq != 3 || s.Runtime != "local" || s.Node != "n1" {
		t.Fatalf("state = %+v, want exec in flight at seq 3 on n1/local", s)
	}
}

func FuzzApply(f *testing.F) {
	f.Add(uint64(1), "create", "start", "a", true)
	f.Add(uint64(2), "exec", "finish", "a", false)
	f.Fuzz(func(t *testing.T, seq uint64, op, phase, span string, ok bool) {
		base, _ := Fold(new(history).op("create", true).evs)
		ev := events.Event{Tenant: "t", SessionID: "s", Seq: seq, Op: op, Phase: events.Phase(phase), SpanID: span, OK: &ok}
		next, err := Apply(base, ev)
		if err != nil {
			if next.LastSeq != base.LastSeq || next.Status != base.Status {
				t.Fatalf("a rejected event changed the state")
			}
			return
		}
		if next.LastSeq != base.LastSeq+1 {
			t.Fatalf("applied event moved seq to %d, want %d", next.LastSeq, base.LastSeq+1)
		}
	})
}
