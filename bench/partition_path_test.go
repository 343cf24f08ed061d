package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/testenv"
)

// BenchmarkClusterExecPartitions measures execs of the noop runtime
// through the whole path (as BenchmarkClusterExec: client → the session's
// node → exec start and finish events at R3 → reply) over 20 simulated
// nodes from 64 clients, on an event log of 1 and of 4 partitions (leaders
// spread), each on a cluster of its own, in one run, while one projector
// per partition folds the events into the R3 buckets. Besides the exec
// rate and p50/p99 it reports the projectors' lag sampled every 50 ms
// during the load (events behind the partition's last event, and the age
// of the oldest event not yet projected, to the sampling step), and how
// long the projectors took to catch up after the last exec.
//
//	go test -run '^$' -bench BenchmarkClusterExecPartitions -benchtime 4000x ./bench/
func BenchmarkClusterExecPartitions(b *testing.B) {
	for _, n := range []int{1, 4} {
		ctx := context.Background()
		e := startEngineWith(b, n)
		ps := e.startProjectors(b, n)
		e.addNodes(b, 20, nodes.Config{})
		cs := e.clients(b, 64)
		execTrue := sessionExecs(ctx, b, cs)
		b.Run(fmt.Sprintf("partitions=%d/clients=%d", n, len(cs)), func(b *testing.B) {
			sampler := startLagSampler(e.js, e.log.Streams(), ps, 50*time.Millisecond)
			b.ResetTimer()
			lat, elapsed, err := drive(len(cs), b.N, execTrue)
			b.StopTimer()
			lag := sampler.stop()
			if err != nil {
				b.Fatal(err)
			}
			report(b, lat, elapsed, "execs/s")
			caughtUp := time.Now()
			testenv.Eventually(b, 5*time.Minute, func() error { return projectorsCaughtUp(ctx, e.js, e.log.Streams(), ps) })
			lag.report(b)
			b.ReportMetric(float64(time.Since(caughtUp).Milliseconds()), "catch-up-ms")
		})
	}
}

// startProjectors starts one projector per partition of an n-partition
// log at three replicas, each closed when tb ends, and waits until each
// is set up.
func (e *engine) startProjectors(tb testing.TB, n int) []*projector.Projector {
	tb.Helper()
	ps := make([]*projector.Projector, n)
	for k := range n {
		p, err := projector.New(e.js, projector.Config{Replicas: replicas}.PartitionConfig(n, k), nil)
		if err != nil {
			tb.Fatal(err)
		}
		if err := p.Start(context.Background()); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = p.Close(context.Background()) })
		ps[k] = p
	}
	testenv.Eventually(tb, time.Minute, func() error {
		for _, p := range ps {
			if _, err := p.Lag(context.Background()); err != nil {
				return err
			}
		}
		return nil
	})
	return ps
}

// projectorsCaughtUp is nil once every projector has handled its
// partition's last event.
func projectorsCaughtUp(ctx context.Context, js jetstream.JetStream, streams []string, ps []*projector.Projector) error {
	for k, p := range ps {
		last, err := lastSeq(ctx, js, streams[k])
		if err != nil {
			return err
		}
		if pos := p.Stats().Position; pos < last {
			return fmt.Errorf("projector of %s at %d of %d", streams[k], pos, last)
		}
	}
	return nil
}

// lastSeq is the stream's last sequence, fresh from the server.
func lastSeq(ctx context.Context, js jetstream.JetStream, stream string) (uint64, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	return s.CachedInfo().State.LastSeq, nil
}

// lagSampler samples, every step until stopped, each projector's lag
// behind its partition's stream.
type lagSampler struct {
	cancel context.CancelFunc
	done   chan lagStats
}

// lagStats are the samples of a lagSampler, every partition's pooled.
type lagStats struct {
	events []uint64        // events behind the stream's last event
	age    []time.Duration // age of the oldest event not yet projected
}

// startLagSampler starts sampling; stop ends it and returns the samples.
// The age of a partition's oldest unprojected event (position+1) is the
// time since the first sample that saw the stream's last sequence reach
// it: exact to one step.
func startLagSampler(js jetstream.JetStream, streams []string, ps []*projector.Projector, step time.Duration) *lagSampler {
	ctx, cancel := context.WithCancel(context.Background()) // stopped by stop
	s := &lagSampler{cancel: cancel, done: make(chan lagStats, 1)}
	type seen struct {
		at   time.Time
		last uint64
	}
	go func() { // owned by s: stop cancels it and waits for its result
		var st lagStats
		hist := make([][]seen, len(ps))
		tick := time.NewTicker(step)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				s.done <- st
				return
			case <-tick.C:
			}
			for k, p := range ps {
				last, err := lastSeq(ctx, js, streams[k])
				if err != nil {
					continue // a sample lost to a slow server: the next one counts
				}
				now := time.Now()
				if n := len(hist[k]); n == 0 || hist[k][n-1].last < last {
					hist[k] = append(hist[k], seen{now, last})
				}
				pos := p.Stats().Position
				if last <= pos {
					st.events, st.age = append(st.events, 0), append(st.age, 0)
					continue
				}
				h := hist[k]
				i := sort.Search(len(h), func(i int) bool { return h[i].last > pos })
				st.events = append(st.events, last-pos)
				st.age = append(st.age, now.Sub(h[min(i, len(h)-1)].at))
			}
		}
	}()
	return s
}

// stop ends the sampling and returns the samples.
func (s *lagSampler) stop() lagStats {
	s.cancel()
	return <-s.done
}

// report reports the samples' maximum and p99 of both lags.
func (st lagStats) report(b *testing.B) {
	b.Helper()
	if len(st.events) == 0 {
		return
	}
	slices.Sort(st.events)
	slices.Sort(st.age)
	at := func(n int, p float64) int { return int(p * float64(n-1)) }
	b.ReportMetric(float64(st.events[len(st.events)-1]), "lag-max-events")
	b.ReportMetric(float64(st.events[at(len(st.events), 0.99)]), "lag-p99-events")
	b.ReportMetric(float64(st.age[len(st.age)-1].Milliseconds()), "lag-max-ms")
	b.ReportMetric(float64(st.age[at(len(st.age), 0.99)].Milliseconds()), "lag-p99-ms")
}

// BenchmarkGuardCost measures what the per-session guard
// (ExpectLastSequenceForSubject over <prefix>.evt.<t>.<s>.>) costs on a
// stream that already holds many session subjects: appends of 64 writers,
// each on a session of its own, guarded (as Log.Append) and unguarded (the
// same message with only its Msg-Id), on an empty stream and on streams
// pre-filled with 100,000 session subjects (one event each), in one run.
// One server, file store, fsync every minute rather than before each ack,
// so that the fsync does not hide the lookup. PADDOCK_GUARD_SUBJECTS
// replaces the fills after the empty one (1000000 takes minutes to fill).
//
//	go test -run '^$' -bench BenchmarkGuardCost -benchtime 20000x ./bench/
//	PADDOCK_GUARD_SUBJECTS=100000,1000000 go test -run '^$' -bench BenchmarkGuardCost -benchtime 20000x -timeout 30m ./bench/
func BenchmarkGuardCost(b *testing.B) {
	ctx := context.Background()
	srv := testenv.StartBrokerWith(b, broker.Config{SyncInterval: time.Minute})
	nc := testenv.Connect(b, srv.ClientURL())
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	for _, fill := range guardFills(b, 100_000) {
		name, prefix := fmt.Sprintf("EVC%d", fill), fmt.Sprintf("c%d", fill)
		if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Name: name, Prefix: prefix}); err != nil {
			b.Fatal(err)
		}
		log := events.NewLog(js, name, prefix)
		prefill(ctx, b, js, log.Subjects(), fill)
		for _, guard := range []bool{true, false} {
			b.Run(fmt.Sprintf("subjects=%d/guard=%t", fill, guard), func(b *testing.B) {
				fn := guardedAppender(ctx, []*events.Log{log}, 64)
				if !guard {
					fn = unguardedAppender(ctx, js, log.Subjects(), 64)
				}
				benchDrive(b, 64, fn, "events/s")
			})
		}
	}
}

// guardFills are the fills of the guard benchmarks: none (the baseline),
// then PADDOCK_GUARD_SUBJECTS's comma-separated counts, or def.
func guardFills(b *testing.B, def ...int) []int {
	b.Helper()
	v := os.Getenv("PADDOCK_GUARD_SUBJECTS")
	if v == "" {
		return append([]int{0}, def...)
	}
	fills := []int{0}
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			b.Fatalf("PADDOCK_GUARD_SUBJECTS: %q is not a count", f)
		}
		fills = append(fills, n)
	}
	return fills
}

// unguardedAppender is guardedAppender without the guard: worker w
// publishes the next event of its own session with its Msg-Id only.
func unguardedAppender(ctx context.Context, js jetstream.JetStream, subj events.Subjects, workers int) func(w int) error {
	ids := make([]string, workers)
	seqs := make([]uint64, workers)
	for i := range ids {
		ids[i] = uuid.NewString()
	}
	return func(w int) error {
		seqs[w]++
		ev := &events.Event{
			Version: events.Version, EventID: uuid.NewString(), TS: time.Now().UTC(),
			Tenant: fmt.Sprintf("tenant-%d", w%4), SessionID: ids[w], Seq: seqs[w], Op: "exec", Phase: events.PhaseStart,
			SpanID: fmt.Sprintf("%016x", seqs[w]), Node: "node-1",
			Data: []byte(`{"argv":["true"],"timeout_ms":600000}`),
		}
		data, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		msg := &nats.Msg{Subject: subj.Session(ev.Tenant, ev.SessionID, ev.Op, ev.Phase), Data: data}
		_, err = js.PublishMsg(ctx, msg, jetstream.WithMsgID(ev.EventID))
		return err
	}
}
