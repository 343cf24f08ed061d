package metrics_test

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/metrics"
)

// TestDashboardNames: every paddock_ metric the Grafana dashboard and the
// alert rules query is one the collectors export, and the dashboard is
// JSON with panels.
func TestDashboardNames(t *testing.T) {
	raw, err := os.ReadFile("../deploy/grafana/paddock.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string            `json:"title"`
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil || dash.Title == "" || len(dash.Panels) == 0 {
		t.Fatalf("dashboard: %v (title %q, %d panels)", err, dash.Title, len(dash.Panels))
	}

	m := metrics.New()
	m.Op("exec", "local", metrics.OutcomeOK, "", time.Millisecond)
	m.Append(time.Millisecond, nil)
	m.Placement("create", "")
	m.Placement("create", "no_capacity")
	m.ObjectBytes("in", "snapshot", 1)
	m.Egress(true)
	m.PoolClaim("img")
	m.Snapshot(1, 1)
	m.Ready().Add("jetstream", func(context.Context) error { return nil })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.WatchNode(func() metrics.NodeState {
		return metrics.NodeState{Node: "n", Sessions: map[string]int{"running": 1}, Processes: map[string]int{"running": 1}, Pools: map[string]int{"img": 1}}
	}))
	must(m.WatchStorage(func(context.Context) (metrics.StoreUsage, error) {
		return metrics.StoreUsage{Bytes: 1, MaxBytes: 2, Streams: []metrics.StreamUsage{{Stream: "s", Bytes: 1, MaxBytes: 2}}}, nil
	}))
	must(m.WatchDisks(func() []metrics.Disk { return []metrics.Disk{{Path: "/", Free: 1, Total: 2}} }))
	must(m.WatchSessions(func(context.Context) (map[string]int, error) { return map[string]int{"running": 1}, nil }))
	must(m.BuildInfo("v", "r"))
	must(m.WatchScheduler(func() []metrics.NodeView { return []metrics.NodeView{{Node: "n", Up: true}} }))
	must(m.WatchProjector(func(context.Context) (uint64, error) { return 0, nil }))
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range fams {
		have[f.GetName()] = true
	}
	alerts, err := os.ReadFile("../deploy/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for file, text := range map[string][]byte{"the dashboard": raw, "the alert rules": alerts} {
		checkNames(t, file, text, have)
	}
}

// checkNames reports every paddock_ metric text names that is not in have.
func checkNames(t *testing.T, file string, text []byte, have map[string]bool) {
	t.Helper()
	used := regexp.MustCompile(`paddock_[a-z_]+`).FindAllString(string(text), -1)
	if len(used) == 0 {
		t.Fatalf("%s query no paddock_ metric", file)
	}
	for _, name := range used {
		base := name
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suf); ok && have[b] {
				base = b
			}
		}
		if !have[base] {
			t.Errorf("%s query %s, which no collector exports", file, name)
		}
	}
}
