package scheduler

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/projection"
)

// handleResume places a session whose node no longer serves it on a node
// that has its runtime; that node re-creates the sandbox at the next epoch
// and restores the last snapshot.
func (s *Scheduler) handleResume(ctx context.Context, m *nats.Msg) {
	var r commands.ResumeRequest
	tenant, req, ok := s.decodeTenant(m, &r)
	if !ok {
		return
	}
	ctx, span := s.startSpan(ctx, "resume", tenant, r.SessionID, req)
	st, err := s.session(ctx, tenant, r.SessionID)
	if err != nil {
		s.respondSpan(m, span, commands.ErrorReply(err))
		return
	}
	switch st.Status {
	case projection.StatusCreating, projection.StatusFailed:
		s.respondSpan(m, span, commands.ErrorReply(errcode.New(errcode.InvalidState, "session %s is %s", r.SessionID, st.Status)))
		return
	}
	s.respondSpan(m, span, s.place(ctx, want{runtime: st.Runtime, labels: st.NodeLabels}, "resume", tenant, forward(req, commands.ResumePlacement{Tenant: tenant, SessionID: r.SessionID, SecretEnv: r.SecretEnv, Empty: r.Empty, Egress: r.Egress, AtSeq: r.AtSeq})))
}
