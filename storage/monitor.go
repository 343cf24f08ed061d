package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// MonitorConfig configures a Monitor.
type MonitorConfig struct {
	// Streams are the streams to watch; required unless List is set.
	Streams []string
	// List, when set, names the streams to watch at each look (a
	// deployment's event partitions are known only once its first events
	// stream is); when it fails the look watches Streams.
	List func(ctx context.Context) ([]string, error)
	// Interval between looks (default 30s).
	Interval time.Duration
	// Repeat is the least time between two warnings about one stream that
	// stays nearly full (default 10 minutes).
	Repeat time.Duration
}

// Validate checks the config.
func (c MonitorConfig) Validate() error {
	if len(c.Streams) == 0 && c.List == nil {
		return errors.New("storage monitor: no streams to watch")
	}
	if c.Interval < 0 || c.Repeat < 0 {
		return errors.New("storage monitor: negative interval or repeat")
	}
	return nil
}

// Monitor logs a warning when a watched stream reaches WarnPercent of its
// limit, again every Repeat while it stays there, and a note when it is
// back below. Start starts its goroutine; Close stops it and waits.
type Monitor struct {
	js     jetstream.JetStream
	cfg    MonitorConfig
	logger *slog.Logger

	mu     sync.Mutex // guards cancel
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// Only the monitor's goroutine touches these.
	warned map[string]time.Time // stream -> last "nearly full" logged
	failed map[string]time.Time // stream -> last read error logged
}

// NewMonitor returns a monitor of cfg's streams on js; a nil logger logs
// nothing. It fails when cfg is invalid.
func NewMonitor(js jetstream.JetStream, cfg MonitorConfig, logger *slog.Logger) (*Monitor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Interval == 0 {
		cfg.Interval = 30 * time.Second
	}
	if cfg.Repeat == 0 {
		cfg.Repeat = 10 * time.Minute
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Monitor{js: js, cfg: cfg, logger: logger, warned: map[string]time.Time{}, failed: map[string]time.Time{}}, nil
}

// Start starts watching: a look at once, then one every Interval, until
// Close. A second Start is a no-op.
func (m *Monitor) Start(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cancel != nil {
		return nil
	}
	// The monitor lives until Close, not as long as the start's context.
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.wg.Add(1)
	go func() { // owned by the Monitor: Close cancels it and waits
		defer m.wg.Done()
		m.run(ctx)
	}()
	return nil
}

// Close stops the monitor and waits for it. It is safe to call twice.
func (m *Monitor) Close(context.Context) error {
	m.mu.Lock()
	if m.cancel != nil {
		m.cancel()
	}
	m.mu.Unlock()
	m.wg.Wait()
	return nil
}

func (m *Monitor) run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		m.look(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// look reads each stream's usage once and logs what is due.
func (m *Monitor) look(ctx context.Context, now time.Time) {
	names := m.cfg.Streams
	if m.cfg.List != nil {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if l, err := m.cfg.List(lctx); err == nil {
			names = l
		}
		cancel()
	}
	for _, name := range names {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		u, err := Read(lctx, m.js, name)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			delete(m.failed, name)
		}
		last, warned := m.warned[name]
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			// Not made yet (or not this engine's): nothing to watch.
		case err != nil:
			if f, ok := m.failed[name]; !ok || now.Sub(f) >= m.cfg.Repeat {
				m.logger.Warn("storage: cannot read a stream's usage", "stream", name, "err", err)
				m.failed[name] = now
			}
		case u.Warn():
			if !warned || now.Sub(last) >= m.cfg.Repeat {
				m.logger.Warn("storage: stream nearly full", "stream", name, "bytes", u.Bytes, "max_bytes", u.MaxBytes,
					"percent", fmt.Sprintf("%.1f", u.Percent()), "at_limit", atLimit(u))
				m.warned[name] = now
			}
		case warned:
			m.logger.Info("storage: stream below the warning level again", "stream", name, "bytes", u.Bytes, "max_bytes", u.MaxBytes,
				"percent", fmt.Sprintf("%.1f", u.Percent()))
			delete(m.warned, name)
		}
	}
}

// atLimit says what happens when the stream reaches its limit.
func atLimit(u Usage) string {
	if u.DropsOldest {
		return "its oldest messages are dropped"
	}
	return "writes to it are refused"
}
