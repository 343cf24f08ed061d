package main

import (
	"context"
	"fmt"
	flag "github.com/spf13/pflag"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/cmd/internal/bytesize"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/storage"
)

// storageFlags are `engine serve`'s storage settings: the embedded
// server's store and the limits of Paddock's streams.
type storageFlags struct {
	maxStore, events, objects, kv string
	dropOldest                    bool
}

func (f *storageFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.maxStore, "max-store", "", "the embedded server's JetStream store, e.g. 100g (default: nats-server's, 75% of the disk's free space at start)")
	fs.StringVar(&f.events, "events-max-bytes", "", fmt.Sprintf("space reserved for the events stream, e.g. 10g (default: %d%% of the JetStream store)", storage.EventsPercent))
	fs.BoolVar(&f.dropOldest, "events-drop-oldest", false, "when the events stream is full, drop its oldest events (retention) instead of refusing new ones")
	fs.StringVar(&f.objects, "objects-max-bytes", "", fmt.Sprintf("quota of the workspace bucket (snapshots, transfers), e.g. 50g (default: %d%% of the JetStream store)", storage.ObjectsPercent))
	fs.StringVar(&f.kv, "kv-max-bytes", "", fmt.Sprintf("bound of each projection bucket, e.g. 1g (default: %d%% of the JetStream store)", storage.KVPercent))
}

// parse returns the embedded store's size and the limits asked (0: none).
func (f *storageFlags) parse() (int64, storage.Limits, error) {
	var out [4]int64
	for i, v := range []struct{ flag, val string }{{"max-store", f.maxStore}, {"events-max-bytes", f.events}, {"objects-max-bytes", f.objects}, {"kv-max-bytes", f.kv}} {
		if v.val == "" {
			continue
		}
		n, err := bytesize.Parse(v.val)
		if err != nil {
			return 0, storage.Limits{}, err
		}
		if n == 0 {
			return 0, storage.Limits{}, usageErr("--%s 0: give a size, or leave the flag out for the default", v.flag)
		}
		out[i] = n
	}
	return out[0], storage.Limits{Events: out[1], Objects: out[2], KV: out[3]}, nil
}

// storeSize is the JetStream store the defaults split: the embedded
// server's (embedded > 0), else the account's limit on the server at
// --nats-url, for streams of replicas copies; 0 when neither is known.
func storeSize(ctx context.Context, js jetstream.JetStream, embedded int64, replicas int) (int64, string) {
	if embedded > 0 {
		return embedded, "the embedded server's JetStream store"
	}
	var ai *jetstream.AccountInfo
	err := retrySetup(ctx, func(ctx context.Context) (err error) {
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

// storagePlan is what `engine serve` gives Paddock's streams: the limits
// the operator asked for and the defaults split from the store.
type storagePlan struct {
	replicas   int
	maxAge     time.Duration
	dropOldest bool
	asked      storage.Limits
	// embedded is the embedded server's store (0: --nats-url).
	embedded int64
}

// defaults splits the JetStream store (see storeSize); it logs where the
// size came from, or that it is unknown.
func (p storagePlan) defaults(ctx context.Context, js jetstream.JetStream, logger *slog.Logger) storage.Limits {
	store, from := storeSize(ctx, js, p.embedded, p.replicas)
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

// ensureStreams creates or updates the events stream and the workspace
// bucket with their limits, the events stream first, so that its
// reservation comes before the bucket's.
func (p storagePlan) ensureStreams(ctx context.Context, js jetstream.JetStream, logger *slog.Logger) error {
	def := p.defaults(ctx, js, logger)
	return retrySetup(ctx, func(ctx context.Context) error { return p.ensureStreamsOnce(ctx, js, def, logger) })
}

// retrySetup runs fn, and again after a pause while it fails on a
// transient JetStream error (a request without an answer, no leader yet,
// no peers to place a stream on: a cluster that has just formed, or is
// loaded), until ctx (the engine's start timeout) ends. Each JetStream
// request in fn is bounded by the client's own timeout rather than by
// ctx, so that one unanswered request does not take the whole start.
func retrySetup(ctx context.Context, fn func(context.Context) error) error {
	backoff := 100 * time.Millisecond
	for {
		err := readUndeadlined(ctx, fn)
		if err == nil || !transient(ctx, err) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return errcode.Wrap(errcode.Unavailable, err, "JetStream was not ready before the start timeout")
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

func (p storagePlan) ensureStreamsOnce(ctx context.Context, js jetstream.JetStream, def storage.Limits, logger *slog.Logger) error {
	evLimit, err := resolve(ctx, js, events.DefaultStream, p.asked.Events, def.Events, logger)
	if err != nil {
		return err
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Replicas: p.replicas, MaxAge: p.maxAge, MaxBytes: evLimit, DropOldest: p.dropOldest}); err != nil {
		return err
	}
	objLimit, err := resolve(ctx, js, objectstore.StreamName(objectstore.DefaultBucket), p.asked.Objects, def.Objects, logger)
	if err != nil {
		return err
	}
	if _, err := objectstore.Ensure(ctx, js, objectstore.Config{Replicas: p.replicas, MaxBytes: objLimit}); err != nil {
		return err
	}
	for _, s := range []string{events.DefaultStream, objectstore.StreamName(objectstore.DefaultBucket)} {
		if u, err := storage.Read(ctx, js, s); err == nil {
			logger.Info("storage", "stream", s, "bytes", u.Bytes, "max_bytes", u.MaxBytes, "drops_oldest", u.DropsOldest)
		}
	}
	return nil
}

// ensureBuckets creates or updates the projection's buckets with their
// limits. The projector's start calls it, before the projector ensures
// the buckets itself (keeping these limits): two concurrent updates of
// one bucket on a cluster can leave one unanswered.
func (p storagePlan) ensureBuckets(ctx context.Context, js jetstream.JetStream, logger *slog.Logger) error {
	def := p.defaults(ctx, js, slog.New(slog.DiscardHandler)) // said once, by ensureStreams
	kv := map[string]int64{}
	for _, b := range []string{projector.SessionsBucket, projector.NodesBucket, projector.StateBucket} {
		var err error
		if kv[b], err = resolve(ctx, js, "KV_"+b, p.asked.KV, def.KV, logger); err != nil {
			return err
		}
	}
	return retrySetup(ctx, func(ctx context.Context) error {
		_, err := projector.EnsureBuckets(ctx, js, projector.Config{Replicas: p.replicas, MaxBytes: kv})
		return err
	})
}

// paddockStreams are the streams of Paddock's events, snapshots and
// projection, the events stream first.
func paddockStreams() []string {
	return []string{events.DefaultStream, objectstore.StreamName(objectstore.DefaultBucket),
		"KV_" + projector.SessionsBucket, "KV_" + projector.NodesBucket, "KV_" + projector.StateBucket}
}
