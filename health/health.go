package health

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"sync"
	"time"
)

// Timeout bounds each check of one readiness probe.
const Timeout = 3 * time.Second

// Check reports whether one thing the process needs works: nil when it
// does, else why not.
type Check func(ctx context.Context) error

// Checks is a process's set of readiness checks. Its methods are safe for
// concurrent use; a nil *Checks has no checks (always ready) and ignores
// Add.
type Checks struct {
	mu     sync.Mutex // guards checks
	checks map[string]Check
}

// New returns an empty set of checks.
func New() *Checks { return &Checks{checks: map[string]Check{}} }

// Add registers fn as the check called name, replacing one of that name.
func (c *Checks) Add(name string, fn Check) {
	if c == nil || fn == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checks[name] = fn
}

// Report is the result of one readiness probe.
type Report struct {
	// Ready is true when every check passed.
	Ready bool `json:"ready"`
	// Checks maps each check's name to "ok" or why it failed.
	Checks map[string]string `json:"checks"`
}

// Run runs every check at once, each within Timeout (and ctx), and
// reports their results.
func (c *Checks) Run(ctx context.Context) Report {
	rep := Report{Ready: true, Checks: map[string]string{}}
	if c == nil {
		return rep
	}
	c.mu.Lock()
	names := make([]string, 0, len(c.checks))
	fns := make([]Check, 0, len(c.checks))
	for n := range c.checks {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fns = append(fns, c.checks[n])
	}
	c.mu.Unlock()
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Add(1)
		go func() { // ends with its check, which Timeout bounds; Run waits
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, Timeout)
			defer cancel()
			errs[i] = fn(cctx)
		}()
	}
	wg.Wait()
	for i, n := range names {
		rep.Checks[n] = "ok"
		if errs[i] != nil {
			rep.Ready = false
			rep.Checks[n] = errs[i].Error()
		}
	}
	return rep
}

// Healthz answers every GET with 200 "ok": the process is alive and
// serving.
func Healthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte("ok\n"))
	})
}

// Readyz runs the checks at every request and answers 200 when all pass,
// 503 when one fails, with the Report as JSON.
func (c *Checks) Readyz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rep := c.Run(r.Context())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if !rep.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(rep)
	})
}
