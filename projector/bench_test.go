package projector_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/replay"
	"github.com/paddock-dev/paddock/testenv"
)

// benchEvents is the stream size of the projection benchmarks:
// PADDOCK_BENCH_EVENTS, default 1,000,000.
func benchEvents(b *testing.B) int {
	b.Helper()
	n := 1_000_000
	if s := os.Getenv("PADDOCK_BENCH_EVENTS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 100 {
			b.Fatalf("PADDOCK_BENCH_EVENTS=%q: want a number >= 100", s)
		}
		n = v
	}
	return n
}

// eventSource makes realistic session events: sessions of 100 events (a
// create and 49 execs, start and finish each, with the prev_hash chain),
// 100 sessions active at a time with their events interleaved.
type eventSource struct {
	subj  events.Subjects
	wave  int
	next  int // index in the wave's interleaving
	state [100]struct {
		seq  uint64
		hash string
	}
	ok   bool
	code int
	dur  float64
}

func (s *eventSource) event() (string, []byte) {
	if s.next == 100*100 {
		s.wave, s.next = s.wave+1, 0
		for i := range s.state {
			s.state[i].seq, s.state[i].hash = 0, ""
		}
	}
	i := s.next % 100
	st := &s.state[i]
	s.next++
	st.seq++
	op, phase := "exec", events.PhaseStart
	if st.seq <= 2 {
		op = "create"
	}
	if st.seq%2 == 0 {
		phase = events.PhaseFinish
	}
	id := fmt.Sprintf("s-%d-%d", s.wave, i)
	ev := events.Event{
		Version: events.Version, EventID: fmt.Sprintf("%s-%d", id, st.seq), TS: time.Now().UTC(),
		Tenant: "bench", SessionID: id, Seq: st.seq, Op: op, Phase: phase,
		CommandID: "c-" + strconv.FormatUint(st.seq, 10), SpanID: fmt.Sprintf("%x", (st.seq+1)/2),
		Node: "node-1", Actor: "bench", PrevHash: st.hash,
	}
	switch {
	case op == "create" && phase == events.PhaseStart:
		ev.Data = json.RawMessage(`{"runtime":"local","workspace_root":"/workspace","epoch":1,"labels":{"team":"bench"}}`)
	case phase == events.PhaseStart:
		ev.Data = json.RawMessage(`{"argv":["sh","-c","echo hi"],"cwd":"","timeout_ms":0}`)
	default:
		ev.OK, ev.DurationMS, ev.ExitCode = &s.ok, &s.dur, &s.code
		ev.Data = json.RawMessage(`{"stdout_bytes":3,"stderr_bytes":0}`)
	}
	data, _ := json.Marshal(ev)
	st.hash = events.Hash(data)
	return s.subj.Session(ev.Tenant, ev.SessionID, ev.Op, ev.Phase), data
}

func newSource() *eventSource { return &eventSource{ok: true, dur: 1.5} }

// publish appends n events with async publishes and waits for their acks.
func publish(b *testing.B, js jetstream.JetStream, src *eventSource, n int) {
	b.Helper()
	for i := 0; i < n; i++ {
		subj, data := src.event()
		if _, err := js.PublishAsync(subj, data, jetstream.WithStallWait(time.Minute)); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		b.Fatal("publishes not acknowledged within 5 minutes")
	}
}

// relaxedStream starts a broker that fsyncs once a minute (so the
// benchmark measures the projection, not the disk) with the events stream.
func relaxedStream(b *testing.B) (jetstream.JetStream, *events.Log) {
	b.Helper()
	srv := testenv.StartBrokerWith(b, broker.Config{SyncInterval: time.Minute})
	nc := testenv.Connect(b, srv.ClientURL())
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := events.EnsureStream(context.Background(), js, events.StreamConfig{}); err != nil {
		b.Fatal(err)
	}
	return js, events.NewLog(js, "", "")
}

// BenchmarkRebuild compares rebuilding the projections from the whole
// stream (replay.Rebuild: decode and fold every event) with a raw drain of
// the same stream through an ordered consumer (the floor). One iteration
// is one pass over PADDOCK_BENCH_EVENTS events.
//
//	go test -run '^$' -bench BenchmarkRebuild -benchtime 1x -count 3 ./projector/
func BenchmarkRebuild(b *testing.B) {
	n := benchEvents(b)
	js, log := relaxedStream(b)
	publish(b, js, newSource(), n)
	ctx := context.Background()
	b.Run("drain", func(b *testing.B) {
		start := time.Now()
		for i := 0; i < b.N; i++ {
			got := 0
			if err := log.Read(ctx, events.ReadOptions{Filters: []string{">"}}, func(events.Msg) error { got++; return nil }); err != nil {
				b.Fatal(err)
			}
			if got != n {
				b.Fatalf("drained %d events, want %d", got, n)
			}
		}
		b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "events/s")
	})
	b.Run("rebuild", func(b *testing.B) {
		start := time.Now()
		for i := 0; i < b.N; i++ {
			res, err := replay.Rebuild(ctx, log, replay.Options{})
			if err != nil {
				b.Fatal(err)
			}
			if res.Events != uint64(n) || len(replay.Problems(res.Set)) != 0 {
				b.Fatalf("rebuilt %d events with %d problems, want %d and none", res.Events, len(replay.Problems(res.Set)), n)
			}
		}
		b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "events/s")
	})
}

// BenchmarkLiveProjector appends PADDOCK_BENCH_EVENTS events as fast as
// async publishes go while the projector runs, and reports both rates:
// append (publish until every ack) and projection (first publish until
// the projector has taken in the last event), on a relaxed-sync broker
// and on the durable default (every write fsynced; a tenth of the
// events).
//
//	go test -run '^$' -bench BenchmarkLiveProjector -benchtime 1x -count 3 ./projector/
func BenchmarkLiveProjector(b *testing.B) {
	for _, tc := range []struct {
		name string
		cfg  broker.Config
		div  int
	}{
		{"sync=1m", broker.Config{SyncInterval: time.Minute}, 1},
		{"sync=always", broker.Config{}, 10},
	} {
		b.Run(tc.name, func(b *testing.B) {
			n := benchEvents(b) / tc.div
			var appendSecs, projectSecs float64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				srv := testenv.StartBrokerWith(b, tc.cfg)
				nc := testenv.Connect(b, srv.ClientURL())
				js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := events.EnsureStream(context.Background(), js, events.StreamConfig{}); err != nil {
					b.Fatal(err)
				}
				p, err := projector.New(js, projector.Config{}, nil)
				if err != nil {
					b.Fatal(err)
				}
				if err := p.Start(context.Background()); err != nil {
					b.Fatal(err)
				}
				testenv.Eventually(b, 10*time.Second, func() error { _, err := p.Lag(context.Background()); return err })
				b.StartTimer()
				start := time.Now()
				publish(b, js, newSource(), n)
				appendSecs += time.Since(start).Seconds()
				testenv.Eventually(b, 10*time.Minute, func() error {
					if pos := p.Stats().Position; pos < uint64(n) {
						return fmt.Errorf("projector at %d of %d", pos, n)
					}
					return nil
				})
				projectSecs += time.Since(start).Seconds()
				b.StopTimer()
				if s := p.Stats(); s.Problems != 0 || s.Taken != uint64(n) {
					b.Fatalf("projector %+v, want %d taken and no problems", s, n)
				}
				_ = p.Close(context.Background())
				nc.Close()
				srv.Shutdown()
			}
			b.ReportMetric(float64(n*b.N)/appendSecs, "append-events/s")
			b.ReportMetric(float64(n*b.N)/projectSecs, "projected-events/s")
		})
	}
}
