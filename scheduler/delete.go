package scheduler

import (
	"context"
	"encoding/json"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/tracing"
)

// handleDelete deletes a session no node serves: a lost one, or one shut
// down (or failed) on a node that is gone. There is no sandbox to remove
// (a lost node's own reaper removes what it left, should it come back),
// so the engine records the delete itself, after the session's last
// event: a node that still held the session finds its next append refused
// and lets it go. A session in any other status is invalid_state: its
// node serves it, and a delete goes to the session.
func (s *Scheduler) handleDelete(ctx context.Context, m *nats.Msg) {
	var r commands.DeleteRequest
	tenant, req, ok := s.decodeTenant(m, &r)
	if !ok {
		return
	}
	ctx, span, ids := s.tracer.Start(ctx, "paddock.scheduler delete", trace.SpanKindServer, req.TraceID, req.ParentSpanID, s.tracer.OpAttrs(tenant, r.SessionID, "delete", s.cfg.Name)...)
	reply, err := s.deleteUnserved(ctx, tenant, r.SessionID, req, ids)
	if err != nil {
		reply = commands.ErrorReply(err)
	}
	s.respondSpan(m, span, reply)
}

// deleteUnserved records the delete of a session no node serves, its
// events carrying ids (those of the delete's span).
func (s *Scheduler) deleteUnserved(ctx context.Context, tenant, id string, req commands.Request, ids tracing.IDs) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		tail, err := s.log.Last(ctx, tenant, id)
		if err != nil {
			return nil, err
		}
		if tail.Event == nil {
			return nil, errcode.New(errcode.SessionNotFound, "session %s does not exist", id)
		}
		evs, err := s.log.Session(ctx, tenant, id)
		if err != nil {
			return nil, err
		}
		if len(evs) == 0 || evs[len(evs)-1].Seq != tail.Event.Seq {
			continue
		}
		st, _ := projection.Fold(evs)
		switch st.Status {
		case projection.StatusDeleted:
			return nil, errcode.New(errcode.SessionNotFound, "session %s was deleted", id)
		case projection.StatusLost, projection.StatusShutDown, projection.StatusFailed:
		default:
			return nil, errcode.New(errcode.InvalidState, "session %s is %s on node %s, which serves it: send delete to the session", id, st.Status, st.Node)
		}
		if len(st.InFlight) > 0 {
			return nil, errcode.New(errcode.InvalidState, "session %s has operations in flight on node %s", id, st.Node)
		}
		w := s.chain(tenant, id, tail)
		base := events.Event{Op: string(commands.OpDelete), CommandID: req.CommandID, SpanID: ids.SpanID, ParentSpanID: ids.ParentSpanID, TraceID: ids.TraceID, Actor: req.Actor}
		start := base
		start.Phase = events.PhaseStart
		err = w.Append(ctx, &start)
		if err == nil {
			fin := base
			fin.Phase = events.PhaseFinish
			ok := true
			fin.OK = &ok
			fin.Data, _ = json.Marshal(events.StatusFinish{Status: string(projection.StatusDeleted)})
			// The finish must follow its start: retried within the
			// append's own bound, never given up for a passing fault.
			for try := 0; try < 5; try++ {
				if err = w.Append(context.WithoutCancel(ctx), &fin); errcode.Of(err) != errcode.Unavailable {
					break
				}
			}
		}
		if errcode.Of(err) == errcode.ConcurrencyConflict && attempt < 3 {
			continue
		}
		if err != nil {
			return nil, err
		}
		s.logger.Info("session no node serves deleted by the engine", "tenant", tenant, "session", id, "was", st.Status)
		return commands.ResultReply(commands.StatusResult{Status: string(projection.StatusDeleted)})
	}
}
