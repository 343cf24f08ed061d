package objectstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/storage"
)

// DefaultBucket is the workspace archive bucket.
const DefaultBucket = "sbx_workspaces"

// Config sets the bucket's name and placement.
type Config struct {
	// Bucket name (default sbx_workspaces).
	Bucket string
	// Replicas (default 1).
	Replicas int
	// MaxBytes is the bucket's quota: JetStream reserves it, and a put
	// that does not fit is refused (storage_quota_exceeded) while other
	// streams go on. 0 keeps the quota an existing bucket has; a new one
	// is unbounded.
	MaxBytes int64
}

// Validate checks the config.
func (c Config) Validate() error {
	if c.Replicas < 0 || c.Replicas > 5 {
		return fmt.Errorf("objectstore: replicas %d outside 0..5", c.Replicas)
	}
	if c.MaxBytes < 0 {
		return errors.New("objectstore: negative max bytes")
	}
	return nil
}

// Ensure creates the bucket, or updates it to cfg, and returns it. It is
// idempotent.
func Ensure(ctx context.Context, js jetstream.JetStream, cfg Config) (jetstream.ObjectStore, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultBucket
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	maxBytes, err := storage.KeepMaxBytes(ctx, js, StreamName(cfg.Bucket), cfg.MaxBytes)
	if err != nil {
		return nil, err
	}
	os, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      cfg.Bucket,
		Description: "Paddock workspace archives",
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		MaxBytes:    maxBytes,
		Compression: false,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure object store %s: %w", cfg.Bucket, storage.ReservationError(err, StreamName(cfg.Bucket), maxBytes))
	}
	return os, nil
}

// StreamName is the stream that holds bucket.
func StreamName(bucket string) string { return "OBJ_" + bucket }

// SnapshotName returns the object name of a snapshot. Each part must be a
// valid subject token (no '.', '*', '>', whitespace), so names cannot
// collide across tenants or sessions; the error says which part is bad.
func SnapshotName(tenant, session, snapshot string) (string, error) {
	for _, p := range [][2]string{{"tenant", tenant}, {"session", session}, {"snapshot", snapshot}} {
		if err := commands.CheckToken(p[0], p[1]); err != nil {
			return "", err
		}
	}
	return tenant + "/" + session + "/" + snapshot + ".tar", nil
}
