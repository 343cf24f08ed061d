package retention

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
)

// ProjectedSessions returns Sessions that reads every tenant's records
// from the sessions projection in js: on a partitioned deployment, the
// sessions of every partition (one projector per partition fills the one
// projection). It fails with unavailable when the
// projection's bucket does not exist or cannot be read.
func ProjectedSessions(js jetstream.JetStream) Sessions {
	return func(ctx context.Context) ([]projection.SessionRecord, error) {
		ss, err := projector.OpenSessions(ctx, js)
		if err != nil {
			return nil, err
		}
		recs, err := ss.List(ctx, ">")
		if err != nil {
			return nil, err
		}
		out := make([]projection.SessionRecord, 0, len(recs))
		for _, r := range recs {
			out = append(out, r)
		}
		return out, nil
	}
}
