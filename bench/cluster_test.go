package bench_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/scheduler"
	"github.com/paddock-dev/paddock/testenv"
)

// replicas is the replication of every stream and bucket on the cluster.
const replicas = 3

// engine is Paddock on a three-server cluster with the durable default
// (sync always): the events stream, the projection's KV buckets and the
// workspace object store at three replicas, and a scheduler. Nodes are
// added with addNodes.
type engine struct {
	cluster   *testenv.Cluster
	js        jetstream.JetStream
	log       *events.Log
	scheduler *scheduler.Scheduler
	agents    []*nodes.Agent
}

// startEngine starts the cluster, the streams and buckets and a scheduler,
// all stopped when tb ends.
func startEngine(tb testing.TB) *engine { return startEngineWith(tb, 1) }

// startEngineWith is startEngine on an event log of the given partitions,
// their leaders spread over the servers (as serve does).
func startEngineWith(tb testing.TB, partitions int) *engine {
	tb.Helper()
	ctx := testenv.Context(tb, time.Minute)
	e := &engine{cluster: testenv.StartCluster(tb, 3, broker.Config{})}
	nc := testenv.Connect(tb, e.cluster.URL())
	e.js = testenv.JetStream(tb, nc)
	testenv.Eventually(tb, time.Minute, func() error { // a new cluster may refuse R3 for a moment
		_, err := events.EnsureStream(ctx, e.js, events.StreamConfig{Replicas: replicas, Partitions: partitions})
		return err
	})
	var err error
	if e.log, err = events.NewLog(e.js, "", "").Resolve(ctx); err != nil {
		tb.Fatal(err)
	}
	spreadLeaders(ctx, tb, e.log)
	if _, err := projector.EnsureBuckets(ctx, e.js, projector.Config{Replicas: replicas}); err != nil {
		tb.Fatal(err)
	}
	if _, err := objectstore.Ensure(ctx, e.js, objectstore.Config{Replicas: replicas}); err != nil {
		tb.Fatal(err)
	}
	e.scheduler, err = scheduler.New(nc, e.log, scheduler.Config{}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if err := e.scheduler.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(e.scheduler.Close)
	return e
}

// addNodes starts n node agents with the noop runtime, each on its own
// connection, spread over the servers, and waits until the scheduler
// knows them all.
func (e *engine) addNodes(tb testing.TB, n int, cfg nodes.Config) {
	tb.Helper()
	first := len(e.agents)
	for i := range n {
		c := cfg
		c.ID = fmt.Sprintf("node-%d", first+i+1)
		url := e.cluster.Brokers[(first+i)%len(e.cluster.Brokers)].ClientURL()
		e.agents = append(e.agents, testenv.StartAgent(tb, url, c, noop{}))
	}
	testenv.Eventually(tb, 30*time.Second, func() error {
		if got := len(e.scheduler.Nodes()); got < len(e.agents) {
			return fmt.Errorf("scheduler knows %d nodes, want %d", got, len(e.agents))
		}
		return nil
	})
}

// clients returns n clients, each on its own connection, spread over the
// servers, in four tenants.
func (e *engine) clients(tb testing.TB, n int) []*client.Client {
	tb.Helper()
	cs := make([]*client.Client, n)
	for i := range cs {
		url := e.cluster.Brokers[i%len(e.cluster.Brokers)].ClientURL()
		c, err := client.New(testenv.Connect(tb, url), client.Options{Tenant: fmt.Sprintf("tenant-%d", i%4)})
		if err != nil {
			tb.Fatal(err)
		}
		cs[i] = c
	}
	return cs
}

// sessionExecs creates a session for each client and returns a drive
// function: worker w execs `true` in client w's session.
func sessionExecs(ctx context.Context, tb testing.TB, cs []*client.Client) func(w int) error {
	tb.Helper()
	ids := make([]string, len(cs))
	for i, c := range cs {
		s, err := c.Create(ctx, commands.CreateArgs{})
		if err != nil {
			tb.Fatal(err)
		}
		ids[i] = s.SessionID
	}
	args := commands.ExecArgs{Argv: []string{"true"}}
	return func(w int) error {
		_, err := cs[w].Exec(ctx, ids[w], args)
		return err
	}
}

// drive runs n calls of fn spread over workers goroutines (fn gets the
// worker's index) and returns the latencies, sorted, and the wall time.
// The first error stops the run.
func drive(workers, n int, fn func(w int) error) ([]time.Duration, time.Duration, error) {
	var (
		next  atomic.Int64
		mu    sync.Mutex
		lat   = make([]time.Duration, 0, n)
		first error
		wg    sync.WaitGroup
	)
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for next.Add(1) <= int64(n) {
				t0 := time.Now()
				err := fn(w)
				mine = append(mine, time.Since(t0))
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					next.Store(int64(n)) // stop the others
					break
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat, elapsed, first
}

// benchDrive is drive of b.N calls, timed, failing b on an error, and
// reported under unit.
func benchDrive(b *testing.B, workers int, fn func(w int) error, unit string) {
	b.Helper()
	b.ResetTimer()
	lat, elapsed, err := drive(workers, b.N, fn)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	report(b, lat, elapsed, unit)
}

// report reports the rate of n operations in elapsed, under unit, and the
// p50 and p99 of lat.
func report(b *testing.B, lat []time.Duration, elapsed time.Duration, unit string) {
	b.Helper()
	if len(lat) == 0 {
		return
	}
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), unit)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}

// streamBytesPerMsg is the stored size of an average message of a stream
// (subject, headers and body, as the server counts it).
func streamBytesPerMsg(ctx context.Context, tb testing.TB, js jetstream.JetStream, name string) (float64, uint64) {
	tb.Helper()
	s, err := js.Stream(ctx, name)
	if err != nil {
		tb.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	if info.State.Msgs == 0 {
		return 0, 0
	}
	return float64(info.State.Bytes) / float64(info.State.Msgs), info.State.Msgs
}
