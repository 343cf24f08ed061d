package projector_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/paddock-dev/paddock/events"
)

// writer appends a session's events as a node does: gap-free seq, the
// prev_hash chain, and the append guard.
type writer struct {
	t      testing.TB
	log    *events.Log
	tenant string
	id     string
	seq    uint64
	last   uint64 // stream seq of the session's last event
	hash   string
	broken bool // an append failed (reported); later ones are skipped
}

func newWriter(t testing.TB, log *events.Log, tenant, id string) *writer {
	return &writer{t: t, log: log, tenant: tenant, id: id}
}

// event appends one event. A failure is reported with Error, not Fatal,
// as writers also run in goroutines of their own.
func (w *writer) event(op string, phase events.Phase, span string, ok *bool) {
	w.t.Helper()
	if w.broken {
		return
	}
	w.seq++
	ev := &events.Event{
		Version: events.Version, EventID: uuid.NewString(), TS: time.Now().UTC(),
		Tenant: w.tenant, SessionID: w.id, Seq: w.seq, Op: op, Phase: phase,
		SpanID: span, Node: "n1", PrevHash: w.hash, OK: ok,
	}
	if op == "create" && phase == events.PhaseStart {
		ev.Data = json.RawMessage(`{"runtime":"local","epoch":1}`)
	}
	data, err := json.Marshal(ev)
	if err == nil {
		var seq uint64
		if seq, err = w.log.AppendRaw(context.Background(), ev, data, w.last); err == nil {
			w.last, w.hash = seq, events.Hash(data)
			return
		}
	}
	w.t.Errorf("append %s %s %s seq %d: %v", w.id, op, phase, w.seq, err)
	w.broken = true
}

// op appends a whole operation: start and finish.
func (w *writer) op(op string, ok bool) *writer {
	span := uuid.NewString()[:8]
	w.event(op, events.PhaseStart, span, nil)
	w.event(op, events.PhaseFinish, span, &ok)
	return w
}
