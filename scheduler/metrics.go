package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/metrics"
)

// Recorder is what the scheduler records its placements into and reports
// its nodes to (metrics.Metrics).
type Recorder interface {
	// Placement records a placement (code "") or a rejection by code.
	Placement(op, code string)
	// WatchScheduler registers nodes, read at every scrape.
	WatchScheduler(nodes func() []metrics.NodeView) error
}

var _ Recorder = (*metrics.Metrics)(nil)

// watch reports the scheduler's nodes to its Recorder, if any.
func (s *Scheduler) watch() error {
	if s.cfg.Metrics == nil {
		return nil
	}
	if err := s.cfg.Metrics.WatchScheduler(s.metricsNodes); err != nil {
		return fmt.Errorf("scheduler: metrics: %w", err)
	}
	return nil
}

// reject records a placement the scheduler refused before asking a node.
func (s *Scheduler) reject(op string, code errcode.Code) {
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.Placement(op, string(code))
	}
}

// place places a session (placeOnNode) and records the answer: a
// placement, or a rejection by its error code.
func (s *Scheduler) place(ctx context.Context, w want, op, tenant string, body []byte) []byte {
	reply := s.placeOnNode(ctx, w, op, tenant, body)
	if s.cfg.Metrics != nil {
		var rep commands.Reply
		code := string(errcode.Internal) // a reply that does not decode
		if json.Unmarshal(reply, &rep) == nil {
			code = ""
			if rep.Error != nil {
				code = string(rep.Error.Code)
			}
		}
		s.cfg.Metrics.Placement(op, code)
	}
	return reply
}

// metricsNodes is every node the scheduler knows, read at a metrics
// scrape, sorted by id.
func (s *Scheduler) metricsNodes() []metrics.NodeView {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	out := make([]metrics.NodeView, 0, len(s.nodes))
	for id, r := range s.nodes {
		age := now.Sub(r.lastSeen)
		out = append(out, metrics.NodeView{
			Node: id, Capacity: r.info.Capacity, Sessions: r.info.Sessions, HeartbeatAge: age,
			Up: !r.lost && age <= s.cfg.NodeTTL && r.info.Status == "up" && !r.info.Cordoned,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}
