package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	clusterSessionsDesc = prometheus.NewDesc(Namespace+"_sessions",
		"Sessions across the cluster by status, as the sessions projection has them (deleted sessions included, with status deleted).", []string{"status"}, nil)
	sessionsUpDesc = prometheus.NewDesc(Namespace+"_sessions_up",
		"1 when the sessions projection could be read at this scrape, else 0.", nil, nil)
)

// SessionsTimeout bounds the sessions projection read of one scrape.
const SessionsTimeout = 5 * time.Second

// WatchSessions reports the cluster's sessions by status from count,
// called at every scrape within SessionsTimeout (a read of the whole
// sessions projection: one KV watch). A failed read is paddock_sessions_up
// 0 and no other sample. It fails if sessions are watched twice.
func (m *Metrics) WatchSessions(count func(ctx context.Context) (map[string]int, error)) error {
	if m == nil {
		return nil
	}
	return m.reg.Register(funcCollector{
		descs: []*prometheus.Desc{clusterSessionsDesc, sessionsUpDesc},
		collect: func(ch chan<- prometheus.Metric) {
			// A scrape carries no context; the read gets a bound of its own.
			ctx, cancel := context.WithTimeout(context.Background(), SessionsTimeout)
			defer cancel()
			byStatus, err := count(ctx)
			if err != nil {
				ch <- prometheus.MustNewConstMetric(sessionsUpDesc, prometheus.GaugeValue, 0)
				return
			}
			ch <- prometheus.MustNewConstMetric(sessionsUpDesc, prometheus.GaugeValue, 1)
			for status, n := range byStatus {
				ch <- prometheus.MustNewConstMetric(clusterSessionsDesc, prometheus.GaugeValue, float64(n), status)
			}
		},
	})
}
