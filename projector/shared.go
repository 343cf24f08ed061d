package projector

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Shared runs the projectors of the partitions its engine holds the lease
// of (lease.go), and claims, renews and gives up leases so that the
// engines present share the partitions.
//
// The share: with E engines present (engine.<id> keys) and N partitions,
// an engine claims free partitions until it holds ceil(N/E), and releases
// its highest partitions beyond that (an engine joined). Claims start at a
// partition that depends on the engine's id, so engines starting together
// seldom race for the same key; when they do, Create lets one win.
//
// Fencing: an engine holds a partition until the deadline
//
//	(send time of the last renewal that succeeded) + TTL - TTL/4
//
// by its own clock. The server removes the key no earlier than TTL after
// it wrote it, which is after that send (TTL: the smaller of the engine's
// own and the bucket's, read every round); so an engine whose renewals fail
// (cut off, paused, its revision moved) stops that partition's projector
// (Close bounded by TTL/8) before the key can go and another engine claim
// it. A renewal that fails with ErrLeaseLost stops it at once.
//
// Two projectors of one partition at a time would still be harmless: every
// record write is a compare-and-set at the record's revision and skips
// the events the record already took (doc.go), so they would agree and only
// do the work twice. The lease divides the work; it is not what keeps the
// projection right.
//
//	free ──Claim──▶ held ──Renew ok──▶ held
//	 ▲                │
//	 │                ├─ Renew: ErrLeaseLost ──▶ stopped (not released)
//	 │                ├─ deadline passed ──────▶ stopped (not released)
//	 └──Release◀──────┴─ over the share, or Run's ctx ended: stopped first
type Shared struct {
	js     jetstream.JetStream
	cfg    SharedConfig
	logger *slog.Logger

	// ttl is the TTL the engine fences by: the smaller of its own and the
	// bucket's as last read (Run's goroutine only).
	ttl time.Duration

	mu   sync.Mutex // guards held
	held map[int]*holding
}

// holding is a partition this engine holds, and its projector.
type holding struct {
	rev      uint64
	deadline time.Time
	proj     *Projector
}

// SharedConfig configures a Shared.
type SharedConfig struct {
	// Engine names this engine among those sharing the partitions: unique,
	// stable across restarts (an engine that comes back before its leases
	// expire takes them up again), letters, digits, '-' and '_'.
	Engine string
	// Projector is the configuration each partition's projector is made
	// from (PartitionConfig, with Resume set). Its Partitions is the
	// deployment's number of partitions.
	Projector Config
	// Leases is the lease bucket's.
	Leases LeaseConfig
	// OnChange, when set, is called after a partition's projector started
	// (projecting true) and after it stopped (false), from Run's goroutine:
	// for metrics and tests. It must not block.
	OnChange func(partition int, projecting bool)
}

// Validate checks the config.
func (c SharedConfig) Validate() error {
	if c.Engine == "" {
		return errors.New("projector: shared: no engine name")
	}
	if err := (Config{Name: c.Engine}).Validate(); err != nil {
		return fmt.Errorf("projector: shared: engine %q: only letters, digits, '-' and '_'", c.Engine)
	}
	if err := c.Projector.Validate(); err != nil {
		return err
	}
	return c.Leases.Validate()
}

// NewShared returns a Shared of the partitions through js. It fails on an
// invalid config.
func NewShared(js jetstream.JetStream, cfg SharedConfig, logger *slog.Logger) (*Shared, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg.Leases = cfg.Leases.withDefaults()
	cfg.Projector.Partitions = max(cfg.Projector.Partitions, 1)
	return &Shared{
		js: js, cfg: cfg, held: map[int]*holding{}, ttl: cfg.Leases.TTL,
		logger: logger.With("component", "partition-leases", "engine", cfg.Engine),
	}, nil
}

// Held returns the partitions this engine holds and projects, in order.
func (s *Shared) Held() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.held))
}

// Lag is the sum of the held partitions' projectors' lag (0 when it holds
// none). It fails if a projector is not set up yet or its stream cannot
// be read.
func (s *Shared) Lag(ctx context.Context) (uint64, error) {
	s.mu.Lock()
	ps := make([]*Projector, 0, len(s.held))
	for _, h := range s.held {
		ps = append(ps, h.proj)
	}
	s.mu.Unlock()
	return SumLag(ctx, ps)
}

// Run shares the partitions until ctx ends, then stops the projectors,
// releases the leases and the engine's presence (within the TTL), and
// returns nil. It returns early only with ctx's error while the bucket
// cannot be made.
func (s *Shared) Run(ctx context.Context) error {
	var leases *Leases
	for attempt := 1; ; attempt++ {
		var err error
		if leases, err = s.ensure(ctx); err == nil {
			break
		}
		if attempt == 1 || attempt%20 == 0 {
			s.logger.Warn("lease bucket not ready, will retry", "attempt", attempt, "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(s.ttl/3, time.Duration(50<<min(attempt, 6))*time.Millisecond)):
		}
	}
	defer s.stopAll(leases)
	for {
		s.round(ctx, leases)
		next := time.Now().Add(s.ttl / 3)
		if d, ok := s.earliest(); ok && d.Before(next) {
			next = d
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func (s *Shared) ensure(ctx context.Context) (*Leases, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Leases.TTL)
	defer cancel()
	return EnsureLeases(ctx, s.js, s.cfg.Leases)
}

// round renews what the engine holds, drops what it lost, then claims or
// releases to reach its share.
func (s *Shared) round(ctx context.Context, leases *Leases) {
	// Another engine may have set the bucket's TTL shorter than this
	// one's: fence by the shorter.
	if err := s.call(ctx, func(ctx context.Context) error {
		t, err := leases.CurrentTTL(ctx)
		if err == nil && t > 0 {
			s.ttl = min(s.cfg.Leases.TTL, t)
		}
		return err
	}); err != nil {
		s.logger.Warn("reading the lease bucket's TTL", "err", err)
	}
	ttl := s.ttl
	s.fence()
	if err := s.call(ctx, func(ctx context.Context) error { return leases.Present(ctx, s.cfg.Engine) }); err != nil {
		s.logger.Warn("recording the engine's presence", "err", err)
	}
	for _, k := range s.Held() {
		h := s.holding(k)
		if h == nil {
			continue
		}
		sent := time.Now()
		var rev uint64
		// Not cut short by Run's end: a renewal whose outcome is unknown
		// would leave a revision the release on stop cannot match.
		err := s.call(context.WithoutCancel(ctx), func(ctx context.Context) (err error) {
			rev, err = leases.Renew(ctx, k, h.rev, s.lease(k))
			return err
		})
		switch {
		case err == nil:
			s.mu.Lock()
			h.rev, h.deadline = rev, sent.Add(ttl-ttl/4)
			s.mu.Unlock()
		case errors.Is(err, ErrLeaseLost):
			s.logger.Warn("partition lease lost: stopping its projector", "partition", k, "err", err)
			s.drop(k)
		default:
			s.logger.Warn("renewing a partition lease (its projector stops at the deadline)", "partition", k, "err", err)
		}
		s.fence()
	}
	var (
		owners  map[int]Owner
		engines []string
	)
	if err := s.call(ctx, func(ctx context.Context) (err error) {
		owners, engines, err = leases.Read(ctx, s.cfg.Projector.Stream)
		return err
	}); err != nil {
		s.logger.Warn("reading the partition leases", "err", err)
		return
	}
	n := s.cfg.Projector.Partitions
	present := len(engines)
	if !slices.Contains(engines, s.cfg.Engine) {
		present++
	}
	share := (n + present - 1) / present
	held := s.Held()
	for i := len(held) - 1; i >= share && ctx.Err() == nil; i-- {
		k := held[i]
		h := s.holding(k)
		s.logger.Info("releasing a partition over the engine's share", "partition", k, "engines", present, "share", share)
		s.drop(k)
		if err := s.call(ctx, func(ctx context.Context) error { return leases.Release(ctx, k, h.rev) }); err != nil {
			s.logger.Warn("releasing a partition lease (its TTL frees it)", "partition", k, "err", err)
		}
	}
	start := s.offset(n)
	for i := 0; i < n && len(s.Held()) < share && ctx.Err() == nil; i++ {
		k := (start + i) % n
		if s.holding(k) != nil {
			continue
		}
		o, taken := owners[k]
		if taken && o.Owner != s.cfg.Engine {
			continue
		}
		sent := time.Now()
		var rev uint64
		err := s.call(ctx, func(ctx context.Context) (err error) {
			if taken { // ours from this engine's previous life
				rev, err = leases.Renew(ctx, k, o.Revision, s.lease(k))
			} else {
				rev, err = leases.Claim(ctx, k, s.lease(k))
			}
			return err
		})
		if err != nil {
			if !errors.Is(err, ErrLeaseHeld) && !errors.Is(err, ErrLeaseLost) {
				s.logger.Warn("claiming a partition", "partition", k, "err", err)
			}
			continue
		}
		if err := s.take(ctx, k, rev, sent.Add(ttl-ttl/4)); err != nil {
			s.logger.Error("starting a partition's projector", "partition", k, "err", err)
			_ = s.call(ctx, func(ctx context.Context) error { return leases.Release(ctx, k, rev) })
		}
	}
}

// call runs one lease operation bounded by a third of the TTL and by the
// earliest deadline of a held partition, so that a hung call cannot hold
// a projector past it.
func (s *Shared) call(ctx context.Context, fn func(context.Context) error) error {
	d := time.Now().Add(s.ttl / 3)
	if e, ok := s.earliest(); ok && e.Before(d) {
		d = e
	}
	cctx, cancel := context.WithDeadline(ctx, d)
	defer cancel()
	return fn(cctx)
}

// fence stops the projector of every partition past its deadline.
func (s *Shared) fence() {
	now := time.Now()
	for _, k := range s.Held() {
		if h := s.holding(k); h != nil && !now.Before(h.deadline) {
			s.logger.Warn("partition lease not renewed in time: stopping its projector", "partition", k)
			s.drop(k)
		}
	}
}

// take starts partition k's projector, held at revision rev until
// deadline.
func (s *Shared) take(ctx context.Context, k int, rev uint64, deadline time.Time) error {
	cfg := s.cfg.Projector.PartitionConfig(s.cfg.Projector.Partitions, k)
	cfg.Resume = true
	p, err := New(s.js, cfg, s.logger)
	if err == nil {
		err = p.Start(ctx)
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.held[k] = &holding{rev: rev, deadline: deadline, proj: p}
	s.mu.Unlock()
	s.logger.Info("partition lease taken: projecting it", "partition", k, "projector", cfg.Name)
	s.changed(k, true)
	return nil
}

// drop stops partition k's projector, within TTL/8, and forgets it; it
// does not touch the lease.
func (s *Shared) drop(k int) {
	s.mu.Lock()
	h := s.held[k]
	delete(s.held, k)
	s.mu.Unlock()
	if h == nil {
		return
	}
	// Not the engine's ctx: the projector stops within its own bound
	// whether or not the engine is stopping.
	ctx, cancel := context.WithTimeout(context.Background(), s.ttl/8)
	defer cancel()
	if err := h.proj.Close(ctx); err != nil {
		s.logger.Warn("stopping a partition's projector", "partition", k, "err", err)
	}
	s.changed(k, false)
}

func (s *Shared) changed(k int, projecting bool) {
	if s.cfg.OnChange != nil {
		s.cfg.OnChange(k, projecting)
	}
}

// stopAll stops every projector and releases the leases and the engine's
// presence, each release within TTL/3 (an engine that cannot reach the
// bucket leaves them to expire).
func (s *Shared) stopAll(leases *Leases) {
	// Run's ctx has ended: each release is bounded on its own, so that a
	// slow projector's close does not eat the others' time.
	bounded := func(fn func(context.Context) error) error {
		ctx, cancel := context.WithTimeout(context.Background(), s.ttl/3)
		defer cancel()
		return fn(ctx)
	}
	for _, k := range s.Held() {
		h := s.holding(k)
		s.drop(k)
		err := bounded(func(ctx context.Context) error { return leases.Release(ctx, k, h.rev) })
		if errors.Is(err, ErrLeaseLost) {
			// A renewal that timed out may have been written all the
			// same: the key is still this engine's at another revision.
			err = bounded(func(ctx context.Context) error {
				owners, _, err := leases.Read(ctx, s.cfg.Projector.Stream)
				if o, ok := owners[k]; err == nil && ok && o.Owner == s.cfg.Engine {
					return leases.Release(ctx, k, o.Revision)
				}
				return err
			})
		}
		if err != nil {
			s.logger.Warn("releasing a partition lease on stop", "partition", k, "err", err)
		}
	}
	if err := bounded(func(ctx context.Context) error { return leases.Leave(ctx, s.cfg.Engine) }); err != nil {
		s.logger.Warn("removing the engine's presence on stop", "err", err)
	}
}

func (s *Shared) holding(k int) *holding {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[k]
}

// earliest is the earliest deadline of a held partition.
func (s *Shared) earliest() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var d time.Time
	for _, h := range s.held {
		if d.IsZero() || h.deadline.Before(d) {
			d = h.deadline
		}
	}
	return d, !d.IsZero()
}

// lease is the value this engine writes for partition k.
func (s *Shared) lease(k int) Lease {
	name := s.cfg.Projector.PartitionConfig(s.cfg.Projector.Partitions, k).Name
	if name == "" {
		name = DefaultName
	}
	return Lease{Owner: s.cfg.Engine, Projector: name, RenewedAt: time.Now().UTC()}
}

// offset is the partition this engine's claims start at.
func (s *Shared) offset(n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s.cfg.Engine))
	return int(h.Sum32() % uint32(n))
}
