package scheduler

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
)

// session returns a session's state: from its record in the sessions
// projection (KV) when that record has taken in the session's last event,
// else, when the projection lags behind it or is not there, from a fold
// of the session's events. A session with no events, or deleted, is
// session_not_found.
func (s *Scheduler) session(ctx context.Context, tenant, id string) (projection.Session, error) {
	tail, err := s.log.Last(ctx, tenant, id)
	if err != nil {
		return projection.Session{}, err
	}
	if tail.Event == nil {
		return projection.Session{}, errcode.New(errcode.SessionNotFound, "session %s does not exist", id)
	}
	st, ok := s.fromProjection(ctx, tenant, id, tail.StreamSeq)
	if !ok {
		s.stats.folds.Add(1)
		evs, err := s.log.Session(ctx, tenant, id)
		if err != nil {
			return projection.Session{}, err
		}
		var ferr error
		if st, ferr = projection.Fold(evs); ferr != nil {
			s.logger.Warn("session history does not fold", "tenant", tenant, "session", id, "err", ferr)
		}
	} else {
		s.stats.projected.Add(1)
	}
	if st.Status == projection.StatusDeleted {
		return projection.Session{}, errcode.New(errcode.SessionNotFound, "session %s was deleted", id)
	}
	return st, nil
}

// fromProjection reads the session's record from the sessions bucket; ok
// is false when there is no bucket or record, or the record has not taken
// in the event at stream sequence upTo.
func (s *Scheduler) fromProjection(ctx context.Context, tenant, id string, upTo uint64) (projection.Session, bool) {
	ss, err := s.sessionsProjection(ctx)
	if err != nil {
		return projection.Session{}, false
	}
	rec, found, err := ss.Get(ctx, tenant, id)
	if err != nil {
		s.logger.Debug("sessions projection unreadable", "err", err)
		return projection.Session{}, false
	}
	if !found || rec.StreamSeq < upTo || rec.ProblemCount > 0 {
		return projection.Session{}, false
	}
	return rec.Session, true
}

// sessionsProjection opens the sessions projection once its bucket
// exists; before, it fails with an error matching
// jetstream.ErrBucketNotFound.
func (s *Scheduler) sessionsProjection(ctx context.Context) (*projector.Sessions, error) {
	s.mu.Lock()
	ss := s.sessions
	s.mu.Unlock()
	if ss != nil {
		return ss, nil
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		return nil, err
	}
	ss, err = projector.OpenSessions(ctx, js)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.sessions = ss
	s.mu.Unlock()
	return ss, nil
}
