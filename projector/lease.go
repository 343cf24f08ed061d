package projector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/paddock-dev/paddock/events"
)

// The engines of a deployment share the event partitions' projectors: each
// partition is projected by the one engine that holds its lease, a key of
// the LeaseBucket. The bucket's TTL (a stream MaxAge, judged by the
// server's clock, not the engines') removes a key that is not renewed in
// time, so the partition of an engine that died becomes free again.
//
//	partition.<k>  Lease{Owner, Projector, RenewedAt}  Create to claim,
//	                                                   Update(rev) to renew,
//	                                                   Delete(rev) to release
//	engine.<id>    Lease{Owner, RenewedAt}             Put by every live engine
//	                                                   (the count sets the share)

// The lease bucket and its defaults.
const (
	LeaseBucket = "sbx_partitions"
	// DefaultLeaseTTL is how long a lease (and an engine's presence) lives
	// without a renewal.
	DefaultLeaseTTL = 10 * time.Second
	// MinLeaseTTL is the shortest TTL a lease bucket may have: the renewals
	// and the fencing margin are fractions of it.
	MinLeaseTTL = time.Second
)

// The lease errors.
var (
	// ErrLeaseHeld is a claim of a partition whose lease another engine
	// holds (or held, until its TTL removes it).
	ErrLeaseHeld = errors.New("projector: partition lease held by another engine")
	// ErrLeaseLost is a renewal or release of a lease that is no longer the
	// caller's: its revision moved (another engine took it) or the TTL
	// removed it.
	ErrLeaseLost = errors.New("projector: partition lease lost")
)

// Lease is the value of a lease key (and of an engine's presence key,
// without Projector).
type Lease struct {
	// Owner is the engine holding the lease.
	Owner string `json:"owner"`
	// Projector names the owner's projector of the partition (its durable
	// consumer and checkpoint).
	Projector string `json:"projector,omitempty"`
	// RenewedAt is the owner's clock at the write, for people: expiry is
	// the bucket's TTL on the server's clock.
	RenewedAt time.Time `json:"renewed_at"`
}

// Owner is a partition's lease as read from the bucket.
type Owner struct {
	Partition int `json:"partition"`
	// Stream is the partition's events stream.
	Stream string `json:"stream"`
	Lease
	Revision uint64 `json:"revision"`
}

// LeaseConfig configures a lease bucket.
type LeaseConfig struct {
	// Bucket names it (default LeaseBucket).
	Bucket string
	// TTL is how long a key lives unrenewed (default DefaultLeaseTTL, at
	// least MinLeaseTTL). The last engine to ensure the bucket sets its
	// TTL; an engine fences by the smaller of its own and the bucket's
	// (Shared), so engines given different TTLs stay safe, but should not be.
	TTL time.Duration
	// Replicas of the bucket (default 1).
	Replicas int
}

// Validate checks the config.
func (c LeaseConfig) Validate() error {
	if c.TTL != 0 && c.TTL < MinLeaseTTL {
		return fmt.Errorf("projector: lease TTL %s below %s", c.TTL, MinLeaseTTL)
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		return fmt.Errorf("projector: lease bucket replicas %d outside 0..5", c.Replicas)
	}
	return nil
}

func (c LeaseConfig) withDefaults() LeaseConfig {
	if c.Bucket == "" {
		c.Bucket = LeaseBucket
	}
	if c.TTL == 0 {
		c.TTL = DefaultLeaseTTL
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	return c
}

// Leases is the lease bucket.
type Leases struct {
	kv  jetstream.KeyValue
	ttl time.Duration
}

// EnsureLeases creates the lease bucket, or updates it to cfg, and returns
// it. It fails on an invalid config or when the bucket cannot be made.
func EnsureLeases(ctx context.Context, js jetstream.JetStream, cfg LeaseConfig) (*Leases, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: cfg.Bucket, Description: "Paddock: which engine projects each event partition",
		History: 1, TTL: cfg.TTL, Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
		MaxBytes: 1 << 20, // a key per partition and per engine
	})
	if err != nil {
		return nil, fmt.Errorf("ensure bucket %s: %w", cfg.Bucket, err)
	}
	return &Leases{kv: kv, ttl: cfg.TTL}, nil
}

// OpenLeases opens the lease bucket as it is (bucket "" is LeaseBucket),
// for readers. It fails with jetstream.ErrBucketNotFound when no engine
// has shared its partitions.
func OpenLeases(ctx context.Context, js jetstream.JetStream, bucket string) (*Leases, error) {
	if bucket == "" {
		bucket = LeaseBucket
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", bucket, err)
	}
	l := &Leases{kv: kv}
	if l.ttl, err = l.CurrentTTL(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// TTL is how long a key of the bucket lives unrenewed, as it was when l
// was opened.
func (l *Leases) TTL() time.Duration { return l.ttl }

// CurrentTTL reads the bucket's TTL as it is now (another engine may have
// ensured the bucket with another). It fails if the bucket cannot be read.
func (l *Leases) CurrentTTL(ctx context.Context) (time.Duration, error) {
	st, err := l.kv.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("bucket %s: %w", l.kv.Bucket(), err)
	}
	return st.TTL(), nil
}

func partitionKey(k int) string      { return "partition." + strconv.Itoa(k) }
func engineKey(engine string) string { return "engine." + engine }

// Claim takes partition k's lease for lease.Owner and returns its
// revision. It fails with ErrLeaseHeld when the key exists (a live lease,
// or a dead one its TTL has not removed yet).
func (l *Leases) Claim(ctx context.Context, k int, lease Lease) (uint64, error) {
	data, err := json.Marshal(lease)
	if err != nil {
		return 0, err
	}
	rev, err := l.kv.Create(ctx, partitionKey(k), data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("%w: partition %d", ErrLeaseHeld, k)
	}
	if err != nil {
		return 0, fmt.Errorf("claim partition %d: %w", k, err)
	}
	return rev, nil
}

// Renew writes partition k's lease again at revision rev, the one its
// owner last wrote, and returns the new revision: the TTL starts over. It
// fails with ErrLeaseLost when the key is at another revision or gone.
func (l *Leases) Renew(ctx context.Context, k int, rev uint64, lease Lease) (uint64, error) {
	data, err := json.Marshal(lease)
	if err != nil {
		return 0, err
	}
	next, err := l.kv.Update(ctx, partitionKey(k), data, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, fmt.Errorf("%w: partition %d at revision %d", ErrLeaseLost, k, rev)
	}
	if err != nil {
		return 0, fmt.Errorf("renew partition %d: %w", k, err)
	}
	return next, nil
}

// Release deletes partition k's lease if it is still at revision rev, so
// that another engine can claim it at once. It fails with ErrLeaseLost
// when it is not.
func (l *Leases) Release(ctx context.Context, k int, rev uint64) error {
	err := l.kv.Delete(ctx, partitionKey(k), jetstream.LastRevision(rev))
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("%w: partition %d at revision %d", ErrLeaseLost, k, rev)
	}
	if err != nil {
		return fmt.Errorf("release partition %d: %w", k, err)
	}
	return nil
}

// Present records that engine is alive for another TTL.
func (l *Leases) Present(ctx context.Context, engine string) error {
	data, err := json.Marshal(Lease{Owner: engine, RenewedAt: time.Now().UTC()})
	if err != nil {
		return err
	}
	if _, err := l.kv.Put(ctx, engineKey(engine), data); err != nil {
		return fmt.Errorf("engine %s presence: %w", engine, err)
	}
	return nil
}

// Leave removes engine's presence (an engine that stops).
func (l *Leases) Leave(ctx context.Context, engine string) error {
	if err := l.kv.Delete(ctx, engineKey(engine)); err != nil {
		return fmt.Errorf("engine %s presence: %w", engine, err)
	}
	return nil
}

// Read returns the partitions' leases by partition, of an events stream
// whose first partition is stream ("" is events.DefaultStream), and the
// engines present, sorted. It fails if the bucket cannot be read or a
// value does not decode.
func (l *Leases) Read(ctx context.Context, stream string) (map[int]Owner, []string, error) {
	w, err := l.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, nil, fmt.Errorf("read bucket %s: %w", l.kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	idle := time.NewTimer(events.ReadStallTimeout)
	defer idle.Stop()
	owners := map[int]Owner{}
	var engines []string
	for {
		select {
		case <-idle.C:
			return nil, nil, fmt.Errorf("read bucket %s: %w", l.kv.Bucket(), events.ErrReadStalled)
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, nil, fmt.Errorf("read bucket %s: watcher closed", l.kv.Bucket())
			}
			if e == nil {
				sort.Strings(engines)
				return owners, engines, nil
			}
			var v Lease
			if err := json.Unmarshal(e.Value(), &v); err != nil {
				return nil, nil, fmt.Errorf("bucket %s key %s: %w", l.kv.Bucket(), e.Key(), err)
			}
			if id, ok := strings.CutPrefix(e.Key(), "engine."); ok {
				engines = append(engines, id)
				continue
			}
			tok, ok := strings.CutPrefix(e.Key(), "partition.")
			k, err := strconv.Atoi(tok)
			if !ok || err != nil || k < 0 || k >= events.MaxPartitions {
				continue // not a key this package writes
			}
			owners[k] = Owner{Partition: k, Stream: events.PartitionStream(stream, k), Lease: v, Revision: e.Revision()}
		}
	}
}

// ReadOwners returns the partitions' owners, by partition, from the
// deployment's lease bucket: none (and no error) when no engine shares its
// partitions by lease.
func ReadOwners(ctx context.Context, js jetstream.JetStream) ([]Owner, error) {
	l, err := OpenLeases(ctx, js, "")
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	m, _, err := l.Read(ctx, "")
	if err != nil {
		return nil, err
	}
	out := make([]Owner, 0, len(m))
	for _, o := range m {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out, nil
}
