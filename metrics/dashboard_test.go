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

// TestDashboardNames: every paddock_ metric the Grafana dashboard queries
// is one the collectors export, and the dashboard is JSON with panels.
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
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.WatchNode(func() metrics.NodeState {
		return metrics.NodeState{Node: "n", Sessions: map[string]int{"running": 1}, Processes: map[string]int{"running": 1}}
	}))
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
	used := regexp.MustCompile(`paddock_[a-z_]+`).FindAllString(string(raw), -1)
	if len(used) == 0 {
		t.Fatal("the dashboard queries no paddock_ metric")
	}
	for _, name := range used {
		base := name
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suf); ok && have[b] {
				base = b
			}
		}
		if !have[base] {
			t.Errorf("the dashboard queries %s, which no collector exports", name)
		}
	}
}
