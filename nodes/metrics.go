package nodes

import (
	"context"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/metrics"
)

// observeOp records an operation that ran (its finish event f built) in
// the node's metrics.
func (a *Agent) observeOp(s *session, op commands.Op, f *events.Event, d time.Duration) {
	if a.cfg.Metrics == nil {
		return
	}
	outcome := metrics.OutcomeOK
	switch {
	case f.ErrorCode != "":
		outcome = metrics.OutcomeError
	case f.OK != nil && !*f.OK:
		outcome = metrics.OutcomeFailed
	}
	a.cfg.Metrics.Op(string(op), s.runtime, outcome, f.ErrorCode, d)
}

// appendEvent appends ev to the session's history (its chain) and
// records the append in the node's metrics.
func (a *Agent) appendEvent(ctx context.Context, s *session, ev *events.Event) error {
	began := time.Now()
	err := a.fenced(s, s.chain.Append(ctx, ev))
	a.cfg.Metrics.Append(time.Since(began), err)
	return err
}

// metricsState is the node's sessions by status and processes by state,
// read at a metrics scrape.
func (a *Agent) metricsState() metrics.NodeState {
	a.mu.Lock()
	held := make([]*session, 0, len(a.sessions))
	for _, s := range a.sessions {
		held = append(held, s)
	}
	a.mu.Unlock()
	st := metrics.NodeState{Node: a.cfg.ID, Sessions: map[string]int{}, Processes: map[string]int{"running": 0, "exited": 0}, Pools: a.poolFree()}
	for _, s := range held {
		st.Sessions[string(s.getStatus())]++
		for _, p := range s.procs.list() {
			p.mu.Lock()
			exited := p.exited
			p.mu.Unlock()
			if exited {
				st.Processes["exited"]++
			} else {
				st.Processes["running"]++
			}
		}
	}
	return st
}
