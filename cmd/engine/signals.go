package main

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/cmd/internal/metricsflags"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/metrics"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/provision"
	"github.com/paddock-dev/paddock/scheduler"
	"github.com/paddock-dev/paddock/storage"
)

// readyLag is the most events the projector may be behind for the engine
// to answer /readyz: caught up, give or take a burst in flight.
const readyLag = 1000

// watchCluster registers the engine's cluster-wide gauges (JetStream
// storage against its limits, sessions by status from the projection)
// and its readiness checks (JetStream reachable, the in-process node
// registered with the scheduler) in m. Nothing here polls: each is read
// at a scrape or a probe. It does nothing for a nil m.
func watchCluster(m *metrics.Metrics, js jetstream.JetStream, sch *scheduler.Scheduler, maxStore int64, nodeID string, localNode bool) error {
	if m == nil {
		return nil
	}
	if err := m.WatchStorage(func(ctx context.Context) (metrics.StoreUsage, error) { return storeUsage(ctx, js, maxStore) }); err != nil {
		return err
	}
	sessions := &sessionCounter{js: js}
	if err := m.WatchSessions(sessions.count); err != nil {
		return err
	}
	metricsflags.ReadyJetStream(m, js)
	if localNode {
		m.Ready().Add("node", func(context.Context) error {
			if !slices.ContainsFunc(sch.Nodes(), func(n events.NodeInfo) bool { return n.Node == nodeID }) {
				return fmt.Errorf("node %s is not registered with the scheduler (no heartbeat within --node-ttl, or not up)", nodeID)
			}
			return nil
		})
	}
	return nil
}

// watchProjector adds the projector's readiness check: its lag can be
// read (JetStream answers, it is set up) and is at most readyLag (on a
// partitioned deployment, lagOf sums the partitions' lags).
func watchProjector(m *metrics.Metrics, lagOf func(context.Context) (uint64, error)) {
	m.Ready().Add("projector", func(ctx context.Context) error {
		lag, err := lagOf(ctx)
		if err != nil {
			return err
		}
		if lag > readyLag {
			return fmt.Errorf("projector is %d events behind (more than %d)", lag, readyLag)
		}
		return nil
	})
}

// storeUsage reads the JetStream account's file store and Paddock's
// streams against their limits. The store's limit is the account's, else
// serverMax (the embedded server's max_file_store, 0 for an external one:
// its limit is not the account's to read).
func storeUsage(ctx context.Context, js jetstream.JetStream, serverMax int64) (metrics.StoreUsage, error) {
	ai, err := js.AccountInfo(ctx)
	if err != nil {
		return metrics.StoreUsage{}, err
	}
	u := metrics.StoreUsage{Bytes: ai.Store, MaxBytes: ai.Limits.MaxStore}
	if u.MaxBytes <= 0 {
		u.MaxBytes = serverMax
	}
	names, err := provision.StreamsOf(ctx, js)
	if err != nil {
		names = provision.Streams() // the events stream not made yet
	}
	for _, name := range names {
		su, err := storage.Read(ctx, js, name)
		if err != nil {
			continue // not made yet (the buckets come with the projector)
		}
		u.Streams = append(u.Streams, metrics.StreamUsage{Stream: su.Stream, Bytes: su.Bytes, MaxBytes: su.MaxBytes})
	}
	return u, nil
}

// sessionCounter counts the sessions projection by status at a scrape,
// opening the projection once it exists.
type sessionCounter struct {
	js jetstream.JetStream

	mu       sync.Mutex // guards sessions
	sessions *projector.Sessions
}

func (c *sessionCounter) count(ctx context.Context) (map[string]int, error) {
	c.mu.Lock()
	s := c.sessions
	c.mu.Unlock()
	if s == nil {
		var err error
		if s, err = projector.OpenSessions(ctx, c.js); err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.sessions = s
		c.mu.Unlock()
	}
	recs, err := s.List(ctx, ">")
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, r := range recs {
		out[string(r.Status)]++
	}
	return out, nil
}
