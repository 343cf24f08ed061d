package projector

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/storage"
)

// The buckets and keys the projector writes.
const (
	SessionsBucket = "sbx_sessions"
	NodesBucket    = "sbx_nodes"
	// StateBucket holds the checkpoints (checkpoint.<name>) and the stray
	// events' record (StrayKey).
	StateBucket = "sbx_projector"
	StrayKey    = "stray"
	// DefaultName names the durable consumer and the checkpoint of a
	// projector that was given no name.
	DefaultName = "sbx_projector"
)

// CheckpointKey is the StateBucket key of a projector's checkpoint.
func CheckpointKey(name string) string { return "checkpoint." + name }

// Config configures a Projector.
type Config struct {
	// Name names the durable consumer and the checkpoint (default
	// DefaultName). Several engines projecting into the same buckets each
	// take their own name: their writes are compare-and-set and idempotent,
	// so they agree.
	Name string
	// Stream is the events stream (default events.DefaultStream) and Prefix
	// its subjects' prefix (default sbx).
	Stream string
	Prefix string
	// Partitions is the deployment's number of event partitions (0: 1).
	// A projector folds one partition, the stream Stream names: a
	// partitioned deployment runs one per partition (see PartitionConfig).
	Partitions int
	// Replicas of the buckets (default 1).
	Replicas int
	// MaxBytes bounds buckets by name (SessionsBucket, NodesBucket,
	// StateBucket). A bucket it does not bound keeps the limit it has; a
	// new one is unbounded. A bucket at its limit refuses writes: the
	// projector stalls and retries, the events are untouched.
	MaxBytes map[string]int64
	// Batch is the most events applied in one round (default 1024). The
	// events of one key in a round cost one write.
	Batch int
	// Workers bounds the keys written at once (default 16).
	Workers int
	// CheckpointInterval is the longest time between checkpoint writes
	// while events keep coming (default 1s). The projector also writes one
	// whenever it has caught up with the stream.
	CheckpointInterval time.Duration
	// Resume starts the projector from the furthest checkpoint any
	// projector of the same partition (NamePartition of the names) stored,
	// when that is past its own and not past the stream's end: every event
	// up to a checkpoint is in the buckets, whoever wrote it. An engine that
	// takes over a partition's lease sets it, so that it goes on where the
	// partition's last owner stopped instead of folding the partition from
	// its own older checkpoint. It assumes the state bucket serves one
	// deployment (one events stream per partition).
	Resume bool
}

// PartitionConfig is c for partition k of n: the partition's stream, and
// for k > 0 a name of its own (Name_p<k>; partition 0 keeps Name, so an
// unpartitioned deployment's projector is unchanged).
func (c Config) PartitionConfig(n, k int) Config {
	c.Partitions = n
	c.Stream = events.PartitionStream(c.Stream, k)
	if k > 0 {
		if c.Name == "" {
			c.Name = DefaultName
		}
		c.Name = fmt.Sprintf("%s_p%d", c.Name, k)
	}
	return c
}

// NamePartition is the partition a projector of this name folds, as
// PartitionConfig names it: k for a name ending in _p<k>, else 0.
func NamePartition(name string) int {
	i := strings.LastIndex(name, "_p")
	if i < 0 {
		return 0
	}
	k, err := strconv.Atoi(name[i+2:])
	if err != nil || k < 1 || strconv.Itoa(k) != name[i+2:] {
		return 0
	}
	return k
}

// Validate checks the config.
func (c Config) Validate() error {
	if c.Name != "" {
		for _, r := range c.Name {
			if !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return fmt.Errorf("projector: name %q: only letters, digits, '-' and '_'", c.Name)
			}
		}
	}
	if err := events.ValidatePartitions(c.Partitions); err != nil {
		return fmt.Errorf("projector: %w", err)
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		return fmt.Errorf("projector: replicas %d outside 0..5", c.Replicas)
	}
	if c.Batch < 0 || c.Workers < 0 || c.CheckpointInterval < 0 {
		return fmt.Errorf("projector: negative batch, workers or interval")
	}
	for b, n := range c.MaxBytes {
		if n < 0 {
			return fmt.Errorf("projector: bucket %s: negative max bytes", b)
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Stream == "" {
		c.Stream = events.DefaultStream
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Batch == 0 {
		c.Batch = 1024
	}
	if c.Workers == 0 {
		c.Workers = 16
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = time.Second
	}
	return c
}

// Buckets are the projection's KV buckets.
type Buckets struct {
	Sessions, Nodes, State jetstream.KeyValue
	// js reads keys from the buckets' stream leaders (ReadLeader).
	js jetstream.JetStream
}

// EnsureBuckets creates the projection's buckets, or updates them to cfg,
// and returns them. It is idempotent.
func EnsureBuckets(ctx context.Context, js jetstream.JetStream, cfg Config) (Buckets, error) {
	if err := cfg.Validate(); err != nil {
		return Buckets{}, err
	}
	cfg = cfg.withDefaults()
	b := Buckets{js: js}
	for _, x := range []struct {
		kv   *jetstream.KeyValue
		name string
		desc string
	}{
		{&b.Sessions, SessionsBucket, "Paddock sessions, projected from SBX_EVENTS"},
		{&b.Nodes, NodesBucket, "Paddock nodes, projected from SBX_EVENTS"},
		{&b.State, StateBucket, "Paddock projector checkpoints and stray events"},
	} {
		maxBytes, err := storage.KeepMaxBytes(ctx, js, "KV_"+x.name, cfg.MaxBytes[x.name])
		if err != nil {
			return Buckets{}, fmt.Errorf("ensure bucket %s: %w", x.name, err)
		}
		kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: x.name, Description: x.desc, History: 1,
			Storage: jetstream.FileStorage, Replicas: cfg.Replicas, MaxBytes: maxBytes,
		})
		if err != nil {
			return Buckets{}, fmt.Errorf("ensure bucket %s: %w", x.name, storage.ReservationError(err, "KV_"+x.name, maxBytes))
		}
		*x.kv = kv
	}
	return b, nil
}

// OpenBuckets opens the projection's buckets as they are, for readers
// that must not change them. It fails with jetstream.ErrBucketNotFound
// when a bucket does not exist (no projector has run).
func OpenBuckets(ctx context.Context, js jetstream.JetStream) (Buckets, error) {
	b := Buckets{js: js}
	for _, x := range []struct {
		kv   *jetstream.KeyValue
		name string
	}{{&b.Sessions, SessionsBucket}, {&b.Nodes, NodesBucket}, {&b.State, StateBucket}} {
		kv, err := js.KeyValue(ctx, x.name)
		if err != nil {
			return Buckets{}, fmt.Errorf("bucket %s: %w", x.name, err)
		}
		*x.kv = kv
	}
	return b, nil
}
