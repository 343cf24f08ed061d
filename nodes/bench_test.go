package nodes_test

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/testenv"
)

// BenchmarkExecTrue compares exec of `true` through the whole path
// (client → NATS → node → local runtime → start/finish events → reply)
// with calling the local runtime directly in the same process. The
// difference of the two p50s (and p99s) is Paddock's overhead.
//
//	go test -run '^$' -bench BenchmarkExecTrue -benchtime 400x ./nodes/
func BenchmarkExecTrue(b *testing.B) {
	for _, sync := range syncModes {
		st := testenv.StartStack(b, testenv.StackOptions{Broker: broker.Config{SyncInterval: sync.interval}})
		ctx := context.Background()

		b.Run("direct/"+sync.name, func(b *testing.B) {
			sb, err := st.Local.Create(ctx, runtime.Spec{Tenant: "bench", SessionID: uuid.NewString(), Node: "node-1"})
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Shutdown(ctx)
			spec := runtime.ExecSpec{Argv: []string{"true"}, Timeout: time.Minute, MaxOutput: commands.MaxOutputBytes}
			measure(b, func() error {
				_, err := sb.Exec(ctx, spec)
				return err
			})
		})
		b.Run("paddock/"+sync.name, func(b *testing.B) {
			s, err := st.Client.Create(ctx, commands.CreateArgs{})
			if err != nil {
				b.Fatal(err)
			}
			args := commands.ExecArgs{Argv: []string{"true"}}
			measure(b, func() error {
				_, err := st.Client.Exec(ctx, s.SessionID, args)
				return err
			})
		})
	}
}

// syncModes are the two durability settings the benchmarks compare: the
// engine's default (fsync every write) and a relaxed one.
var syncModes = []struct {
	name     string
	interval time.Duration
}{{"sync=always", 0}, {"sync=1s", time.Second}}

// measure runs fn b.N times and reports the p50 and p99 latency.
func measure(b *testing.B, fn func() error) {
	b.Helper()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := fn(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}

// measurePair runs base and paddock alternately b.N times each, so that
// drift on the machine hits both alike, and reports each one's p50 and p99
// and Paddock's overhead at both (paddock minus base). The cleanup each
// call returns (may be nil) runs outside the timings.
func measurePair(b *testing.B, base, paddock func() (cleanup func(), err error)) {
	b.Helper()
	measureBlocks(b, 1, base, paddock)
}

// measureBlocks is measurePair alternating blocks of n calls: a
// millisecond operation measured right after one through the Docker
// daemon's exec path pays for the daemon's work after that exec (shim and
// state cleanup, for several milliseconds on two cores); in blocks only
// the first of each pays.
func measureBlocks(b *testing.B, n int, base, paddock func() (cleanup func(), err error)) {
	b.Helper()
	lb := make([]time.Duration, 0, b.N)
	lp := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i += n {
		for _, r := range []struct {
			fn  func() (func(), error)
			lat *[]time.Duration
		}{{base, &lb}, {paddock, &lp}} {
			for j := i; j < min(i+n, b.N); j++ {
				t0 := time.Now()
				cleanup, err := r.fn()
				*r.lat = append(*r.lat, time.Since(t0))
				if cleanup != nil {
					cleanup()
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.StopTimer()
	pct := func(lat []time.Duration, p float64) float64 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		return float64(lat[int(p*float64(len(lat)-1))].Microseconds())
	}
	b50, b99, p50, p99 := pct(lb, 0.5), pct(lb, 0.99), pct(lp, 0.5), pct(lp, 0.99)
	b.ReportMetric(b50, "base-p50-µs")
	b.ReportMetric(p50, "paddock-p50-µs")
	b.ReportMetric(p50-b50, "overhead-p50-µs")
	b.ReportMetric(b99, "base-p99-µs")
	b.ReportMetric(p99, "paddock-p99-µs")
	b.ReportMetric(p99-b99, "overhead-p99-µs")
	b.ReportMetric(p50/b50, "ratio-p50")
}

// BenchmarkAuthOverhead measures what auth adds to a command, in one run:
// the same op through a stack without auth and through one with it (the
// client in its tenant's account, the request crossing the service import
// and carrying the server's stamp, every identity under its permissions),
// alternating, at sync=1s so that fsync does not drown the difference.
// Both nodes sign their events; events' BenchmarkSign gives the cost of
// the two signatures per op.
//
//	go test -run '^$' -bench BenchmarkAuthOverhead -benchtime 1000x ./nodes/
func BenchmarkAuthOverhead(b *testing.B) {
	ctx := context.Background()
	broker := broker.Config{SyncInterval: time.Second}
	plain := testenv.StartStack(b, testenv.StackOptions{Broker: broker})
	authed := testenv.StartStack(b, testenv.StackOptions{Broker: broker, Auth: true})
	session := func(st *testenv.Stack) string {
		s, err := st.Client.Create(ctx, commands.CreateArgs{})
		if err != nil {
			b.Fatal(err)
		}
		return s.SessionID
	}
	ps, as := session(plain), session(authed)
	b.Run("exec-true", func(b *testing.B) {
		args := commands.ExecArgs{Argv: []string{"true"}}
		measurePair(b,
			func() (func(), error) { _, err := plain.Client.Exec(ctx, ps, args); return nil, err },
			func() (func(), error) { _, err := authed.Client.Exec(ctx, as, args); return nil, err })
	})
	b.Run("running", func(b *testing.B) {
		measurePair(b,
			func() (func(), error) { _, err := plain.Client.Running(ctx, ps); return nil, err },
			func() (func(), error) { _, err := authed.Client.Running(ctx, as); return nil, err })
	})
}

// BenchmarkProcEcho measures the round trip of one line typed into an
// interactive `sh` on a terminal until the shell's answer comes back:
// through the runtime's process directly, and through Paddock
// (proc_write, then proc_read with return_on_output until the answer),
// in the same run. The difference of the p50s is Paddock's overhead.
//
//	go test -run '^$' -bench BenchmarkProcEcho -benchtime 300x ./nodes/
func BenchmarkProcEcho(b *testing.B) {
	for _, sync := range syncModes {
		st := testenv.StartStack(b, testenv.StackOptions{Broker: broker.Config{SyncInterval: sync.interval}})
		ctx := context.Background()
		b.Run("direct/"+sync.name, func(b *testing.B) {
			sb, err := st.Local.Create(ctx, runtime.Spec{Tenant: "bench", SessionID: uuid.NewString(), Node: "node-1"})
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Shutdown(ctx)
			benchEchoDirect(b, sb)
		})
		b.Run("paddock/"+sync.name, func(b *testing.B) {
			s, err := st.Client.Create(ctx, commands.CreateArgs{})
			if err != nil {
				b.Fatal(err)
			}
			benchEchoPaddock(b, st.Client, s.SessionID)
		})
	}
}

// benchEchoDirect is BenchmarkProcEcho's baseline on sandbox sb.
func benchEchoDirect(b *testing.B, sb runtime.Sandbox) {
	ctx := context.Background()
	p, err := sb.(runtime.Processes).StartProcess(ctx, runtime.ProcessSpec{Argv: []string{"sh"}, TTY: true})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	out := make(chan []byte, 64)
	go func() { // ends when the process's output ends (Close)
		defer close(out)
		buf := make([]byte, 4096)
		for {
			n, err := p.Read(buf)
			if n > 0 {
				out <- append([]byte(nil), buf[:n]...)
			}
			if err != nil {
				return
			}
		}
	}()
	i := 0
	measure(b, func() error {
		i++
		want := fmt.Sprint(1_000_000 + i) // the answer, which the typed line does not show
		if _, err := fmt.Fprintf(p, "echo $((%d+1000000))\n", i); err != nil {
			return err
		}
		var seen []byte
		for !bytes.Contains(seen, []byte(want)) {
			chunk, ok := <-out
			if !ok {
				return fmt.Errorf("the shell ended")
			}
			seen = append(seen, chunk...)
		}
		return nil
	})
}

// benchEchoPaddock is BenchmarkProcEcho through a client.
func benchEchoPaddock(b *testing.B, c *client.Client, id string) {
	ctx := context.Background()
	zero, wait := int64(0), int64(5000)
	p, err := c.ProcStart(ctx, id, commands.ProcStartArgs{Argv: []string{"sh"}, TTY: true, YieldMS: &zero})
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	measure(b, func() error {
		i++
		want := fmt.Sprint(1_000_000 + i)
		r, err := c.ProcWrite(ctx, id, commands.ProcArgs{ProcessID: p.ProcessID, Input: []byte(fmt.Sprintf("echo $((%d+1000000))\n", i)), YieldMS: &wait, ReturnOnOutput: true})
		seen := r.Output
		for err == nil && !strings.Contains(seen, want) {
			r, err = c.ProcRead(ctx, id, commands.ProcArgs{ProcessID: p.ProcessID, YieldMS: &wait, ReturnOnOutput: true})
			seen += r.Output
		}
		return err
	})
}
