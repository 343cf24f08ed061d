package bench_test

import (
	"context"
	"fmt"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/testenv"
)

// BenchmarkClusterAppend measures guarded event appends (each waiting for
// its ack, each session's appends in order as a node makes them) from
// several goroutines, one session each: to the events stream at three
// replicas on the three-server cluster, and to the same stream at one
// replica on a single server as the baseline, both with sync always.
//
//	go test -run '^$' -bench BenchmarkClusterAppend -benchtime 2000x ./bench/
func BenchmarkClusterAppend(b *testing.B) {
	ctx := context.Background()
	single := testenv.StartBrokerWith(b, broker.Config{})
	cluster := testenv.StartCluster(b, 3, broker.Config{})
	for _, tc := range []struct {
		name     string
		url      string
		replicas int
	}{
		{"R1-single-server", single.ClientURL(), 1},
		{"R3-cluster", cluster.URL(), 3},
	} {
		js := testenv.JetStream(b, testenv.Connect(b, tc.url))
		if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Replicas: tc.replicas}); err != nil {
			b.Fatal(err)
		}
		log := events.NewLog(js, "", "")
		for _, workers := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/workers=%d", tc.name, workers), func(b *testing.B) {
				type session struct {
					id        string
					seq, last uint64
				}
				ss := make([]session, workers)
				for i := range ss {
					ss[i].id = uuid.NewString()
				}
				b.ResetTimer()
				lat, elapsed, err := drive(workers, b.N, func(w int) error {
					s := &ss[w]
					s.seq++
					ev := &events.Event{
						Version: events.Version, EventID: uuid.NewString(), TS: time.Now().UTC(),
						Tenant: "bench", SessionID: s.id, Seq: s.seq, Op: "exec", Phase: events.PhaseStart,
						SpanID: fmt.Sprintf("%016x", s.seq), Node: "node-1",
						Data: []byte(`{"argv":["true"],"timeout_ms":600000}`),
					}
					last, err := log.Append(ctx, ev, s.last)
					s.last = last
					return err
				})
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				report(b, lat, elapsed, "events/s")
			})
		}
	}
}

// BenchmarkClusterCreate measures creates placed by the scheduler over 20
// simulated nodes (noop runtime), from 16 clients at once: client →
// scheduler (queue group) → node → create start and finish events at R3 →
// reply relayed.
//
//	go test -run '^$' -bench BenchmarkClusterCreate -benchtime 1000x ./bench/
func BenchmarkClusterCreate(b *testing.B) {
	ctx := context.Background()
	e := startEngine(b)
	e.addNodes(b, 20, nodes.Config{Capacity: 5000})
	cs := e.clients(b, 16)
	b.ResetTimer()
	lat, elapsed, err := drive(len(cs), b.N, func(w int) error {
		_, err := cs[w].Create(ctx, commands.CreateArgs{})
		return err
	})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	report(b, lat, elapsed, "creates/s")
	lo, hi := b.N, 0
	for _, a := range e.agents {
		n := len(a.Sessions())
		lo, hi = min(lo, n), max(hi, n)
	}
	b.ReportMetric(float64(lo), "min-sessions/node")
	b.ReportMetric(float64(hi), "max-sessions/node")
}

// BenchmarkClusterExec measures execs of the noop runtime through the
// whole path (client → the session's node → exec start and finish events
// at R3 → reply) over 20 simulated nodes, from 32 clients, each on its own
// session. It also reports the average stored event's size.
//
//	go test -run '^$' -bench BenchmarkClusterExec -benchtime 4000x ./bench/
func BenchmarkClusterExec(b *testing.B) {
	ctx := context.Background()
	e := startEngine(b)
	e.addNodes(b, 20, nodes.Config{})
	cs := e.clients(b, 32)
	execTrue := sessionExecs(ctx, b, cs)
	b.ResetTimer()
	lat, elapsed, err := drive(len(cs), b.N, execTrue)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	report(b, lat, elapsed, "execs/s")
	per, _ := streamBytesPerMsg(ctx, b, e.js, events.DefaultStream)
	b.ReportMetric(per, "B/event")
}

// sessionsPerNode is how many sessions BenchmarkNodeSessions creates on
// its one node.
const sessionsPerNode = 1000

// BenchmarkNodeSessions creates 1,000 sessions on one node (noop runtime)
// of the cluster and reports what they cost, per session: subscriptions
// on the servers (the node's own server, and another that learns the
// interest over its route), subscriptions on the node's connection, heap
// bytes of the process (node, client and the three servers: an upper
// bound for the node alone), right after and after the servers' caches
// have had time to expire; then, with the projector run at R3, the stored
// size of a create's events and of a session's KV record. One measurement
// per iteration, on a fresh engine: run it with -benchtime 1x.
//
//	go test -run '^$' -bench BenchmarkNodeSessions -benchtime 1x ./bench/
func BenchmarkNodeSessions(b *testing.B) {
	for range b.N {
		measureNodeSessions(b)
	}
}

func measureNodeSessions(b *testing.B) {
	ctx := context.Background()
	e := startEngine(b)
	e.addNodes(b, 1, nodes.Config{Capacity: sessionsPerNode})
	agentSrv, otherSrv := e.cluster.Brokers[0].Server(), e.cluster.Brokers[1].Server()
	cs := e.clients(b, 16)
	// A first create per client warms up their reply subscriptions.
	for _, c := range cs[:1] {
		if _, err := c.Create(ctx, commands.CreateArgs{}); err != nil {
			b.Fatal(err)
		}
	}
	heap := func() uint64 {
		var m goruntime.MemStats
		goruntime.GC()
		goruntime.GC()
		goruntime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	subs0, other0 := agentSrv.NumSubscriptions(), otherSrv.NumSubscriptions()
	heap0 := heap()
	b.ResetTimer()
	n := sessionsPerNode - 1
	lat, elapsed, err := drive(len(cs), n, func(w int) error {
		_, err := cs[w].Create(ctx, commands.CreateArgs{})
		return err
	})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	report(b, lat, elapsed, "creates/s")
	if got := len(e.agents[0].Sessions()); got != sessionsPerNode {
		b.Fatalf("node holds %d sessions, want %d", got, sessionsPerNode)
	}
	heap1 := heap()
	per := func(v float64) float64 { return v / float64(n) }
	b.ReportMetric(per(float64(agentSrv.NumSubscriptions())-float64(subs0))*1000, "server-subs/1k-sessions")
	b.ReportMetric(per(float64(otherSrv.NumSubscriptions())-float64(other0))*1000, "route-subs/1k-sessions")
	b.ReportMetric(per(float64(heap1)-float64(heap0)), "heap-B/session")
	// The servers' message block caches expire 10 s after their last use:
	// the settled heap is read once that has passed and the heap stopped
	// falling between two reads a second apart.
	written, prev := time.Now(), heap()
	prevAt := written
	testenv.Eventually(b, time.Minute, func() error {
		if time.Since(prevAt) < time.Second {
			return fmt.Errorf("less than a second since the last read")
		}
		cur := heap()
		falling := float64(cur) < 0.99*float64(prev)
		prev, prevAt = cur, time.Now()
		if since := time.Since(written); since < 11*time.Second || falling {
			return fmt.Errorf("heap %d B, %s after the last write: not settled", cur, since.Round(time.Second))
		}
		return nil
	})
	b.ReportMetric(per(float64(prev)-float64(heap0)), "heap-settled-B/session")

	evPer, evs := streamBytesPerMsg(ctx, b, e.js, events.DefaultStream)
	b.ReportMetric(evPer, "B/event")
	b.ReportMetric(float64(evs), "events")

	p, err := projector.New(e.js, projector.Config{Replicas: replicas}, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer p.Close(ctx)
	kv, err := e.js.KeyValue(ctx, projector.SessionsBucket)
	if err != nil {
		b.Fatal(err)
	}
	testenv.Eventually(b, time.Minute, func() error {
		st, err := kv.Status(ctx)
		if err != nil {
			return err
		}
		if st.Values() < sessionsPerNode {
			return fmt.Errorf("%d session records, want %d", st.Values(), sessionsPerNode)
		}
		return nil
	})
	kvPer, _ := streamBytesPerMsg(ctx, b, e.js, "KV_"+projector.SessionsBucket)
	b.ReportMetric(kvPer, "B/kv-record")
}
