package scheduler

import (
	"context"
	"encoding/json"
	"errors"

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
	kv, err := s.sessionsBucket(ctx)
	if err != nil {
		return projection.Session{}, false
	}
	e, err := kv.Get(ctx, projection.SessionKey(tenant, id))
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			s.logger.Debug("sessions projection unreadable", "err", err)
		}
		return projection.Session{}, false
	}
	var rec projection.SessionRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.StreamSeq < upTo || rec.ProblemCount > 0 {
		return projection.Session{}, false
	}
	return rec.Session, true
}

// sessionsBucket opens the sessions projection's bucket once it exists.
func (s *Scheduler) sessionsBucket(ctx context.Context) (jetstream.KeyValue, error) {
	s.mu.Lock()
	kv := s.kv
	s.mu.Unlock()
	if kv != nil {
		return kv, nil
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		return nil, err
	}
	kv, err = js.KeyValue(ctx, projector.SessionsBucket)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.kv = kv
	s.mu.Unlock()
	return kv, nil
}
