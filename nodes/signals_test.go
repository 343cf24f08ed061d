package nodes_test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/metrics"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/testenv"
)

// scrape GETs a metrics endpoint and returns the value of name's sample
// with exactly the labels want (-1 when there is none).
func scrape(ctx context.Context, url, name string, want map[string]string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		return 0, err
	}
next:
	for _, m := range fams[name].GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		for _, l := range m.GetLabel() {
			if want[l.GetName()] != l.GetValue() {
				continue next
			}
		}
		return value(m), nil
	}
	return -1, nil
}

func value(m *dto.Metric) float64 {
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// serveMetrics serves m on a free loopback port until the test ends and
// returns its /metrics URL.
func serveMetrics(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	srv := metrics.NewServer("127.0.0.1:0", m, nil)
	if err := srv.Start(testenv.Context(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	return "http://" + srv.Addr() + "/metrics"
}

// metricIs returns a condition: name's sample with labels, scraped from
// url, is want.
func metricIs(ctx context.Context, url, name string, labels map[string]string, want float64) func() error {
	return func() error {
		got, err := scrape(ctx, url, name, labels)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%s%v = %v, want %v", name, labels, got, want)
		}
		return nil
	}
}

// TestDockerPoolMetrics: a Docker node's metrics endpoint, scraped over
// HTTP, shows its warm pool's ready sandboxes by image, and counts a
// create that claims one.
func TestDockerPoolMetrics(t *testing.T) {
	m := metrics.New()
	url := serveMetrics(t, m)
	ctx := testenv.Context(t, 3*time.Minute)
	pn := startPoolNodeWith(t, "poolmetrics", 1, nodes.Config{Metrics: m})
	wantValue := func(name string, labels map[string]string, want float64) func() error {
		return metricIs(ctx, url, name, labels, want)
	}
	pool := map[string]string{"node": pn.node, "image": pn.image}
	testenv.Eventually(t, time.Minute, wantValue("paddock_node_pool_ready", pool, 1))

	warm, err := pn.st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: pn.image})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pn.st.Client.Delete(testenv.Context(t, time.Minute), warm.SessionID) }()
	testenv.Eventually(t, 10*time.Second, wantValue("paddock_node_pool_claims_total", map[string]string{"image": pn.image}, 1))
	// The pool makes a new one to replace it.
	testenv.Eventually(t, time.Minute, wantValue("paddock_node_pool_ready", pool, 1))
}

// TestDockerEgressMetrics: a Docker node's metrics endpoint counts the
// egress proxy's decisions, allowed and refused, as a sandbox asks for
// connections.
func TestDockerEgressMetrics(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	ctx := testenv.Context(t, 3*time.Minute)
	// Every name resolves to TEST-NET-1: allowed connections are decided
	// (and counted) before their dial, which goes nowhere.
	nowhere := func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("192.0.2.1")}, nil
	}
	em := metrics.New()
	url := serveMetrics(t, em)
	wantValue := func(name string, labels map[string]string, want float64) func() error {
		return metricIs(ctx, url, name, labels, want)
	}
	enode := "egressmetrics-" + uuid.NewString()[:8]
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	startAgent(t, st, nodes.Config{ID: enode, Metrics: em, Egress: nodes.EgressConfig{Resolve: nowhere}}, dockerRuntime(t, enode))
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image, Egress: &commands.Egress{Mode: "allow", Allow: []string{"allowed.test:80"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Client.Delete(testenv.Context(t, time.Minute), s.SessionID) }()
	for _, u := range []string{"http://denied.test/", "http://allowed.test:8080/", "http://allowed.test/"} {
		if r, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Argv: []string{"wget", "-q", "-O", "-", u}, TimeoutMS: 30000}); err != nil || r.ExitCode == 0 {
			t.Errorf("wget %s: %+v, %v; want it to fail (refused, or allowed to nowhere)", u, r, err)
		}
	}
	testenv.Eventually(t, 10*time.Second, wantValue("paddock_egress_decisions_total", map[string]string{"decision": "refused"}, 2))
	testenv.Eventually(t, 10*time.Second, wantValue("paddock_egress_decisions_total", map[string]string{"decision": "allowed"}, 1))
}
