package metrics

import (
	"errors"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
)

// BuildInfo registers paddock_build_info, always 1, with the binary's
// version, the VCS revision it was built from ("unknown" when the build
// did not record one) and the Go version that built it. It fails if build
// info is registered twice.
func (m *Metrics) BuildInfo(version, revision string) error {
	if m == nil {
		return nil
	}
	if !m.build.CompareAndSwap(false, true) {
		return errors.New("metrics: build info registered twice")
	}
	if revision == "" {
		revision = "unknown"
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "build_info",
		Help:        "Always 1; its labels say which build runs: version, revision (VCS commit) and go_version.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "go_version": runtime.Version()},
	})
	g.Set(1)
	return m.reg.Register(g)
}
