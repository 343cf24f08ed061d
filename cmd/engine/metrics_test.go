package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/paddock-dev/paddock/testenv"
)

var metricsURLRE = regexp.MustCompile(`msg="metrics served" url=(\S+)`)

// scrapeMetrics GETs a metrics URL and parses it.
func scrapeMetrics(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, res.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(res.Body)
}

// metricValue is the value of the counter or gauge sample of name whose
// labels include want (-1 when there is none).
func metricValue(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
next:
	for _, m := range fams[name].GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		}
	}
	return -1
}

// TestServeMetrics: engine serve --metrics-addr serves the scheduler's,
// the projector's and the in-process node's metrics on one endpoint.
func TestServeMetrics(t *testing.T) {
	logs, _ := serveStoppable(t, "--state-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--node-id", "n1", "--runtime", "local", "--metrics-addr", "127.0.0.1:0")
	m := readyRE.FindStringSubmatch(logs.String())
	u := metricsURLRE.FindStringSubmatch(logs.String())
	if m == nil || u == nil {
		t.Fatalf("no client or metrics URL in the log:\n%s", logs.String())
	}
	url, murl := m[1], u[1]
	mustCLI(t, url, "", "sandbox", "create", "--runtime", "local", "--id", "m1")
	mustCLI(t, url, "", "sandbox", "exec", "m1", "--", "true")
	ctx := testenv.Context(t, time.Minute)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"paddock_node_ops_total", map[string]string{"op": "create", "runtime": "local", "outcome": "ok"}, 1},
		{"paddock_node_ops_total", map[string]string{"op": "exec", "runtime": "local", "outcome": "ok"}, 1},
		{"paddock_scheduler_placements_total", map[string]string{"op": "create"}, 1},
		{"paddock_scheduler_node_up", map[string]string{"node": "n1"}, 1},
		{"paddock_node_sessions", map[string]string{"node": "n1", "status": "running"}, 1},
		// The projector catches up: its lag is read and reaches 0.
		{"paddock_projector_lag_up", nil, 1},
		{"paddock_projector_lag_events", nil, 0},
	} {
		testenv.Eventually(t, 20*time.Second, func() error {
			fams, err := scrapeMetrics(ctx, murl)
			if err != nil {
				return err
			}
			if got := metricValue(fams, c.name, c.labels); got != c.want {
				return fmt.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
			}
			return nil
		})
	}
}

// TestServeMetricsBadAddr: a bad or non-loopback --metrics-addr is a
// clear invalid_request before anything starts.
func TestServeMetricsBadAddr(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--metrics-addr", "nonsense"}, "want host:port"},
		{[]string{"--metrics-addr", "127.0.0.1:99999"}, "the port must be a number"},
		{[]string{"--metrics-addr", "0.0.0.0:9464"}, "--metrics-allow-remote"},
		{[]string{"--metrics-addr", ":9464"}, "not a loopback address"},
		{[]string{"--metrics-allow-remote"}, "needs --metrics-addr"},
	} {
		var errb bytes.Buffer
		code := run(context.Background(), append([]string{"serve", "--state-dir", t.TempDir(), "--sandbox-dir", t.TempDir()}, c.args...), nil, &errb, &errb)
		if code != 2 || !strings.Contains(errb.String(), "error: invalid_request: ") || !strings.Contains(errb.String(), c.says) {
			t.Errorf("serve %v = exit %d, %q; want 2, invalid_request saying %q", c.args, code, errb.String(), c.says)
		}
	}
}
