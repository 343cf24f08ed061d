package local

import (
	"context"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/nodes/runtime/changes"
)

// endWait bounds how long a command's window waits for the watch to
// catch up once the command has exited, when its ctx has ended.
const endWait = 5 * time.Second

// beginChanges opens a change window on the workspace for a command
// that asked for one (want) and returns what closes it: nil changes when
// not asked for or when the workspace cannot be watched. The watcher
// starts at the first command that asks, and again after a restore
// swapped the workspace; Stop and Shutdown close it.
func (s *Sandbox) beginChanges(want bool) func(ctx context.Context) *commands.Changes {
	if !want {
		return func(context.Context) *commands.Changes { return nil }
	}
	w := s.watcher()
	if w == nil {
		return func(context.Context) *commands.Changes { return nil }
	}
	tok := w.Begin()
	return func(ctx context.Context) *commands.Changes {
		if ctx.Err() != nil {
			// The command's own ctx ended (cancel, timeout): the record
			// is still worth the wait of a fence.
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), endWait)
			defer cancel()
		}
		c := w.End(ctx, tok)
		return &c
	}
}

// watcher returns the workspace's watcher, starting one if there is none
// or the one there is lost its root; nil when none can be started or the
// sandbox is not running.
func (s *Sandbox) watcher() *changes.Watcher {
	_, _ = s.fsRoot() // follows a workspace replaced under an Open sandbox
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	if s.watch != nil && !s.watch.Stale() {
		return s.watch
	}
	if s.watch != nil {
		_ = s.watch.Close()
		s.watch = nil
	}
	if s.checkRunning() != nil {
		return nil
	}
	w, err := changes.Start(changes.Config{Root: s.Dir()})
	if err != nil {
		return nil
	}
	s.watch = w
	return w
}

// closeWatcher stops the workspace's watcher, if it runs.
func (s *Sandbox) closeWatcher() {
	s.watchMu.Lock()
	w := s.watch
	s.watch = nil
	s.watchMu.Unlock()
	if w != nil {
		_ = w.Close()
	}
}

// Watching reports whether the sandbox's change watcher runs (for tests
// that check it stops with the sandbox).
func (s *Sandbox) Watching() bool {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	return s.watch != nil
}
