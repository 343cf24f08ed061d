package storage

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// DiskWatchConfig configures a DiskWatcher.
type DiskWatchConfig struct {
	// Paths are directories whose filesystems to watch (a state dir,
	// Docker's data root); required. Two on one filesystem are watched
	// as they are named.
	Paths []string
	// Thresholds default to DefaultThresholds.
	Thresholds *Thresholds
	// Interval between looks (default 5s).
	Interval time.Duration
	// Repeat is the least time between two warnings about a filesystem
	// that stays low (default 10 minutes).
	Repeat time.Duration
}

// Validate checks the config.
func (c DiskWatchConfig) Validate() error {
	if len(c.Paths) == 0 {
		return errors.New("storage: no paths to watch")
	}
	if c.Interval < 0 || c.Repeat < 0 {
		return errors.New("storage: negative interval or repeat")
	}
	if c.Thresholds != nil {
		return c.Thresholds.Validate()
	}
	return nil
}

// DiskWatcher watches the free space of filesystems with statfs (not
// JetStream's accounting, which knows nothing of other writers): it logs
// a warning when one falls below the warning or the critical threshold,
// again every Repeat while it stays there, and a note when it is back. A
// node asks it whether to refuse new sessions (Critical) and puts Disks in
// its heartbeats. Start starts its goroutine; Close stops it and waits.
type DiskWatcher struct {
	cfg    DiskWatchConfig
	t      Thresholds
	logger *slog.Logger

	mu     sync.Mutex // guards disks and cancel
	disks  []Disk
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// Only the watcher's goroutine (or a Look before Start) touches these.
	warned map[string]time.Time // path -> last warning logged
	level  map[string]Level     // path -> level last logged
}

// NewDiskWatcher returns a watcher of cfg's paths that has looked once; a
// nil logger logs nothing. It fails when cfg is invalid.
func NewDiskWatcher(cfg DiskWatchConfig, logger *slog.Logger) (*DiskWatcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Interval == 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.Repeat == 0 {
		cfg.Repeat = 10 * time.Minute
	}
	t := DefaultThresholds()
	if cfg.Thresholds != nil {
		t = *cfg.Thresholds
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	w := &DiskWatcher{cfg: cfg, t: t, logger: logger, warned: map[string]time.Time{}, level: map[string]Level{}}
	w.Look(time.Now())
	return w, nil
}

// Thresholds returns the thresholds the watcher applies.
func (w *DiskWatcher) Thresholds() Thresholds { return w.t }

// Disks returns each path's filesystem as last looked at.
func (w *DiskWatcher) Disks() []Disk {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Disk(nil), w.disks...)
}

// Critical returns the first watched filesystem at LevelCritical, if any.
func (w *DiskWatcher) Critical() (Disk, bool) {
	for _, d := range w.Disks() {
		if d.Level == LevelCritical {
			return d, true
		}
	}
	return Disk{}, false
}

// Start starts watching: a look every Interval, until Close. A second
// Start is a no-op.
func (w *DiskWatcher) Start(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil {
		return nil
	}
	// The watcher lives until Close, not as long as the start's context.
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.wg.Add(1)
	go func() { // owned by the DiskWatcher: Close cancels it and waits
		defer w.wg.Done()
		t := time.NewTicker(w.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				w.Look(now)
			}
		}
	}()
	return nil
}

// Close stops the watcher and waits for it. It is safe to call twice.
func (w *DiskWatcher) Close(context.Context) error {
	w.mu.Lock()
	if w.cancel != nil {
		w.cancel()
	}
	w.mu.Unlock()
	w.wg.Wait()
	return nil
}

// Look reads each filesystem once, as at now, and logs what is due. The
// watcher's goroutine calls it; a caller that has not started the watcher
// may too (one caller at a time).
func (w *DiskWatcher) Look(now time.Time) {
	disks := make([]Disk, 0, len(w.cfg.Paths))
	for _, p := range w.cfg.Paths {
		d, err := Stat(p, w.t)
		d.Err = err
		disks = append(disks, d)
		w.report(d, now)
	}
	w.mu.Lock()
	w.disks = disks
	w.mu.Unlock()
}

// report logs d's level when it changed, or when it stays low and the
// last warning is Repeat old.
func (w *DiskWatcher) report(d Disk, now time.Time) {
	attrs := []any{"path", d.Path, "free", d.Free, "total", d.Total, "level", d.Level.String()}
	last, seen := w.level[d.Path]
	switch {
	case d.Err != nil:
		if t, ok := w.warned[d.Path]; !ok || now.Sub(t) >= w.cfg.Repeat {
			w.logger.Warn("storage: cannot read the free space of a filesystem", "path", d.Path, "err", d.Err)
			w.warned[d.Path] = now
		}
		return
	case d.Level == LevelCritical:
		if last != LevelCritical || now.Sub(w.warned[d.Path]) >= w.cfg.Repeat {
			w.logger.Error("storage: filesystem critically full: new sessions are refused here until space is freed", attrs...)
			w.warned[d.Path] = now
		}
	case d.Level == LevelWarn:
		if last != LevelWarn || now.Sub(w.warned[d.Path]) >= w.cfg.Repeat {
			w.logger.Warn("storage: filesystem low on free space", attrs...)
			w.warned[d.Path] = now
		}
	case seen && last != LevelOK:
		w.logger.Info("storage: filesystem has free space again", attrs...)
		delete(w.warned, d.Path)
	}
	w.level[d.Path] = d.Level
}
