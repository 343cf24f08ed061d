package nodes_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/metrics"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/scheduler"
	"github.com/paddock-dev/paddock/testenv"
)

// BenchmarkMetricsOverhead measures what metrics add to an exec, in one
// run: the same exec through a stack without metrics (base) and through
// one whose node and scheduler record into a Metrics (paddock),
// alternating, at sync=1s so that fsync does not drown the difference.
//
//	go test -run '^$' -bench BenchmarkMetricsOverhead -benchtime 1000x -count 3 ./nodes/
func BenchmarkMetricsOverhead(b *testing.B) {
	ctx := context.Background()
	bc := broker.Config{SyncInterval: time.Second}
	m := metrics.New()
	plain := testenv.StartStack(b, testenv.StackOptions{Broker: bc})
	metered := testenv.StartStack(b, testenv.StackOptions{Broker: bc, Node: nodes.Config{Metrics: m}, Scheduler: scheduler.Config{Metrics: m}})
	session := func(st *testenv.Stack) string {
		s, err := st.Client.Create(ctx, commands.CreateArgs{})
		if err != nil {
			b.Fatal(err)
		}
		return s.SessionID
	}
	ps, ms := session(plain), session(metered)
	b.Run("exec-true", func(b *testing.B) {
		args := commands.ExecArgs{Argv: []string{"true"}}
		measurePair(b,
			func() (func(), error) { _, err := plain.Client.Exec(ctx, ps, args); return nil, err },
			func() (func(), error) { _, err := metered.Client.Exec(ctx, ms, args); return nil, err })
	})
}

// BenchmarkObservabilityOverhead measures what metrics and tracing
// together add to an exec, in one run: a stack with neither (base) and
// one whose client, scheduler and node trace (an SDK provider with the
// batch processor and a discarding exporter, as an OTLP export would
// run) and whose node and scheduler record metrics (paddock),
// alternating, at sync=1s.
//
//	go test -run '^$' -bench BenchmarkObservabilityOverhead -benchtime 1000x -count 3 ./nodes/
func BenchmarkObservabilityOverhead(b *testing.B) {
	ctx := context.Background()
	bc := broker.Config{SyncInterval: time.Second}
	m := metrics.New()
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	plain := testenv.StartStack(b, testenv.StackOptions{Broker: bc})
	observed := testenv.StartStack(b, testenv.StackOptions{Broker: bc,
		Node:      nodes.Config{Metrics: m, TracerProvider: tp},
		Scheduler: scheduler.Config{Metrics: m, TracerProvider: tp}})
	traced, err := client.New(observed.ClientConn, client.Options{TracerProvider: tp})
	if err != nil {
		b.Fatal(err)
	}
	ps, err := plain.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		b.Fatal(err)
	}
	obs, err := traced.Create(ctx, commands.CreateArgs{})
	if err != nil {
		b.Fatal(err)
	}
	args := commands.ExecArgs{Argv: []string{"true"}}
	measurePair(b,
		func() (func(), error) { _, err := plain.Client.Exec(ctx, ps.SessionID, args); return nil, err },
		func() (func(), error) { _, err := traced.Exec(ctx, obs.SessionID, args); return nil, err })
}
