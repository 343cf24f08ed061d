package tracing_test

import (
	"context"
	"sort"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/scheduler"
	"github.com/paddock-dev/paddock/testenv"
)

// BenchmarkExecTracing measures an exec (local runtime, `true`) with
// tracing off and on (client, scheduler and node on one SDK provider with
// the batch span processor and an exporter that discards), in one run:
// each iteration runs one exec on each stack, alternating which goes
// first, so that load on the machine weighs on both alike. It reports the
// median of each, the overhead of tracing on the medians, and the median
// of the paired differences (on minus off within an iteration).
//
//	go test -run '^$' -bench BenchmarkExecTracing -benchtime 2000x -count 3 ./tracing/
func BenchmarkExecTracing(b *testing.B) {
	ctx := testenv.Context(b, 10*time.Minute)
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	type side struct {
		c  *client.Client
		id string
	}
	open := func(tp trace.TracerProvider) side {
		st := testenv.StartStack(b, testenv.StackOptions{
			Node:      nodes.Config{TracerProvider: tp},
			Scheduler: scheduler.Config{TracerProvider: tp},
		})
		c, err := client.New(st.ClientConn, client.Options{TracerProvider: tp})
		if err != nil {
			b.Fatal(err)
		}
		res, err := c.Create(ctx, commands.CreateArgs{})
		if err != nil {
			b.Fatal(err)
		}
		return side{c, res.SessionID}
	}
	off, on := open(nil), open(tp)
	args := commands.ExecArgs{Argv: []string{"true"}}
	exec := func(s side) time.Duration {
		t0 := time.Now()
		if _, err := s.c.Exec(ctx, s.id, args); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	for range 10 { // warm both up
		exec(off)
		exec(on)
	}
	var offLat, onLat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			offLat = append(offLat, exec(off))
			onLat = append(onLat, exec(on))
		} else {
			onLat = append(onLat, exec(on))
			offLat = append(offLat, exec(off))
		}
	}
	b.StopTimer()
	// The paired difference (on minus off within an iteration) cancels
	// most of what load on the machine adds to both alike.
	diff := make([]time.Duration, len(onLat))
	for i := range onLat {
		diff[i] = onLat[i] - offLat[i]
	}
	median := func(d []time.Duration) float64 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return float64(d[len(d)/2].Nanoseconds()) / 1000
	}
	mOff, mOn, mDiff := median(offLat), median(onLat), median(diff)
	b.ReportMetric(mOff, "off-p50-µs")
	b.ReportMetric(mOn, "on-p50-µs")
	b.ReportMetric(100*(mOn-mOff)/mOff, "overhead-%")
	b.ReportMetric(mDiff, "paired-diff-p50-µs")
	b.ReportMetric(100*mDiff/mOff, "paired-overhead-%")
}

// BenchmarkStart measures the tracer's own cost per command on a node:
// Start and End of an op span (with its attributes) and its runtime child,
// off and on (batch processor, discarding exporter).
//
//	go test -run '^$' -bench BenchmarkStart -benchmem ./tracing/
func BenchmarkStart(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	for _, tc := range []struct {
		name string
		tp   trace.TracerProvider
	}{{"off", nil}, {"on", tp}} {
		b.Run(tc.name, func(b *testing.B) {
			tr := newTracer(tc.tp)
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				sctx, span, _ := tr.Start(ctx, "paddock.node exec", trace.SpanKindServer, "", "", tr.OpAttrs("default", "s1", "exec", "node-1")...)
				_, child := tr.Child(sctx, "paddock.runtime exec", tr.RuntimeAttrs("local")...)
				child.End()
				span.End()
			}
		})
	}
}
