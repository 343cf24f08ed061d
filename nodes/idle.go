package nodes

import (
	"context"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
)

// Reasons of the stops and shutdowns a node makes by itself, recorded in
// the finish event (SnapshotFinish.Reason, StatusFinish.Reason).
const (
	// ReasonIdle: no operation and no running process for the session's
	// idle timeout; the node stopped it (persisting its workspace).
	ReasonIdle = "idle"
	// ReasonRetention: stopped longer than the node's stopped retention;
	// the node shut it down (its snapshots stay for a resume).
	ReasonRetention = "retention"
)

// working marks an op of s as running and returns the func that marks it
// done; both count as activity.
func (s *session) working() func() {
	s.active.Add(1)
	s.lastActive.Store(time.Now().UnixNano())
	return func() {
		s.lastActive.Store(time.Now().UnixNano())
		s.active.Add(-1)
	}
}

// idleFor reports how long s has been idle at now: no op in flight and no
// process running; 0 when it is busy.
func (s *session) idleFor(now time.Time) time.Duration {
	if s.active.Load() > 0 || s.procs.running() > 0 {
		return 0
	}
	return now.Sub(time.Unix(0, s.lastActive.Load()))
}

// stopIdle stops each running session idle past its idle timeout, through
// the one op path: a stop (which persists first) with the node as actor
// and reason idle in its finish. A session busy again by then is left
// alone.
func (a *Agent) stopIdle(ctx context.Context) {
	now := time.Now()
	for _, s := range a.held() {
		if ctx.Err() != nil {
			return
		}
		if s.idle <= 0 || s.getStatus() != projection.StatusRunning || s.idleFor(now) < s.idle {
			continue
		}
		reply := a.perform(ctx, s, commands.Request{Actor: "node:" + a.cfg.ID}, commands.OpStop, nil, func(ctx context.Context) (outcome, error) {
			out, err := runStop(ctx, a, s, nil)
			if d, ok := out.data.(events.SnapshotFinish); ok && err == nil {
				d.Reason = ReasonIdle
				out.data = d
			}
			return out, err
		})
		a.logger.Info("session idle; stopped", "tenant", s.tenant, "session", s.id, "idle_timeout", s.idle, "reply", string(reply))
	}
}

// shutRetained shuts down each session stopped longer than the policy's
// stopped retention, through the one op path, with reason retention.
func (a *Agent) shutRetained(ctx context.Context) {
	keep := a.cfg.Policy.StoppedRetention
	if keep <= 0 {
		return
	}
	now := time.Now()
	for _, s := range a.held() {
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		if s.status == projection.StatusStopped && s.stoppedAt.IsZero() {
			s.stoppedAt = now // stopped before this node took it up: count from now
		}
		due := s.status == projection.StatusStopped && now.Sub(s.stoppedAt) >= keep
		s.mu.Unlock()
		if !due {
			continue
		}
		reply := a.perform(ctx, s, commands.Request{Actor: "node:" + a.cfg.ID}, commands.OpShutdown, nil, func(ctx context.Context) (outcome, error) {
			out, err := runShutdown(ctx, a, s, nil)
			if err == nil {
				out.data = events.StatusFinish{Status: string(projection.StatusShutDown), Reason: ReasonRetention}
			}
			return out, err
		})
		a.logger.Info("session stopped past retention; shut down", "tenant", s.tenant, "session", s.id, "retention", keep, "reply", string(reply))
	}
}

// running counts the processes that have not exited.
func (t *procs) running() int {
	n := 0
	for _, p := range t.list() {
		p.mu.Lock()
		if !p.exited {
			n++
		}
		p.mu.Unlock()
	}
	return n
}
