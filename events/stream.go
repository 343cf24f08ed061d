package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
}

// Validate checks the config.
func (c StreamConfig) Validate() error {
	if c.Replicas < 0 || c.Replicas > 5 {
		return fmt.Errorf("events stream: replicas %d outside 0..5", c.Replicas)
	}
	if c.MaxAge < 0 || c.MaxBytes < 0 || c.Duplicates < 0 {
		return errors.New("events stream: negative limit")
	}
	return nil
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

// EnsureStream creates the events stream, or updates it to cfg, and returns
// it. It is idempotent. The stream is on file storage and denies message
// deletion and purge: the audit log only grows, within its limits.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) (jetstream.Stream, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	subj := Subjects{Prefix: cfg.Prefix}
	maxBytes, err := storage.KeepMaxBytes(ctx, js, cfg.Name, cfg.MaxBytes)
	if err != nil {
		return nil, err
	}
	discard := jetstream.DiscardNew
	if cfg.DropOldest {
		discard = jetstream.DiscardOld
	}
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        cfg.Name,
		Description: "Paddock audit events: one start and one finish per session operation",
		Subjects:    []string{subj.AllSessions(), subj.AllNodes()},
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
		return nil, fmt.Errorf("ensure stream %s: %w", cfg.Name, storage.ReservationError(err, cfg.Name, maxBytes))
	}
	return s, nil
}
