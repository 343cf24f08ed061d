package metrics_test

import (
	"context"
	"errors"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/paddock-dev/paddock/metrics"
)

// gather returns the registry's families by name.
func gather(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// TestWatchFailures: a storage or sessions read that fails is its _up
// gauge at 0 and no other sample (never a stale or zero value that
// looks real); a failing readiness check is paddock_ready_check 0; a
// second watch of the same kind is refused.
func TestWatchFailures(t *testing.T) {
	m := metrics.New()
	down := errors.New("jetstream unreachable")
	if err := m.WatchStorage(func(context.Context) (metrics.StoreUsage, error) { return metrics.StoreUsage{}, down }); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchSessions(func(context.Context) (map[string]int, error) { return nil, down }); err != nil {
		t.Fatal(err)
	}
	m.Ready().Add("jetstream", func(context.Context) error { return down })
	fams := gather(t, m)
	for _, c := range []struct {
		name string
		want float64
	}{{"paddock_storage_up", 0}, {"paddock_sessions_up", 0}, {"paddock_ready_check", 0}} {
		ms := fams[c.name].GetMetric()
		if len(ms) != 1 || ms[0].GetGauge().GetValue() != c.want {
			t.Errorf("%s = %v, want one sample of %v", c.name, ms, c.want)
		}
	}
	for _, name := range []string{"paddock_jetstream_store_bytes", "paddock_stream_bytes", "paddock_sessions"} {
		if f, ok := fams[name]; ok {
			t.Errorf("%s has samples %v after a failed read; want none", name, f.GetMetric())
		}
	}
	if err := m.WatchStorage(func(context.Context) (metrics.StoreUsage, error) { return metrics.StoreUsage{}, nil }); err == nil {
		t.Error("a second WatchStorage: no error, want the registry's refusal")
	}
	if err := m.BuildInfo("v1", ""); err != nil {
		t.Fatal(err)
	}
	if err := m.BuildInfo("v2", ""); err == nil {
		t.Error("a second BuildInfo: no error, want the registry's refusal")
	}
	for _, l := range gather(t, m)["paddock_build_info"].GetMetric()[0].GetLabel() {
		if l.GetName() == "revision" && l.GetValue() != "unknown" {
			t.Errorf("build info without a revision: revision=%q, want unknown", l.GetValue())
		}
	}
}

// TestNilSignals: a nil Metrics records nothing and does not panic.
func TestNilSignals(t *testing.T) {
	var m *metrics.Metrics
	m.Egress(true)
	m.PoolClaim("img")
	m.Snapshot(1, 2)
	m.Ready().Add("x", func(context.Context) error { return nil })
	for _, err := range []error{
		m.WatchStorage(nil), m.WatchDisks(nil), m.WatchSessions(nil), m.BuildInfo("v", "r"),
	} {
		if err != nil {
			t.Errorf("nil Metrics: %v, want nil", err)
		}
	}
}
