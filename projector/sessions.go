package projector

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/projection"
)

// Sessions reads the sessions projection (the SessionsBucket bucket): the
// one reader of session records for the CLI, the client, retention and the
// scheduler. It reads what the projector last wrote; see ReadStatus for
// how far behind the events that is.
type Sessions struct {
	kv jetstream.KeyValue
}

// OpenSessions opens the sessions projection. It fails with unavailable,
// and an error that matches jetstream.ErrBucketNotFound, when the bucket
// does not exist (no projector has run); with unavailable when it cannot
// be opened.
func OpenSessions(ctx context.Context, js jetstream.JetStream) (*Sessions, error) {
	kv, err := js.KeyValue(ctx, SessionsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, &errcode.Error{Code: errcode.Unavailable, Err: err,
			Message: "no sessions projection (bucket " + SessionsBucket + "): is an engine with its projector running?"}
	}
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "sessions projection")
	}
	return &Sessions{kv: kv}, nil
}

// List returns the records whose key matches filter (">": every tenant's;
// projection.TenantKeys(t): tenant t's; projection.SessionKey(t, id): one),
// by key. Deleted sessions are included, with status deleted. It fails
// with unavailable when the bucket cannot be read (events.ErrReadStalled
// among the causes when its watch delivers nothing).
func (s *Sessions) List(ctx context.Context, filter string) (map[string]projection.SessionRecord, error) {
	recs, err := ReadAll[projection.SessionRecord](ctx, s.kv, filter)
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "read the sessions projection")
	}
	return recs, nil
}

// Get returns one session's record; found is false when the projection
// has no record of it. It fails with unavailable when the bucket cannot be
// read, and with internal when the record does not decode.
func (s *Sessions) Get(ctx context.Context, tenant, id string) (rec projection.SessionRecord, found bool, err error) {
	e, err := s.kv.Get(ctx, projection.SessionKey(tenant, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, errcode.Wrap(errcode.Unavailable, err, "read the sessions projection")
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return rec, false, errcode.Wrap(errcode.Internal, err, "decode session record")
	}
	return rec, true, nil
}
