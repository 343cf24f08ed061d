package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// NodeState is what a node holds at a scrape: its sessions by status,
// its processes by state (running, exited) and its ready warm-pool
// sandboxes by image.
type NodeState struct {
	Node      string
	Sessions  map[string]int
	Processes map[string]int
	Pools     map[string]int
}

// NodeView is one node as the scheduler sees it.
type NodeView struct {
	Node string
	// Up: heard within the scheduler's node TTL, its status up and not
	// cordoned (the scheduler would place a session on it).
	Up       bool
	Capacity int
	Sessions int
	// HeartbeatAge is how long ago its last heartbeat came.
	HeartbeatAge time.Duration
}

var (
	sessionsDesc = prometheus.NewDesc(Namespace+"_node_sessions",
		"Sessions a node holds, by status.", []string{"node", "status"}, nil)
	processesDesc = prometheus.NewDesc(Namespace+"_node_processes",
		"Processes of a node's sessions, by state (running, exited and not yet collected).", []string{"node", "state"}, nil)
	poolReadyDesc = prometheus.NewDesc(Namespace+"_node_pool_ready",
		"Warm-pool sandboxes a node holds ready to claim, by image.", []string{"node", "image"}, nil)
	capacityDesc = prometheus.NewDesc(Namespace+"_scheduler_node_capacity",
		"Most sessions a node takes, as its last heartbeat said.", []string{"node"}, nil)
	nodeSessionsDesc = prometheus.NewDesc(Namespace+"_scheduler_node_sessions",
		"Sessions a node holds, as the scheduler counts them.", []string{"node"}, nil)
	heartbeatDesc = prometheus.NewDesc(Namespace+"_scheduler_node_heartbeat_age_seconds",
		"Seconds since the scheduler last heard a node's heartbeat.", []string{"node"}, nil)
	nodeUpDesc = prometheus.NewDesc(Namespace+"_scheduler_node_up",
		"1 when the scheduler would place a session on a node (heard within the node TTL, up, not cordoned), else 0.", []string{"node"}, nil)
	lagDesc = prometheus.NewDesc(Namespace+"_projector_lag_events",
		"Events the projector has yet to fold into its projections (stream sequences behind).", nil, nil)
	lagErrDesc = prometheus.NewDesc(Namespace+"_projector_lag_up",
		"1 when the projector's lag could be read at this scrape, else 0.", nil, nil)
)

// funcCollector reads its metrics from a function at every scrape.
type funcCollector struct {
	descs   []*prometheus.Desc
	collect func(ch chan<- prometheus.Metric)
}

func (c funcCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c funcCollector) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

// WatchNode reports the sessions and processes of a node from state,
// called at every scrape. It fails if a node is watched twice.
func (m *Metrics) WatchNode(state func() NodeState) error {
	if m == nil {
		return nil
	}
	return m.reg.Register(funcCollector{
		descs: []*prometheus.Desc{sessionsDesc, processesDesc, poolReadyDesc},
		collect: func(ch chan<- prometheus.Metric) {
			s := state()
			for status, n := range s.Sessions {
				ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, float64(n), s.Node, status)
			}
			for st, n := range s.Processes {
				ch <- prometheus.MustNewConstMetric(processesDesc, prometheus.GaugeValue, float64(n), s.Node, st)
			}
			for img, n := range s.Pools {
				ch <- prometheus.MustNewConstMetric(poolReadyDesc, prometheus.GaugeValue, float64(n), s.Node, img)
			}
		},
	})
}

// WatchScheduler reports each node the scheduler knows from nodes,
// called at every scrape. It fails if a scheduler is watched twice.
func (m *Metrics) WatchScheduler(nodes func() []NodeView) error {
	if m == nil {
		return nil
	}
	return m.reg.Register(funcCollector{
		descs: []*prometheus.Desc{capacityDesc, nodeSessionsDesc, heartbeatDesc, nodeUpDesc},
		collect: func(ch chan<- prometheus.Metric) {
			for _, n := range nodes() {
				up := 0.0
				if n.Up {
					up = 1
				}
				ch <- prometheus.MustNewConstMetric(capacityDesc, prometheus.GaugeValue, float64(n.Capacity), n.Node)
				ch <- prometheus.MustNewConstMetric(nodeSessionsDesc, prometheus.GaugeValue, float64(n.Sessions), n.Node)
				ch <- prometheus.MustNewConstMetric(heartbeatDesc, prometheus.GaugeValue, n.HeartbeatAge.Seconds(), n.Node)
				ch <- prometheus.MustNewConstMetric(nodeUpDesc, prometheus.GaugeValue, up, n.Node)
			}
		},
	})
}

// LagTimeout bounds the projector lag read of one scrape.
const LagTimeout = 2 * time.Second

// WatchProjector reports the projector's lag from lag, called at every
// scrape within LagTimeout. It fails if a projector is watched twice.
func (m *Metrics) WatchProjector(lag func(ctx context.Context) (uint64, error)) error {
	if m == nil {
		return nil
	}
	return m.reg.Register(funcCollector{
		descs: []*prometheus.Desc{lagDesc, lagErrDesc},
		collect: func(ch chan<- prometheus.Metric) {
			// A scrape carries no context; the read gets a bound of its own.
			ctx, cancel := context.WithTimeout(context.Background(), LagTimeout)
			defer cancel()
			n, err := lag(ctx)
			if err != nil {
				ch <- prometheus.MustNewConstMetric(lagErrDesc, prometheus.GaugeValue, 0)
				return
			}
			ch <- prometheus.MustNewConstMetric(lagErrDesc, prometheus.GaugeValue, 1)
			ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, float64(n))
		},
	})
}
