package events

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/storage"
)

// DefaultStream is the name of the events stream.
const DefaultStream = "SBX_EVENTS"

// StreamConfig sets the events stream's name, placement and retention.
type StreamConfig struct {
	// Name of the stream (default SBX_EVENTS).
	Name string
	// Prefix of the subjects (default sbx).
	Prefix string
	// Replicas (default 1); use 3 on a cluster.
	Replicas int
	// MaxAge bounds retention (0: unlimited). Past it the oldest events
	// go first, and replay can no longer see a session whole.
	MaxAge time.Duration
	// MaxBytes is the space the stream reserves and may fill (JetStream
	// reserves a stream's MaxBytes on every server that holds a replica).
	// 0 keeps the limit an existing stream has; a new one is unbounded.
	MaxBytes int64
	// DropOldest makes the stream drop its oldest events once it holds
	// MaxBytes (retention). Otherwise an append that does not fit is
	// refused (storage_quota_exceeded) and nothing recorded is lost.
	DropOldest bool
	// Duplicates is the window in which an event id is deduplicated
	// (default 2 minutes).
	Duplicates time.Duration
	// Partitions is the number of event partitions, fixed when the
	// deployment is made (see partition.go). 0 keeps what an existing
	// deployment has (1 for a new one); another number than the existing
	// one is refused: moving sessions between partitions is a repartition.
	// MaxBytes applies to each partition's stream.
	Partitions int
}

// Validate checks the config.
func (c StreamConfig) Validate() error {
	if c.Replicas < 0 || c.Replicas > 5 {
		return fmt.Errorf("events stream: replicas %d outside 0..5", c.Replicas)
	}
	if c.MaxAge < 0 || c.MaxBytes < 0 || c.Duplicates < 0 {
		return errors.New("events stream: negative limit")
	}
	return ValidatePartitions(c.Partitions)
}

func (c StreamConfig) withDefaults() StreamConfig {
	if c.Name == "" {
		c.Name = DefaultStream
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Duplicates == 0 {
		c.Duplicates = 2 * time.Minute
	}
	return c
}

// EnsureStream creates the events stream (every partition's), or updates
// it to cfg, and returns the first partition's (the only one of an
// unpartitioned deployment). It is idempotent. The streams are on file
// storage and deny message deletion and purge: the audit log only grows,
// within its limits. Asking an existing deployment for another number of
// partitions is invalid_state.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) (jetstream.Stream, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	n, err := existingPartitions(ctx, js, cfg.Name)
	if err != nil {
		return nil, err
	}
	switch {
	case n == 0 && cfg.Partitions == 0:
		n = 1 // a new deployment, unpartitioned
	case n == 0:
		n = cfg.Partitions
	case cfg.Partitions != 0 && cfg.Partitions != n:
		return nil, errcode.New(errcode.InvalidState, "the events stream %s has %d partitions, not %d: the number is fixed when the deployment is made (docs/scale.md says how to move a deployment to another number)", cfg.Name, n, cfg.Partitions)
	}
	// Partition 0 last: its metadata declares the others, which exist by then.
	var first jetstream.Stream
	for k := n - 1; k >= 0; k-- {
		s, err := ensurePartition(ctx, js, cfg, n, k)
		if err != nil {
			return nil, err
		}
		first = s
	}
	return first, nil
}

// existingPartitions is the number of partitions of the deployment whose
// first stream is name: 0 when there is none.
func existingPartitions(ctx context.Context, js jetstream.JetStream, name string) (int, error) {
	s, err := js.Stream(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return 0, nil
	case err != nil:
		return 0, errcode.Wrap(errcode.Unavailable, err, "events stream "+name)
	}
	return partitionsOf(s.CachedInfo().Config.Metadata)
}

// ensurePartition creates or updates partition k of n.
func ensurePartition(ctx context.Context, js jetstream.JetStream, cfg StreamConfig, n, k int) (jetstream.Stream, error) {
	name := PartitionStream(cfg.Name, k)
	subj := Subjects{Prefix: cfg.Prefix, Partitions: n}
	subjects := []string{subj.PartitionSessions(k)}
	var md map[string]string
	if k == 0 {
		subjects = append(subjects, subj.AllNodes())
		if n > 1 {
			md = map[string]string{PartitionsMetadata: strconv.Itoa(n)}
		}
	}
	maxBytes, err := storage.KeepMaxBytes(ctx, js, name, cfg.MaxBytes)
	if err != nil {
		return nil, err
	}
	discard := jetstream.DiscardNew
	if cfg.DropOldest {
		discard = jetstream.DiscardOld
	}
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        name,
		Description: "Paddock audit events: one start and one finish per session operation",
		Subjects:    subjects,
		Metadata:    md,
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Replicas:    cfg.Replicas,
		MaxAge:      cfg.MaxAge,
		MaxBytes:    maxBytes,
		Discard:     discard,
		Duplicates:  cfg.Duplicates,
		DenyDelete:  true,
		DenyPurge:   true,
		AllowDirect: true,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", name, storage.ReservationError(err, name, maxBytes))
	}
	return s, nil
}
