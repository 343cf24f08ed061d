package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/paddock-dev/paddock/health"
	"github.com/paddock-dev/paddock/testenv"
)

// freeAddr returns a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestNodeSignals: the agent-node binary with --metrics-addr answers
// /readyz 200 with its jetstream check ok, /healthz 200, and its scrape
// carries the free disk under its sandboxes' directory and its build.
func TestNodeSignals(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	dir, addr := t.TempDir(), freeAddr(t)
	startNode(t, "--nats-url", st.Broker.ClientURL(), "--id", "signals-node", "--runtime", "local", "--dir", dir, "--metrics-addr", addr)
	ctx := testenv.Context(t, time.Minute)
	get := func(path string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			return nil, err
		}
		return http.DefaultClient.Do(req)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		res, err := get("/readyz")
		if err != nil {
			return err
		}
		defer res.Body.Close()
		var rep health.Report
		if err := json.NewDecoder(res.Body).Decode(&rep); err != nil {
			return err
		}
		if res.StatusCode != http.StatusOK || rep.Checks["jetstream"] != "ok" {
			return fmt.Errorf("/readyz: %d %+v, want 200 with jetstream ok", res.StatusCode, rep)
		}
		return nil
	})
	res, err := get("/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %s, want 200", res.Status)
	}
	res, err = get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(fams["paddock_build_info"].GetMetric()); n != 1 {
		t.Errorf("paddock_build_info: %d samples, want 1", n)
	}
	var free float64 = -1
	for _, m := range fams["paddock_disk_free_bytes"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "path" && l.GetValue() == dir {
				free = m.GetGauge().GetValue()
			}
		}
	}
	if free <= 0 {
		t.Errorf("paddock_disk_free_bytes{path=%q} = %v, want > 0 (samples: %v)", dir, free, fams["paddock_disk_free_bytes"].GetMetric())
	}
}
