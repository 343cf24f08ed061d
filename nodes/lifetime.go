package nodes

import (
	"context"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
)

// ReasonMaxLifetime is the reason of a shutdown the node made because the
// session's lifetime ended (events.StatusFinish.Reason).
const ReasonMaxLifetime = "max_lifetime"

// expired reports whether the session's lifetime has ended.
func (s *session) expired(now time.Time) bool {
	return !s.expires.IsZero() && !now.Before(s.expires)
}

// checkLifetime refuses to bring back a session whose lifetime has ended.
func checkLifetime(s *session, op commands.Op) error {
	if s.expired(time.Now()) {
		return errcode.New(errcode.PolicyDenied, "%s: session %s passed its lifetime at %s", op, s.id, s.expires.Format(time.RFC3339))
	}
	return nil
}

// expire shuts down the sessions whose lifetime has ended and that still
// have a sandbox, each through the one op path: a shutdown with the node
// as actor and reason max_lifetime in its finish.
func (a *Agent) expire(ctx context.Context) {
	now := time.Now()
	var due []*session
	a.mu.Lock()
	for _, s := range a.sessions {
		if s.expired(now) {
			due = append(due, s)
		}
	}
	a.mu.Unlock()
	for _, s := range due {
		if st := s.getStatus(); ctx.Err() != nil || st != projection.StatusRunning && st != projection.StatusStopped {
			continue
		}
		reply := a.perform(ctx, s, commands.Request{Actor: "node:" + a.cfg.ID}, commands.OpShutdown, nil, func(ctx context.Context) (outcome, error) {
			out, err := runShutdown(ctx, a, s, nil)
			if err == nil {
				out.data = events.StatusFinish{Status: string(projection.StatusShutDown), Reason: ReasonMaxLifetime}
			}
			return out, err
		})
		a.logger.Info("session lifetime ended; shut down", "tenant", s.tenant, "session", s.id, "expired", s.expires, "reply", string(reply))
	}
}
