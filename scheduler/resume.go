package scheduler

import (
	"context"
	"encoding/json"

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
	evs, err := s.log.Session(ctx, tenant, r.SessionID)
	if err != nil {
		s.respond(m, commands.ErrorReply(err))
		return
	}
	if len(evs) == 0 {
		s.respond(m, commands.ErrorReply(errcode.New(errcode.SessionNotFound, "session %s does not exist", r.SessionID)))
		return
	}
	st, _ := projection.Fold(evs)
	switch st.Status {
	case projection.StatusDeleted:
		s.respond(m, commands.ErrorReply(errcode.New(errcode.SessionNotFound, "session %s was deleted", r.SessionID)))
		return
	case projection.StatusCreating, projection.StatusFailed:
		s.respond(m, commands.ErrorReply(errcode.New(errcode.InvalidState, "session %s is %s", r.SessionID, st.Status)))
		return
	}
	args, _ := json.Marshal(commands.ResumePlacement{Tenant: tenant, SessionID: r.SessionID, SecretEnv: r.SecretEnv})
	req.Args = args
	body, _ := json.Marshal(req)
	s.respond(m, s.place(ctx, st.Runtime, "resume", body))
}
