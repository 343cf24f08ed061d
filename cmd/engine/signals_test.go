package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/health"
	"github.com/paddock-dev/paddock/testenv"
)

// probe GETs a health endpoint and returns its status and body.
func probe(ctx context.Context, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

// readyz GETs /readyz and decodes its report.
func readyz(ctx context.Context, base string) (int, health.Report, error) {
	code, body, err := probe(ctx, base+"/readyz")
	if err != nil {
		return 0, health.Report{}, err
	}
	var rep health.Report
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		return code, rep, fmt.Errorf("readyz body %q: %w", body, err)
	}
	return code, rep, nil
}

// labelled returns the samples of a family as label sets with values.
func labelled(f *dto.MetricFamily) []map[string]string {
	var out []map[string]string
	for _, m := range f.GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		out = append(out, l)
	}
	return out
}

// TestServeSignals: after real operations on engine serve (embedded NATS,
// local node), one scrape of --metrics-addr carries the operators'
// signals: JetStream storage against its limits, free disk under the
// state dir, sessions by status from the projection, snapshot bytes
// stored and deduplicated, build info; /healthz and /readyz answer 200
// with every check ok.
func TestServeSignals(t *testing.T) {
	state := t.TempDir()
	logs, _ := serveStoppable(t, "--state-dir", state, "--listen", "127.0.0.1:0", "--node-id", "n1", "--runtime", "local", "--metrics-addr", "127.0.0.1:0")
	m := readyRE.FindStringSubmatch(logs.String())
	u := metricsURLRE.FindStringSubmatch(logs.String())
	if m == nil || u == nil {
		t.Fatalf("no client or metrics URL in the log:\n%s", logs.String())
	}
	url, murl := m[1], u[1]
	base := strings.TrimSuffix(murl, "/metrics")
	mustCLI(t, url, "", "sandbox", "create", "--runtime", "local", "--id", "s1")
	mustCLI(t, url, "", "sandbox", "create", "--runtime", "local", "--id", "s2")
	mustCLI(t, url, strings.Repeat("paddock ", 4096), "sandbox", "write", "s1", "a.txt")
	mustCLI(t, url, "", "sandbox", "persist", "s1")
	// The same content again: its chunks are in the store already.
	mustCLI(t, url, "", "sandbox", "exec", "s1", "--", "cp", "a.txt", "b.txt")
	mustCLI(t, url, "", "sandbox", "persist", "s1")
	mustCLI(t, url, "", "sandbox", "stop", "s2")
	ctx := testenv.Context(t, 2*time.Minute)

	testenv.Eventually(t, 30*time.Second, func() error {
		fams, err := scrapeMetrics(ctx, murl)
		if err != nil {
			return err
		}
		for _, c := range []struct {
			name   string
			labels map[string]string
			ok     func(float64) bool
			want   string
		}{
			{"paddock_sessions_up", nil, func(v float64) bool { return v == 1 }, "1"},
			{"paddock_sessions", map[string]string{"status": "running"}, func(v float64) bool { return v == 1 }, "1"},
			{"paddock_sessions", map[string]string{"status": "stopped"}, func(v float64) bool { return v == 1 }, "1"},
			{"paddock_storage_up", nil, func(v float64) bool { return v == 1 }, "1"},
			{"paddock_jetstream_store_bytes", nil, func(v float64) bool { return v > 0 }, "> 0"},
			{"paddock_jetstream_store_max_bytes", nil, func(v float64) bool { return v > 0 }, "> 0 (the embedded server's limit)"},
			{"paddock_stream_bytes", map[string]string{"stream": "SBX_EVENTS"}, func(v float64) bool { return v > 0 }, "> 0"},
			{"paddock_stream_max_bytes", map[string]string{"stream": "SBX_EVENTS"}, func(v float64) bool { return v > 0 }, "> 0"},
			{"paddock_disk_free_bytes", map[string]string{"path": state}, func(v float64) bool { return v > 0 }, "> 0"},
			{"paddock_disk_total_bytes", map[string]string{"path": state}, func(v float64) bool { return v > 0 }, "> 0"},
			// 32 KiB of a.txt stored once, then its copy b.txt deduplicated.
			{"paddock_snapshot_bytes_total", map[string]string{"kind": "stored"}, func(v float64) bool { return v > 0 }, "> 0"},
			{"paddock_snapshot_bytes_total", map[string]string{"kind": "deduplicated"}, func(v float64) bool { return v >= 2*4096*8 }, ">= 65536 (a.txt and b.txt, held by the store)"},
			{"paddock_build_info", map[string]string{"version": "devel"}, func(v float64) bool { return v == 1 }, "1"},
			{"paddock_ready_check", map[string]string{"check": "jetstream"}, func(v float64) bool { return v == 1 }, "1"},
			{"paddock_ready_check", map[string]string{"check": "projector"}, func(v float64) bool { return v == 1 }, "1"},
		} {
			if got := metricValue(fams, c.name, c.labels); !c.ok(got) {
				return fmt.Errorf("%s%v = %v, want %s (samples: %v)", c.name, c.labels, got, c.want, labelled(fams[c.name]))
			}
		}
		for _, l := range labelled(fams["paddock_build_info"]) {
			if l["go_version"] == "" || l["revision"] == "" {
				return fmt.Errorf("paddock_build_info%v: want go_version and revision", l)
			}
		}
		return nil
	})
	if code, body, err := probe(ctx, base+"/healthz"); err != nil || code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q %v, want 200 ok", code, body, err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		code, rep, err := readyz(ctx, base)
		if err != nil {
			return err
		}
		if code != http.StatusOK || !rep.Ready || rep.Checks["jetstream"] != "ok" || rep.Checks["projector"] != "ok" || rep.Checks["node"] != "ok" {
			return fmt.Errorf("/readyz: %d %+v, want 200 with jetstream, projector and node ok", code, rep)
		}
		return nil
	})
}

// TestServeReadyzJetStreamGone: the fault. The NATS server at
// --nats-url, and JetStream with it, goes away under a running engine:
// /readyz turns 503 naming the jetstream check while /healthz stays 200
// (the process is alive: restarting it would not help), and the storage
// gauges say they could not be read. The server comes back on its port
// and store and /readyz is 200 again, without a restart of the engine.
func TestServeReadyzJetStreamGone(t *testing.T) {
	// The broker is started by hand (not testenv.StartBroker) so that a
	// second one can take the first one's port and store.
	cfg := broker.Config{StoreDir: t.TempDir(), Host: "127.0.0.1", Port: -1}
	first, err := broker.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(first.Shutdown)
	url := first.ClientURL()
	logs, _ := serveStoppable(t, "--nats-url", url, "--state-dir", t.TempDir(), "--node-id", "n1", "--runtime", "local", "--metrics-addr", "127.0.0.1:0")
	u := metricsURLRE.FindStringSubmatch(logs.String())
	if u == nil {
		t.Fatalf("no metrics URL in the log:\n%s", logs.String())
	}
	murl := u[1]
	base := strings.TrimSuffix(murl, "/metrics")
	ctx := testenv.Context(t, 2*time.Minute)
	ready := func(want bool) func() error {
		return func() error {
			code, rep, err := readyz(ctx, base)
			if err != nil {
				return err
			}
			if want && (code != http.StatusOK || !rep.Ready) {
				return fmt.Errorf("/readyz: %d %+v, want 200", code, rep)
			}
			if !want && (code != http.StatusServiceUnavailable || rep.Ready || rep.Checks["jetstream"] == "ok") {
				return fmt.Errorf("/readyz: %d %+v, want 503 with the jetstream check failing", code, rep)
			}
			return nil
		}
	}
	testenv.Eventually(t, 30*time.Second, ready(true))

	first.Shutdown()
	testenv.Eventually(t, 30*time.Second, ready(false))
	if code, _, err := probe(ctx, base+"/healthz"); err != nil || code != http.StatusOK {
		t.Errorf("/healthz with JetStream gone: %d %v, want 200 (alive)", code, err)
	}
	fams, err := scrapeMetrics(ctx, murl)
	if err != nil {
		t.Fatal(err)
	}
	if got := metricValue(fams, "paddock_storage_up", nil); got != 0 {
		t.Errorf("paddock_storage_up with JetStream gone = %v, want 0", got)
	}

	port, err := strconv.Atoi(url[strings.LastIndex(url, ":")+1:])
	if err != nil {
		t.Fatal(err)
	}
	cfg.Port = port
	second, err := broker.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(second.Shutdown)
	testenv.Eventually(t, 60*time.Second, ready(true))
}
