package health_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/paddock-dev/paddock/health"
)

// TestReadyz: /readyz is 200 with every check ok, 503 naming the check
// that failed and why, and a check that hangs is cut at its deadline
// instead of hanging the probe.
func TestReadyz(t *testing.T) {
	c := health.New()
	var fail error
	c.Add("a", func(context.Context) error { return nil })
	c.Add("b", func(context.Context) error { return fail })
	probe := func() (int, health.Report) {
		t.Helper()
		rec := httptest.NewRecorder()
		c.Readyz().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		var rep health.Report
		if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
			t.Fatalf("readyz body %q: %v", rec.Body.String(), err)
		}
		return rec.Code, rep
	}
	if code, rep := probe(); code != http.StatusOK || !rep.Ready || rep.Checks["a"] != "ok" || rep.Checks["b"] != "ok" {
		t.Errorf("all passing: got %d %+v, want 200, ready, both ok", code, rep)
	}
	fail = errors.New("jetstream unreachable")
	if code, rep := probe(); code != http.StatusServiceUnavailable || rep.Ready || rep.Checks["b"] != "jetstream unreachable" || rep.Checks["a"] != "ok" {
		t.Errorf("b failing: got %d %+v, want 503 with b's error", code, rep)
	}
	// A check that waits for ever ends at its deadline (health.Timeout).
	c.Add("b", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	if code, rep := probe(); code != http.StatusServiceUnavailable || rep.Checks["b"] != context.DeadlineExceeded.Error() {
		t.Errorf("b hanging: got %d %+v, want 503 with deadline exceeded", code, rep)
	}
}

// TestNilChecks: no checks is ready, and Add on nil does nothing.
func TestNilChecks(t *testing.T) {
	var c *health.Checks
	c.Add("x", func(context.Context) error { return errors.New("no") })
	if rep := c.Run(context.Background()); !rep.Ready || len(rep.Checks) != 0 {
		t.Errorf("nil checks: got %+v, want ready with none", rep)
	}
	rec := httptest.NewRecorder()
	health.Healthz().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK || rec.Body.String() != "ok\n" {
		t.Errorf("healthz: got %d %q, want 200 ok", rec.Code, rec.Body.String())
	}
}
