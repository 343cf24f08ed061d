package metrics

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/paddock-dev/paddock/health"
)

// Namespace prefixes every metric name.
const Namespace = "paddock"

// Outcomes of an operation (label outcome of paddock_node_ops_total).
const (
	// OutcomeOK: the operation succeeded.
	OutcomeOK = "ok"
	// OutcomeFailed: it ran and reported failure without an error (an
	// exec that exited non-zero).
	OutcomeFailed = "failed"
	// OutcomeError: it ended with an error code.
	OutcomeError = "error"
)

// latencyBuckets (seconds) span a fast file op to a long exec.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

// appendBuckets (seconds) span a JetStream append, fsync included.
var appendBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5, 30}

// Metrics holds the collectors of one process (an engine, with its
// embedded node if any, or an agent node) in its own registry. Its methods
// are safe for concurrent use, and a nil *Metrics records nothing.
type Metrics struct {
	reg *prometheus.Registry
	// ready is the process's readiness checks, served at /readyz beside
	// the metrics.
	ready *health.Checks
	// build is set once BuildInfo registered paddock_build_info.
	build atomic.Bool

	ops         *prometheus.CounterVec
	opSeconds   *prometheus.HistogramVec
	appends     *prometheus.CounterVec
	appendSecs  prometheus.Histogram
	placements  *prometheus.CounterVec
	rejections  *prometheus.CounterVec
	objectBytes *prometheus.CounterVec
	egress      *prometheus.CounterVec
	poolClaims  *prometheus.CounterVec
	snapBytes   *prometheus.CounterVec
}

// New returns collectors registered in a fresh registry, with the Go
// runtime and process collectors beside them.
func New() *Metrics {
	m := &Metrics{
		reg:   prometheus.NewRegistry(),
		ready: health.New(),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "node", Name: "ops_total",
			Help: "Operations a node performed, by op, runtime, outcome (ok, failed, error) and error code (empty unless outcome is error).",
		}, []string{"op", "runtime", "outcome", "code"}),
		opSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "node", Name: "op_duration_seconds",
			Help:    "How long operations ran on a node (between their start and finish events), by op, runtime and outcome.",
			Buckets: latencyBuckets,
		}, []string{"op", "runtime", "outcome"}),
		appends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "events", Name: "appends_total",
			Help: "Session event appends by a node, by result (ok, failed).",
		}, []string{"result"}),
		appendSecs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "events", Name: "append_duration_seconds",
			Help:    "How long a session event append took, retries included.",
			Buckets: appendBuckets,
		}),
		placements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "scheduler", Name: "placements_total",
			Help: "Sessions the scheduler placed on a node, by op (create, resume).",
		}, []string{"op"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "scheduler", Name: "rejections_total",
			Help: "Placements the scheduler could not make, by op and reason (the error code of the reply).",
		}, []string{"op", "reason"}),
		objectBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "objectstore", Name: "bytes_total",
			Help: "Bytes moved to (in) and from (out) the object store, by kind (snapshot, transfer).",
		}, []string{"direction", "kind"}),
		egress: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "egress", Name: "decisions_total",
			Help: "Connections sandboxes asked the egress proxy for, by decision (allowed, refused); refused ones over a session's record budget included.",
		}, []string{"decision"}),
		poolClaims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "node", Name: "pool_claims_total",
			Help: "Sessions a node made from a warm-pool sandbox, by image.",
		}, []string{"image"}),
		snapBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "snapshot", Name: "bytes_total",
			Help: "Workspace bytes of the snapshots a node persisted, by kind: stored (chunk bytes written to the object store, compressed if so) and deduplicated (bytes of the snapshots' files whose chunks the store already held, not written again).",
		}, []string{"kind"}),
	}
	m.reg.MustRegister(m.ops, m.opSeconds, m.appends, m.appendSecs, m.placements, m.rejections, m.objectBytes, m.egress, m.poolClaims, m.snapBytes,
		readyCollector{m.ready}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the registry the collectors are in (nil for a nil
// Metrics).
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.reg
}

// Ready returns the process's readiness checks, which the metrics server
// answers /readyz with (nil for a nil Metrics: Add on it does nothing).
func (m *Metrics) Ready() *health.Checks {
	if m == nil {
		return nil
	}
	return m.ready
}

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, EnableOpenMetrics: true})
}

// Op records one operation a node performed: outcome is OutcomeOK,
// OutcomeFailed or OutcomeError, code the error code (only with
// OutcomeError).
func (m *Metrics) Op(op, runtime, outcome, code string, d time.Duration) {
	if m == nil {
		return
	}
	m.ops.WithLabelValues(op, runtime, outcome, code).Inc()
	m.opSeconds.WithLabelValues(op, runtime, outcome).Observe(d.Seconds())
}

// Append records one session event append and how long it took.
func (m *Metrics) Append(d time.Duration, err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "failed"
	}
	m.appends.WithLabelValues(result).Inc()
	m.appendSecs.Observe(d.Seconds())
}

// Placement records the scheduler's answer to a placement: code is ""
// when a node took the session, else the reply's error code.
func (m *Metrics) Placement(op, code string) {
	if m == nil {
		return
	}
	if code == "" {
		m.placements.WithLabelValues(op).Inc()
		return
	}
	m.rejections.WithLabelValues(op, code).Inc()
}

// ObjectBytes records n bytes moved in ("in") or out ("out") of the
// object store for kind ("snapshot" or "transfer").
func (m *Metrics) ObjectBytes(direction, kind string, n int64) {
	if m == nil || n <= 0 {
		return
	}
	m.objectBytes.WithLabelValues(direction, kind).Add(float64(n))
}

// Egress records one connection a sandbox asked the egress proxy for:
// allowed or refused.
func (m *Metrics) Egress(allowed bool) {
	if m == nil {
		return
	}
	decision := "refused"
	if allowed {
		decision = "allowed"
	}
	m.egress.WithLabelValues(decision).Inc()
}

// PoolClaim records a session made from a warm-pool sandbox of image.
func (m *Metrics) PoolClaim(image string) {
	if m == nil {
		return
	}
	m.poolClaims.WithLabelValues(image).Inc()
}

// Snapshot records one persisted snapshot: stored bytes written to the
// object store, deduplicated bytes of its files not written again because
// the store held their chunks.
func (m *Metrics) Snapshot(stored, deduplicated int64) {
	if m == nil {
		return
	}
	// Both series exist from the first snapshot on, zero or not.
	m.snapBytes.WithLabelValues("stored").Add(float64(max(stored, 0)))
	m.snapBytes.WithLabelValues("deduplicated").Add(float64(max(deduplicated, 0)))
}

var readyDesc = prometheus.NewDesc(Namespace+"_ready_check",
	"1 when a readiness check of /readyz passes at this scrape, else 0, by check.", []string{"check"}, nil)

// readyCollector runs the readiness checks at every scrape, so that
// Prometheus sees what /readyz would answer (paddock_ready_check).
type readyCollector struct{ checks *health.Checks }

func (c readyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- readyDesc }

func (c readyCollector) Collect(ch chan<- prometheus.Metric) {
	// A scrape carries no context; each check is bounded by health.Timeout.
	rep := c.checks.Run(context.Background())
	for name, res := range rep.Checks {
		v := 0.0
		if res == "ok" {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, v, name)
	}
}
