package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/testenv"
)

// TestPythonLatency is the bench command of issue 26's latency goal (the
// Python client and provider within 1.5 ms of the Go client per op): it
// starts one `engine serve` on Docker, times N exec (`true`), read and
// write (1 KiB) ops of the Go client on a session, then runs
// python/bench/latency.py, which times the same ops through the Python
// client (paddock) and the provider (paddock_agents) on sessions of their
// own, against the same engine in the same run, and logs the p50 table.
// It asserts nothing about time (figures go to docs/benchmarks.md); it
// runs only with PADDOCK_PYBENCH=1:
//
//	PADDOCK_PYBENCH=1 PADDOCK_BENCH_N=200 go test ./cmd/engine -run TestPythonLatency -v
func TestPythonLatency(t *testing.T) {
	if os.Getenv("PADDOCK_PYBENCH") != "1" {
		t.Skip("a bench command: PADDOCK_PYBENCH=1 runs it")
	}
	py := startPythonEngine(t, "pybench")
	n := 200
	if v := os.Getenv("PADDOCK_BENCH_N"); v != "" {
		if _, err := fmt.Sscan(v, &n); err != nil || n < 1 {
			t.Fatalf("PADDOCK_BENCH_N=%q", v)
		}
	}
	env := map[string]string{}
	for _, kv := range py.env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	nc, creds, err := client.Connect(client.ConnectOptions{URL: env["PADDOCK_URL"], Creds: env["PADDOCK_CREDS"]})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.Options{Tenant: creds.Tenant})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, 10*time.Minute)
	res, err := c.Create(ctx, commands.CreateArgs{Image: env["PADDOCK_IMAGE"]})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { // before nc.Close (deferred earlier, runs later)
		if err := c.Delete(context.Background(), res.SessionID); err != nil {
			t.Errorf("delete the Go client's session: %v", err)
		}
	}()
	id := res.SessionID
	payload := bytes.Repeat([]byte("x"), 1024)
	if _, err := c.WriteFile(ctx, id, "/workspace/f", payload, 0o644); err != nil {
		t.Fatal(err)
	}
	type row struct {
		Impl, Op string
		N        int
		P50, P90 float64 // microseconds
	}
	var rows []row
	phase := "go client (before)"
	timeOp := func(op string, fn func() error) {
		for range min(20, n) { // warm up
			if err := fn(); err != nil {
				t.Fatalf("%s: %v", op, err)
			}
		}
		d := make([]float64, 0, n)
		for range n {
			start := time.Now()
			if err := fn(); err != nil {
				t.Fatalf("%s: %v", op, err)
			}
			d = append(d, float64(time.Since(start).Nanoseconds())/1e3)
		}
		slices.Sort(d)
		rows = append(rows, row{phase, op, n, d[len(d)/2], d[len(d)*9/10]})
	}
	goOps := func() {
		timeOp("exec", func() error { _, err := c.Exec(ctx, id, commands.ExecArgs{Argv: []string{"true"}}); return err })
		timeOp("read", func() error { _, err := c.ReadFile(ctx, id, "/workspace/f"); return err })
		timeOp("write", func() error { _, err := c.WriteFile(ctx, id, "/workspace/f", payload, 0o644); return err })
	}
	// The Go client before and after the Python processes: the machine's
	// load drifts, and the comparison is with the mean of the two.
	goOps()

	cmd := exec.CommandContext(ctx, py.python, filepath.Join(py.root, "python", "bench", "latency.py"))
	cmd.Env = append(py.env, fmt.Sprintf("PADDOCK_BENCH_N=%d", n))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("latency.py: %v\n%s", err, stderr.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct {
			Impl string  `json:"impl"`
			Op   string  `json:"op"`
			N    int     `json:"n"`
			P50  float64 `json:"p50_us"`
			P90  float64 `json:"p90_us"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("latency.py printed %q: %v", line, err)
		}
		rows = append(rows, row{r.Impl, r.Op, r.N, r.P50, r.P90})
	}
	phase = "go client (after)"
	goOps()
	goP50 := map[string]float64{}
	for _, r := range rows {
		if strings.HasPrefix(r.Impl, "go client") {
			goP50[r.Op] += r.P50 / 2
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| impl | op | n | p50 | p90 | p50 - Go's (mean of before, after) |\n|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %d | %.2f ms | %.2f ms | %+.2f ms |\n", r.Impl, r.Op, r.N, r.P50/1e3, r.P90/1e3, (r.P50-goP50[r.Op])/1e3)
	}
	t.Logf("per-op latency, one engine, one run:\n%s", b.String())
}
