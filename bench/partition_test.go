package bench_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/testenv"
)

// partitionLogs opens, on each server of the cluster, the log of the
// deployment named name with prefix (made with n partitions at three
// replicas): writers spread over the servers as nodes do.
func partitionLogs(tb testing.TB, c *testenv.Cluster, name, prefix string, n int) []*events.Log {
	tb.Helper()
	ctx := testenv.Context(tb, time.Minute)
	logs := make([]*events.Log, len(c.Brokers))
	for i, br := range c.Brokers {
		js := testenv.JetStream(tb, testenv.Connect(tb, br.ClientURL()))
		if i == 0 {
			if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Name: name, Prefix: prefix, Replicas: replicas, Partitions: n}); err != nil {
				tb.Fatal(err)
			}
		}
		log, err := events.OpenLog(ctx, js, name, prefix)
		if err != nil {
			tb.Fatal(err)
		}
		if log.Partitions() != n {
			tb.Fatalf("%s has %d partitions, want %d", name, log.Partitions(), n)
		}
		logs[i] = log
	}
	return logs
}

// guardedAppender returns a drive function: worker w appends the next
// event of its own session through logs[w%len(logs)], guarded by the
// session's last sequence, as a node does.
func guardedAppender(ctx context.Context, logs []*events.Log, workers int) func(w int) error {
	type session struct {
		id        string
		seq, last uint64
	}
	ss := make([]session, workers)
	for i := range ss {
		ss[i].id = uuid.NewString()
	}
	return func(w int) error {
		s := &ss[w]
		s.seq++
		ev := &events.Event{
			Version: events.Version, EventID: uuid.NewString(), TS: time.Now().UTC(),
			Tenant: fmt.Sprintf("tenant-%d", w%4), SessionID: s.id, Seq: s.seq, Op: "exec", Phase: events.PhaseStart,
			SpanID: fmt.Sprintf("%016x", s.seq), Node: "node-1",
			Data: []byte(`{"argv":["true"],"timeout_ms":600000}`),
		}
		last, err := logs[w%len(logs)].Append(ctx, ev, s.last)
		s.last = last
		return err
	}
}

// BenchmarkClusterPartitions measures guarded appends (as
// BenchmarkClusterAppend: each waits for its ack, each writer on its own
// session) to an event log of 1, 2, 4 and 8 partitions at three replicas
// on one three-server cluster, with the same writers, in one run, each
// deployment's leaders spread over the servers (SpreadLeaders, as serve
// does; the log shows them as placed and as spread). The 1-partition row
// is today's layout: the baseline.
//
//	go test -run '^$' -bench BenchmarkClusterPartitions -benchtime 4000x ./bench/
func BenchmarkClusterPartitions(b *testing.B) {
	ctx := context.Background()
	cluster := testenv.StartCluster(b, 3, broker.Config{})
	for _, n := range []int{1, 2, 4, 8} {
		logs := partitionLogs(b, cluster, fmt.Sprintf("EVP%d", n), fmt.Sprintf("p%d", n), n)
		placed, err := logs[0].Leaders(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%d partitions: leaders %v as placed", n, placed)
		spreadLeaders(ctx, b, logs[0])
		for _, workers := range []int{64, 256} {
			b.Run(fmt.Sprintf("partitions=%d/workers=%d", n, workers), func(b *testing.B) {
				benchDrive(b, workers, guardedAppender(ctx, logs, workers), "events/s")
			})
		}
	}
}

// BenchmarkGuardPrefilled measures the per-session guard
// (ExpectLastSequenceForSubject over <prefix>.evt.<t>.<s>.>) on one
// stream at three replicas that already holds many session subjects (one
// event each, published unguarded and asynchronously to fill it fast):
// guarded appends of 64 writers on sessions of their own, against the
// same on an empty stream in the same run. PADDOCK_GUARD_SUBJECTS lists
// the fills (default 100000,300000; 1000000 takes minutes to fill here).
//
//	go test -run '^$' -bench BenchmarkGuardPrefilled -benchtime 4000x ./bench/
func BenchmarkGuardPrefilled(b *testing.B) {
	ctx := context.Background()
	cluster := testenv.StartCluster(b, 3, broker.Config{})
	for _, fill := range guardFills(b, 100_000, 300_000) {
		name, prefix := fmt.Sprintf("EVG%d", fill), fmt.Sprintf("g%d", fill)
		logs := partitionLogs(b, cluster, name, prefix, 1)
		js := testenv.JetStream(b, testenv.Connect(b, cluster.URL()))
		prefill(ctx, b, js, logs[0].Subjects(), fill)
		b.Run(fmt.Sprintf("subjects=%d/workers=64", fill), func(b *testing.B) {
			benchDrive(b, 64, guardedAppender(ctx, logs, 64), "events/s")
		})
	}
}

// spreadLeaders spreads the log's partition leaders over the servers (as
// serve does), retrying while the new groups settle, and logs where they
// end.
func spreadLeaders(ctx context.Context, tb testing.TB, log *events.Log) {
	tb.Helper()
	testenv.Eventually(tb, time.Minute, func() error {
		_, err := log.SpreadLeaders(ctx)
		return err
	})
	got, err := log.Leaders(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Logf("%d partitions: leaders %v after the spread", log.Partitions(), got)
}

// prefill publishes one event on each of n session subjects, unguarded,
// with a window of asynchronous publishes, waits for every ack, and logs
// how long it took.
func prefill(ctx context.Context, tb testing.TB, js jetstream.JetStream, subj events.Subjects, n int) {
	tb.Helper()
	if n == 0 {
		return
	}
	began := time.Now()
	defer func() { tb.Logf("filled %d session subjects in %s", n, time.Since(began).Round(time.Millisecond)) }()
	data := []byte(`{"version":1,"op":"create","phase":"start","data":{"image":"paddock/sandbox-base"}}`)
	for i := 0; i < n; i++ {
		if _, err := js.PublishAsync(subj.Session("fill", fmt.Sprintf("s%07d", i), "create", events.PhaseStart), data); err != nil {
			tb.Fatal(err)
		}
		if i%2000 == 1999 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				tb.Fatalf("prefill: acks of %d events did not come within a minute", i+1)
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		tb.Fatal(ctx.Err())
	}
}
