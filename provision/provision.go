package provision

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/readiness"
	"github.com/paddock-dev/paddock/storage"
)

// StoreSize is the JetStream store the defaults split: the embedded
// server's (embedded > 0), else the account's limit on the server at
// a server of its own (--nats-url), for streams of replicas copies; 0 when neither is known.
func StoreSize(ctx context.Context, js jetstream.JetStream, embedded int64, replicas int) (int64, string) {
	if embedded > 0 {
		return embedded, "the embedded server's JetStream store"
	}
	var ai *jetstream.AccountInfo
	err := readiness.RetryTransient(ctx, func(ctx context.Context) (err error) {
		ai, err = js.AccountInfo(ctx)
		return err
	})
	if err != nil {
		return 0, ""
	}
	if t, ok := ai.Tiers[fmt.Sprintf("R%d", max(replicas, 1))]; ok && t.Limits.MaxStore > 0 {
		return t.Limits.MaxStore, "the account's limit for R" + fmt.Sprint(max(replicas, 1)) + " streams"
	}
	if ai.Limits.MaxStore > 0 {
		// Un-tiered account limits count every replica.
		return ai.Limits.MaxStore / int64(max(replicas, 1)), "the account's store limit"
	}
	return 0, ""
}

// Plan is what an engine gives Paddock's streams: the limits
// the operator asked for and the defaults split from the store.
type Plan struct {
	// Replicas of every stream and bucket (0: 1).
	Replicas int
	// MaxAge of the events stream (0: none).
	MaxAge time.Duration
	// DropOldest lets a full events stream drop its oldest events instead
	// of refusing new ones.
	DropOldest bool
	// Asked are the limits the operator set (0: the default split).
	Asked storage.Limits
	// Embedded is the embedded server's store (0: a server of its own,
	// whose account limit is asked).
	Embedded int64
	// Partitions is the number of event partitions of a new deployment
	// (0: what the deployment has, 1 for a new one); the events' space is
	// split evenly among them.
	Partitions int
}

// Defaults splits the JetStream store (see StoreSize); it logs where the
// size came from, or that it is unknown.
func (p Plan) Defaults(ctx context.Context, js jetstream.JetStream, logger *slog.Logger) storage.Limits {
	store, from := StoreSize(ctx, js, p.Embedded, p.Replicas)
	def := storage.Defaults(store)
	if store > 0 {
		logger.Info("storage: default limits", "store", store, "from", from, "events", def.Events, "objects", def.Objects, "kv_each", def.KV)
	} else {
		logger.Warn("storage: the JetStream store's size is unknown (no account limit at --nats-url), so streams get no default limits: set --events-max-bytes, --objects-max-bytes and --kv-max-bytes to reserve space for the events")
	}
	return def
}

// resolve is storage.Resolve that logs its note.
func resolve(ctx context.Context, js jetstream.JetStream, stream string, asked, def int64, logger *slog.Logger) (int64, error) {
	limit, note, err := storage.Resolve(ctx, js, stream, asked, def)
	if note != "" {
		logger.Warn("storage: "+note, "stream", stream)
	}
	return limit, err
}

// EnsureStreams creates or updates the events stream and the workspace
// bucket with their limits, the events stream first, so that its
// reservation comes before the bucket's. On a partitioned deployment it
// then spreads the partitions' leaders over the servers (SpreadLeaders).
func (p Plan) EnsureStreams(ctx context.Context, js jetstream.JetStream, logger *slog.Logger) error {
	def := p.Defaults(ctx, js, logger)
	if err := readiness.RetryTransient(ctx, func(ctx context.Context) error { return p.ensureStreamsOnce(ctx, js, def, logger) }); err != nil {
		return err
	}
	SpreadLeaders(ctx, js, logger)
	return nil
}

// SpreadLeaders spreads the leaders of the events' partitions over the
// servers (events.Log.SpreadLeaders) and logs each move. A failure is
// logged, not returned: spread leaders are a matter of speed, and a
// deployment whose leaders stay together still works.
func SpreadLeaders(ctx context.Context, js jetstream.JetStream, logger *slog.Logger) {
	log, err := events.OpenLog(ctx, js, "", "")
	if err != nil || log.Partitions() == 1 {
		return // an unpartitioned deployment has one leader to place
	}
	moves, err := log.SpreadLeaders(ctx)
	for _, m := range moves {
		logger.Info("events: partition leader moved", "stream", m.Stream, "from", m.From, "to", m.To)
	}
	if err != nil {
		logger.Warn("events: the partitions' leaders are not spread over the servers (engine status shows where they are)", "err", err)
	}
}

func (p Plan) ensureStreamsOnce(ctx context.Context, js jetstream.JetStream, def storage.Limits, logger *slog.Logger) error {
	evLimit, err := resolve(ctx, js, events.DefaultStream, p.Asked.Events, def.Events, logger)
	if err != nil {
		return err
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Replicas: p.Replicas, MaxAge: p.MaxAge, MaxBytes: p.perPartition(ctx, js, evLimit), DropOldest: p.DropOldest, Partitions: p.Partitions}); err != nil {
		return err
	}
	objLimit, err := resolve(ctx, js, objectstore.StreamName(objectstore.DefaultBucket), p.Asked.Objects, def.Objects, logger)
	if err != nil {
		return err
	}
	if _, err := objectstore.Ensure(ctx, js, objectstore.Config{Replicas: p.Replicas, MaxBytes: objLimit}); err != nil {
		return err
	}
	for _, s := range []string{events.DefaultStream, objectstore.StreamName(objectstore.DefaultBucket)} {
		if u, err := storage.Read(ctx, js, s); err == nil {
			logger.Info("storage", "stream", s, "bytes", u.Bytes, "max_bytes", u.MaxBytes, "drops_oldest", u.DropsOldest)
		}
	}
	return nil
}

// perPartition is each partition's share of the events' space limit: the
// limit split evenly over the partitions the deployment will have (its
// own, or the plan's for a new one).
func (p Plan) perPartition(ctx context.Context, js jetstream.JetStream, limit int64) int64 {
	n := p.Partitions
	if log, err := events.OpenLog(ctx, js, "", ""); err == nil {
		n = log.Partitions()
	}
	return limit / int64(max(n, 1))
}

// EnsureBuckets creates or updates the projection's buckets with their
// limits. The projector's start calls it, before the projector ensures
// the buckets itself (keeping these limits): two concurrent updates of
// one bucket on a cluster can leave one unanswered.
func (p Plan) EnsureBuckets(ctx context.Context, js jetstream.JetStream, logger *slog.Logger) error {
	def := p.Defaults(ctx, js, slog.New(slog.DiscardHandler)) // said once, by EnsureStreams
	kv := map[string]int64{}
	for _, b := range []string{projector.SessionsBucket, projector.NodesBucket, projector.StateBucket} {
		var err error
		if kv[b], err = resolve(ctx, js, "KV_"+b, p.Asked.KV, def.KV, logger); err != nil {
			return err
		}
	}
	return readiness.RetryTransient(ctx, func(ctx context.Context) error {
		_, err := projector.EnsureBuckets(ctx, js, projector.Config{Replicas: p.Replicas, MaxBytes: kv})
		return err
	})
}

// Streams are the streams of Paddock's events, snapshots and
// projection, the events stream first: of an unpartitioned deployment
// (StreamsOf lists a partitioned one's).
func Streams() []string {
	return []string{events.DefaultStream, objectstore.StreamName(objectstore.DefaultBucket),
		"KV_" + projector.SessionsBucket, "KV_" + projector.NodesBucket, "KV_" + projector.StateBucket}
}

// StreamsOf are the deployment's streams as js sees them: Streams with
// the events partitions beyond the first (SBX_EVENTS_1..N-1) after the
// first events stream, N read from that stream's metadata
// (events.OpenLog); Streams while the events stream does not exist yet.
// Its error is unavailable when the events stream cannot be read.
func StreamsOf(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	log, err := events.OpenLog(ctx, js, "", "")
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return Streams(), nil
	}
	if err != nil {
		return nil, err
	}
	base := Streams()
	return append(log.Streams(), base[1:]...), nil
}
