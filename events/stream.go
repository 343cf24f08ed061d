package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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
	// MaxAge and MaxBytes bound retention (0: unlimited). Past them the
	// oldest events go first, and replay can no longer see a session whole.
	MaxAge   time.Duration
	MaxBytes int64
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
	maxBytes := cfg.MaxBytes
	if maxBytes == 0 {
		maxBytes = -1
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
		Duplicates:  cfg.Duplicates,
		DenyDelete:  true,
		DenyPurge:   true,
		AllowDirect: true,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
	}
	return s, nil
}
