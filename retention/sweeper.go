package retention

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/paddock-dev/paddock/objectstore"
)

// Sweeper runs a retention sweep every interval until closed, and a sweep
// of orphan chunks every orphan grace period, so that a killed put's
// chunks go within two grace periods whatever the interval. An engine
// runs one (engine serve --gc-interval); several engines may sweep at
// once.
type Sweeper struct {
	store    *objectstore.Store
	sessions Sessions
	policy   Policy
	every    time.Duration
	logger   *slog.Logger

	mu     sync.Mutex         // guards cancel
	cancel context.CancelFunc // ends the loop, and cuts a sweep short
	wg     sync.WaitGroup
}

// NewSweeper returns a Sweeper of store that sweeps with policy every
// interval, reading the sessions' records from sessions. It fails when
// the policy does not validate or every is not positive. logger may be
// nil.
func NewSweeper(store *objectstore.Store, sessions Sessions, policy Policy, every time.Duration, logger *slog.Logger) (*Sweeper, error) {
	if err := policy.Validate(); err != nil {
		return nil, err
	}
	if every <= 0 {
		return nil, errors.New("retention: a sweep interval above 0")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Sweeper{store: store, sessions: sessions, policy: policy, every: every, logger: logger}, nil
}

// Start starts the sweep loop; Close stops it. A second Start does
// nothing.
func (s *Sweeper) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		return
	}
	// The loop outlives the start call: Close, not a caller's context,
	// ends it.
	root, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.loop(root)
	}()
}

func (s *Sweeper) loop(root context.Context) {
	t := time.NewTicker(s.every)
	defer t.Stop()
	grace := s.policy.orphanGrace()
	o := time.NewTicker(grace)
	defer o.Stop()
	for {
		orphans := false
		select {
		case <-root.Done():
			return
		case <-t.C:
		case <-o.C:
			orphans = true
		}
		ctx, cancel := context.WithTimeout(root, min(s.every, grace))
		what := "retention sweep"
		var removed []Removal
		var err error
		if orphans {
			what = "orphan chunk sweep"
			removed, err = SweepOrphans(ctx, s.store, s.policy, false, s.logger)
		} else {
			removed, err = Sweep(ctx, s.store, s.sessions, s.policy, false, s.logger)
		}
		cancel()
		if err != nil {
			s.logger.Warn(what+" failed", "err", err, "removed", len(removed))
		} else if len(removed) > 0 {
			s.logger.Info(what, "removed", len(removed), "bytes", RemovedBytes(removed))
		}
	}
}

// Close stops the loop, cutting a sweep in progress short, and waits for
// it. It is safe to call twice, and without Start.
func (s *Sweeper) Close() {
	s.mu.Lock()
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		s.wg.Wait()
	}
}

// RemovedBytes sums the sizes of rs.
func RemovedBytes(rs []Removal) int64 {
	var n int64
	for _, r := range rs {
		n += r.Size
	}
	return n
}
