package metrics_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/metrics"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/scheduler"
	"github.com/paddock-dev/paddock/testenv"
)

// scrape GETs url and parses the text exposition.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	ctx := testenv.Context(t, 10*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %s, want 200", url, res.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// sample finds the sample of family name whose labels are exactly want
// (labels not named in want may have any value).
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) (*dto.Metric, bool) {
	f, ok := fams[name]
	if !ok {
		return nil, false
	}
next:
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		return m, true
	}
	return nil, false
}

// value is the counter or gauge value of a sample (-1 when absent).
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	m, ok := sample(fams, name, labels)
	if !ok {
		return -1
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return -1
}

// histCount is the sample count of a histogram sample (-1 when absent).
func histCount(fams map[string]*dto.MetricFamily, name string, labels map[string]string) int64 {
	m, ok := sample(fams, name, labels)
	if !ok || m.Histogram == nil {
		return -1
	}
	return int64(m.Histogram.GetSampleCount())
}

// TestScrapeAfterWorkload runs a scripted workload on the local runtime
// and scrapes the metrics over HTTP: each op counted exactly, by outcome
// and error code, and each counted in its histogram.
func TestScrapeAfterWorkload(t *testing.T) {
	m := metrics.New()
	st := testenv.StartStack(t, testenv.StackOptions{
		Node:      nodes.Config{Metrics: m},
		Scheduler: scheduler.Config{Metrics: m, WaitForNode: 100 * time.Millisecond},
	})
	srv := metrics.NewServer("127.0.0.1:0", m, nil)
	ctx := testenv.Context(t, 2*time.Minute)
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	url := "http://" + srv.Addr() + "/metrics"

	c := st.Client
	created, err := c.Create(ctx, commands.CreateArgs{Runtime: "local"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	for _, sh := range []string{"true", "echo hi", "exit 3"} {
		res, err := c.Exec(ctx, id, commands.ExecArgs{Shell: sh})
		if err != nil {
			t.Fatalf("exec %q: %v", sh, err)
		}
		if want := map[bool]int{true: 3, false: 0}[sh == "exit 3"]; res.ExitCode != want {
			t.Fatalf("exec %q = exit %d, want %d", sh, res.ExitCode, want)
		}
	}
	if _, err := c.ReadFile(ctx, id, "missing.txt"); errcode.Of(err) != errcode.NotFound {
		t.Fatalf("read of a missing file = %v, want not_found", err)
	}
	if _, err := c.WriteFile(ctx, id, "notes.txt", []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := c.ReadFile(ctx, id, "notes.txt"); err != nil || string(got) != "hello\n" {
		t.Fatalf("read = %q, %v; want %q", got, err, "hello\n")
	}
	snap, err := c.Persist(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// A create no node can take: no node has this runtime.
	if _, err := c.Create(ctx, commands.CreateArgs{Runtime: "docker"}); errcode.Of(err) != errcode.NoCapacity {
		t.Fatalf("create on a runtime no node has = %v, want no_capacity", err)
	}

	fams := scrape(t, url)
	op := func(op, outcome, code string) map[string]string {
		return map[string]string{"op": op, "runtime": "local", "outcome": outcome, "code": code}
	}
	for _, c := range []struct {
		labels map[string]string
		want   float64
	}{
		{op("create", "ok", ""), 1},
		{op("exec", "ok", ""), 2},
		{op("exec", "failed", ""), 1},
		{op("read", "error", "not_found"), 1},
		{op("read", "ok", ""), 1},
		{op("write", "ok", ""), 1},
		{op("persist", "ok", ""), 1},
	} {
		if got := value(fams, "paddock_node_ops_total", c.labels); got != c.want {
			t.Errorf("paddock_node_ops_total%v = %v, want %v", c.labels, got, c.want)
		}
		hl := map[string]string{"op": c.labels["op"], "runtime": "local", "outcome": c.labels["outcome"]}
		if got := histCount(fams, "paddock_node_op_duration_seconds", hl); got != int64(c.want) {
			t.Errorf("paddock_node_op_duration_seconds%v count = %d, want %v", hl, got, c.want)
		}
	}
	// Every operation that ran appended a start and a finish.
	ops := 8.0
	appended := value(fams, "paddock_events_appends_total", map[string]string{"result": "ok"})
	if appended < 2*ops {
		t.Errorf("paddock_events_appends_total{result=ok} = %v, want at least %v", appended, 2*ops)
	}
	if got := histCount(fams, "paddock_events_append_duration_seconds", nil); float64(got) != appended {
		t.Errorf("append histogram counted %d, want %v (the appends)", got, appended)
	}
	if got := value(fams, "paddock_events_appends_total", map[string]string{"result": "failed"}); got != -1 {
		t.Errorf("failed appends = %v, want none", got)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"paddock_scheduler_placements_total", map[string]string{"op": "create"}, 1},
		{"paddock_scheduler_rejections_total", map[string]string{"op": "create", "reason": "no_capacity"}, 1},
		{"paddock_node_sessions", map[string]string{"node": "node-1", "status": "running"}, 1},
		{"paddock_node_processes", map[string]string{"node": "node-1", "state": "running"}, 0},
		{"paddock_scheduler_node_capacity", map[string]string{"node": "node-1"}, 1000},
		{"paddock_scheduler_node_up", map[string]string{"node": "node-1"}, 1},
		{"paddock_objectstore_bytes_total", map[string]string{"direction": "in", "kind": "snapshot"}, float64(snap.Size)},
	} {
		if got := value(fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if age := value(fams, "paddock_scheduler_node_heartbeat_age_seconds", map[string]string{"node": "node-1"}); age < 0 {
		t.Errorf("no heartbeat age for node-1")
	}
	// No session or tenant id is a label value anywhere.
	for name, f := range fams {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetValue() == id || l.GetName() == "tenant" || l.GetName() == "session" {
					t.Errorf("%s carries label %s=%q", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
}

// TestCheckAddr: the metrics' address is checked by listenaddr.Check
// (its own test has the cases), under the metrics' flags.
func TestCheckAddr(t *testing.T) {
	if err := metrics.CheckAddr("127.0.0.1:9464", false); err != nil {
		t.Errorf("a loopback address: %v", err)
	}
	err := metrics.CheckAddr("0.0.0.0:9464", false)
	if errcode.Of(err) != errcode.InvalidRequest || !strings.Contains(err.Error(), "--metrics-addr") || !strings.Contains(err.Error(), "--metrics-allow-remote") {
		t.Errorf("every interface, not allowed: %v; want invalid_request naming --metrics-addr and --metrics-allow-remote", err)
	}
	if err := metrics.CheckAddr("0.0.0.0:9464", true); err != nil {
		t.Errorf("every interface, allowed: %v", err)
	}
}

// TestNilMetrics: a nil Metrics records nothing and registers nothing.
func TestNilMetrics(t *testing.T) {
	var m *metrics.Metrics
	m.Op("exec", "local", metrics.OutcomeOK, "", time.Millisecond)
	m.Append(time.Millisecond, errors.New("x"))
	m.Placement("create", "")
	m.ObjectBytes("in", "snapshot", 10)
	if err := m.WatchNode(nil); err != nil {
		t.Fatal(err)
	}
	if m.Registry() != nil {
		t.Fatal("a nil Metrics has a registry")
	}
}

// TestWatchTwice: a second watcher of the same kind is refused, not a
// panic at scrape time.
func TestWatchTwice(t *testing.T) {
	m := metrics.New()
	state := func() metrics.NodeState { return metrics.NodeState{Node: "n"} }
	if err := m.WatchNode(state); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchNode(state); err == nil {
		t.Fatal("second WatchNode: no error")
	}
}

// TestServerListenError: an address in use fails Start with an error
// naming it; Close twice is fine.
func TestServerListenError(t *testing.T) {
	m := metrics.New()
	a := metrics.NewServer("127.0.0.1:0", m, nil)
	ctx := testenv.Context(t, 10*time.Second)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	b := metrics.NewServer(a.Addr(), m, nil)
	if err := b.Start(ctx); err == nil || !strings.Contains(err.Error(), a.Addr()) {
		t.Fatalf("second listen on %s = %v, want an error naming it", a.Addr(), err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}
