package events_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/testenv"
)

func tenantEvent(tenant, session string, seq uint64, phase events.Phase) *events.Event {
	ev := newEvent(session, seq, phase)
	ev.Tenant = tenant
	return ev
}

// TestOnePartitionIsTodaysLayout: a deployment made without partitions
// (and one asking for 1) is the single stream SBX_EVENTS on the same
// subjects as before partitions, with no partitions metadata, and OpenLog
// reads it as one partition.
func TestOnePartitionIsTodaysLayout(t *testing.T) {
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, 20*time.Second)
	for _, n := range []int{0, 1} {
		s, err := events.EnsureStream(ctx, js, events.StreamConfig{Partitions: n})
		if err != nil {
			t.Fatalf("partitions %d: %v", n, err)
		}
		cfg := s.CachedInfo().Config
		if cfg.Name != events.DefaultStream || !slices.Equal(cfg.Subjects, []string{"sbx.evt.>", "sbx.nodeevt.>"}) {
			t.Fatalf("partitions %d: stream %s on %v, want SBX_EVENTS on sbx.evt.>, sbx.nodeevt.>", n, cfg.Name, cfg.Subjects)
		}
		if v, ok := cfg.Metadata[events.PartitionsMetadata]; ok {
			t.Fatalf("partitions %d: metadata %s=%s, want none", n, events.PartitionsMetadata, v)
		}
	}
	log, err := events.OpenLog(ctx, js, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if log.Partitions() != 1 || !slices.Equal(log.Streams(), []string{events.DefaultStream}) {
		t.Fatalf("open log: %d partitions on %v, want 1 on SBX_EVENTS", log.Partitions(), log.Streams())
	}
	if got := log.Subjects().Session("t", "s", "exec", events.PhaseStart); got != "sbx.evt.t.s.exec.start" {
		t.Fatalf("subject %s, want sbx.evt.t.s.exec.start", got)
	}
	if _, err := log.Append(ctx, newEvent("s1", 1, events.PhaseStart), 0); err != nil {
		t.Fatal(err)
	}
	evs, err := events.NewLog(js, "", "").Session(ctx, "t", "s1")
	if err != nil || len(evs) != 1 {
		t.Fatalf("read by an unpartitioned log: %d events, %v; want 1", len(evs), err)
	}
}

// TestPartitionsAreFixed: the number of partitions is the deployment's;
// asking for another one is invalid_state whichever way, 0 keeps it, and
// numbers out of range are invalid_request.
func TestPartitionsAreFixed(t *testing.T) {
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, 20*time.Second)
	for _, n := range []int{-1, events.MaxPartitions + 1} {
		if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Partitions: n}); !errors.Is(err, errcode.ErrInvalidRequest) {
			t.Fatalf("partitions %d: got %v, want invalid_request", n, err)
		}
	}
	// An unpartitioned deployment does not become a partitioned one by a flag.
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Name: "OLD"}); err != nil {
		t.Fatal(err)
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Name: "OLD", Partitions: 4}); !errors.Is(err, errcode.ErrInvalidState) {
		t.Fatalf("4 partitions over an unpartitioned stream: got %v, want invalid_state", err)
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Prefix: "p", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Prefix: "p", Partitions: 2}); !errors.Is(err, errcode.ErrInvalidState) {
		t.Fatalf("2 partitions over 4: got %v, want invalid_state", err)
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Prefix: "p"}); err != nil {
		t.Fatalf("partitions 0 (keep): %v", err)
	}
	log, err := events.OpenLog(ctx, js, "", "p")
	if err != nil || log.Partitions() != 4 {
		t.Fatalf("open log: %v, %v; want 4 partitions", log, err)
	}
	for k, name := range log.Streams() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("partition %d: %v", k, err)
		}
		want := []string{fmt.Sprintf("p.pevt.%d.>", k)}
		if k == 0 {
			want = append(want, "p.nodeevt.>")
		}
		if got := s.CachedInfo().Config.Subjects; !slices.Equal(got, want) {
			t.Fatalf("partition %d (%s): subjects %v, want %v", k, name, got, want)
		}
	}
	// A stream whose metadata was tampered with is refused, not guessed at.
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BAD", Subjects: []string{"bad.>"}, Metadata: map[string]string{events.PartitionsMetadata: "lots"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := events.OpenLog(ctx, js, "BAD", "bad"); err == nil {
		t.Fatal("open log with partitions metadata \"lots\": no error")
	}
}

// TestFourPartitions: on a deployment of 4 partitions every session's
// events are in the one stream PartitionOf names, the guard still refuses
// a second writer, and reads across partitions deliver every event, each
// session's in order, and only what the filter names.
func TestFourPartitions(t *testing.T) {
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, 60*time.Second)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	log, err := events.OpenLog(ctx, js, "", "")
	if err != nil {
		t.Fatal(err)
	}
	const sessions, per = 40, 3
	type key struct{ tenant, session string }
	last := map[key]uint64{}
	for i := range sessions {
		k := key{[]string{"acme", "beta"}[i%2], fmt.Sprintf("s%02d", i)}
		for seq := uint64(1); seq <= per; seq++ {
			at, err := log.Append(ctx, tenantEvent(k.tenant, k.session, seq, events.PhaseStart), last[k])
			if err != nil {
				t.Fatalf("%v seq %d: %v", k, seq, err)
			}
			last[k] = at
		}
	}
	// Each session is in its partition's stream, and every partition has some.
	counts := map[string]uint64{}
	for _, name := range log.Streams() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
		if err != nil {
			t.Fatal(err)
		}
		counts[name] = info.State.Msgs
		for subj := range info.State.Subjects {
			ref, ok := log.Subjects().Parse(subj)
			if !ok || events.PartitionStream("", events.PartitionOf(ref.Tenant, ref.Session, 4)) != name {
				t.Fatalf("subject %s in %s: parsed %+v %v, want it in partition %d", subj, name, ref, ok, events.PartitionOf(ref.Tenant, ref.Session, 4))
			}
		}
	}
	for name, n := range counts {
		if n == 0 {
			t.Fatalf("partition %s holds no events (counts %v)", name, counts)
		}
	}
	// The guard: a stale writer is refused within its partition.
	k := key{"acme", "s00"}
	if _, err := log.Append(ctx, tenantEvent(k.tenant, k.session, per+1, events.PhaseStart), last[k]-1); !errors.Is(err, errcode.ErrConcurrencyConflict) {
		t.Fatalf("stale writer: got %v, want concurrency_conflict", err)
	}
	tail, err := log.Last(ctx, k.tenant, k.session)
	if err != nil || tail.StreamSeq != last[k] || tail.Event.Seq != per {
		t.Fatalf("last: %+v, %v; want seq %d at %d", tail, err, per, last[k])
	}
	if lt, err := log.LastFromLeader(ctx, k.tenant, k.session); err != nil || lt.StreamSeq != last[k] || lt.Event.Seq != per {
		t.Fatalf("last from the leader: %+v, %v; want seq %d at %d (the session's partition)", lt, err, per, last[k])
	}
	evs, err := log.Session(ctx, k.tenant, k.session)
	if err != nil || len(evs) != per {
		t.Fatalf("session: %d events, %v; want %d", len(evs), err, per)
	}
	// Everything, each session in order.
	seen := map[key][]uint64{}
	if err := log.Read(ctx, events.ReadOptions{}, func(m events.Msg) error {
		ev, err := m.Decode()
		if err != nil {
			return err
		}
		k := key{ev.Tenant, ev.SessionID}
		seen[k] = append(seen[k], ev.Seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != sessions {
		t.Fatalf("read %d sessions, want %d", len(seen), sessions)
	}
	for k, seqs := range seen {
		if !slices.Equal(seqs, []uint64{1, 2, 3}) {
			t.Fatalf("session %v read as %v, want 1 2 3", k, seqs)
		}
	}
	// One tenant's filter, across partitions: that tenant's alone.
	n := 0
	if err := log.Read(ctx, events.ReadOptions{Filters: []string{log.Subjects().Filter("beta", "", "")}}, func(m events.Msg) error {
		ev, err := m.Decode()
		if err != nil {
			return err
		}
		if ev.Tenant != "beta" {
			return fmt.Errorf("tenant %s's event %s in beta's read", ev.Tenant, m.Subject)
		}
		n++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != sessions/2*per {
		t.Fatalf("beta's read: %d events, want %d", n, sessions/2*per)
	}
	// A start sequence is a place in one stream.
	if err := log.Read(ctx, events.ReadOptions{StartSeq: 2}, func(events.Msg) error { return nil }); !errors.Is(err, errcode.ErrInvalidRequest) {
		t.Fatalf("start seq across partitions: got %v, want invalid_request", err)
	}
	// A durable consumer of the whole log is one per partition, each
	// resuming where it left off; a start sequence is a place in one.
	if err := log.ReadDurable(ctx, events.DurableOptions{Name: "all", StartSeq: 2}, func(events.Msg) error { return nil }); !errors.Is(err, errcode.ErrInvalidRequest) {
		t.Fatalf("durable start seq across partitions: got %v, want invalid_request", err)
	}
	whole := map[string]int{}
	for range 2 {
		if err := log.ReadDurable(ctx, events.DurableOptions{Name: "all"}, func(m events.Msg) error {
			whole[m.Stream]++
			return nil
		}); err != nil {
			t.Fatalf("durable across partitions: %v", err)
		}
	}
	if n := whole[events.PartitionStream("", 0)] + whole[events.PartitionStream("", 1)] + whole[events.PartitionStream("", 2)] + whole[events.PartitionStream("", 3)]; n != sessions*per || len(whole) != 4 {
		t.Fatalf("two durable reads across partitions delivered %v, want %d once in all", whole, sessions*per)
	}
	total := 0
	for k := range log.Partitions() {
		if err := log.Partition(k).ReadDurable(ctx, events.DurableOptions{Name: "d"}, func(m events.Msg) error {
			if m.Stream != events.PartitionStream("", k) {
				return fmt.Errorf("partition %d's durable delivered from %s", k, m.Stream)
			}
			total++
			return nil
		}); err != nil {
			t.Fatalf("partition %d durable: %v", k, err)
		}
	}
	if total != sessions*per {
		t.Fatalf("durables delivered %d, want %d", total, sessions*per)
	}
}

// TestFollowAcrossPartitions: a follow read, and a durable follow, deliver
// new events of every partition as they are appended, one at a time.
func TestFollowAcrossPartitions(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) { followAcrossPartitions(t, durable) })
	}
}

func followAcrossPartitions(t *testing.T, durable bool) {
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	log, err := events.OpenLog(ctx, js, "", "")
	if err != nil {
		t.Fatal(err)
	}
	const want = 24
	fctx, cancel := context.WithCancel(ctx)
	var (
		mu      sync.Mutex // guards got
		got     = map[string]bool{}
		inFn    atomic.Int32
		overlap atomic.Bool
		done    = make(chan error, 1)
	)
	fn := func(m events.Msg) error {
		if inFn.Add(1) > 1 {
			overlap.Store(true)
		}
		defer inFn.Add(-1)
		mu.Lock()
		got[m.Stream] = true
		mu.Unlock()
		runtime.Gosched() // give another partition's reader the chance to overlap
		return nil
	}
	go func() {
		if durable {
			done <- log.ReadDurable(fctx, events.DurableOptions{Name: "follow", Follow: true}, fn)
			return
		}
		done <- log.Read(fctx, events.ReadOptions{Follow: true}, fn)
	}()
	for range want {
		if _, err := log.Append(ctx, newEvent(uuid.NewString(), 1, events.PhaseStart), 0); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) < 4 {
			return fmt.Errorf("follow saw events of %d partitions, want 4", len(got))
		}
		return nil
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("follow ended with %v, want context.Canceled", err)
	}
	if overlap.Load() {
		t.Fatal("fn ran twice at once")
	}
}

// TestParsePartitioned: a partitioned subject parses to its partition; one
// naming a partition out of range, or not a number, does not parse.
func TestParsePartitioned(t *testing.T) {
	s := events.Subjects{Partitions: 4}
	for subj, ok := range map[string]bool{
		"sbx.pevt.3.t.s.exec.start":  true,
		"sbx.pevt.4.t.s.exec.start":  false,
		"sbx.pevt.-1.t.s.exec.start": false,
		"sbx.pevt.03.t.s.exec.start": false,
		"sbx.pevt.x.t.s.exec.start":  false,
		"sbx.pevt.1.t.s.exec":        false,
	} {
		ref, got := s.Parse(subj)
		if got != ok {
			t.Fatalf("parse %s: %v, want %v", subj, got, ok)
		}
		if ok && (ref.Partition != 3 || ref.Tenant != "t" || ref.Session != "s") {
			t.Fatalf("parse %s: %+v", subj, ref)
		}
	}
	sub := s.Session("t", "s", "exec", events.PhaseStart)
	ref, ok := s.Parse(sub)
	if !ok || ref.Partition != events.PartitionOf("t", "s", 4) {
		t.Fatalf("round trip of %s: %+v %v", sub, ref, ok)
	}
}

// TestNewLogLearnsPartitions: a log made by NewLog, as every reader and
// writer made before partitions, learns the deployment's 4 partitions on
// first use: its appends land in the session's partition, its reads with
// unpartitioned filters find them, and a second writer is still refused.
func TestNewLogLearnsPartitions(t *testing.T) {
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	log := events.NewLog(js, "", "")
	seqs := map[string]uint64{}
	for i := range 12 {
		s := fmt.Sprintf("s%d", i)
		at, err := log.Append(ctx, newEvent(s, 1, events.PhaseStart), 0)
		if err != nil {
			t.Fatalf("append %s: %v", s, err)
		}
		seqs[s] = at
	}
	if log.Subjects().Partitions != 4 {
		t.Fatalf("after first use the log knows %d partitions, want 4", log.Subjects().Partitions)
	}
	if _, err := log.Append(ctx, newEvent("s0", 1, events.PhaseStart), 0); !errors.Is(err, errcode.ErrConcurrencyConflict) {
		t.Fatalf("second creator: got %v, want concurrency_conflict", err)
	}
	// A fresh log reads with the filters of an unpartitioned one.
	fresh := events.NewLog(js, "", "")
	for s, at := range seqs {
		var got []events.Msg
		err := fresh.Read(ctx, events.ReadOptions{Filters: []string{"sbx.evt.t." + s + ".>"}}, func(m events.Msg) error {
			got = append(got, m)
			return nil
		})
		want := events.PartitionStream("", events.PartitionOf("t", s, 4))
		if err != nil || len(got) != 1 || got[0].StreamSeq != at || got[0].Stream != want {
			t.Fatalf("read %s: %d msgs (%+v), %v; want 1 at %s:%d", s, len(got), got, err, want, at)
		}
	}
	n := 0
	if err := events.NewLog(js, "", "").Read(ctx, events.ReadOptions{Filters: []string{"sbx.evt.t.*.exec.*"}}, func(events.Msg) error { n++; return nil }); err != nil || n != 12 {
		t.Fatalf("read by op: %d events, %v; want 12", n, err)
	}
}

// TestResolveBoundsADroppedLookup: a JetStream API request that no one
// answers (a cluster before its meta leader is elected drops them) fails
// unavailable, for its caller to try again, long before the caller's own
// deadline: a node's register used to wait out its two-minute start.
func TestResolveBoundsADroppedLookup(t *testing.T) {
	b := testenv.StartBroker(t)
	nc := testenv.Connect(t, b.ClientURL())
	// The API requests go to dead.API.>, taken and never answered.
	sub, err := nc.SubscribeSync("dead.API.>")
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.NewWithAPIPrefix(nc, "dead.API")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, time.Minute)
	log := events.NewLog(js, "", "")
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := log.Resolve(ctx)
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; errcode.Of(err) != errcode.Unavailable || ctx.Err() != nil {
			t.Fatalf("a dropped lookup: %v (the caller's context: %v); want unavailable before the caller's deadline", err, ctx.Err())
		}
	}
	if n, _, _ := sub.Pending(); n != 2 {
		t.Fatalf("%d lookups reached the API, want 2", n)
	}
}

// TestReadResumesEachPartition: a read across partitions that a fault
// cut short goes on (ReadOptions.After) from where each partition's
// stream was, delivering every event exactly once; a stream After does
// not name starts from the beginning.
func TestReadResumesEachPartition(t *testing.T) {
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	log := events.NewLog(js, "", "")
	for i := range 12 {
		s := fmt.Sprintf("s%02d", i)
		var last uint64
		for seq := uint64(1); seq <= 2; seq++ {
			at, err := log.Append(ctx, newEvent(s, seq, events.PhaseStart), last)
			if err != nil {
				t.Fatal(err)
			}
			last = at
		}
	}
	var all []events.Msg
	if err := log.Read(ctx, events.ReadOptions{}, func(m events.Msg) error { all = append(all, m); return nil }); err != nil {
		t.Fatal(err)
	}
	byStream := map[string][]events.Msg{}
	for _, m := range all {
		byStream[m.Stream] = append(byStream[m.Stream], m)
	}
	if len(all) != 24 || len(byStream) != 3 {
		t.Fatalf("read %d events in %d streams, want 24 in 3", len(all), len(byStream))
	}
	// The cut: two streams part read (the first one's first event, the
	// second one's first two), the third not at all.
	resolved, err := log.Resolve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	streams := resolved.Streams()
	after := map[string]uint64{streams[0]: byStream[streams[0]][0].StreamSeq, streams[1]: byStream[streams[1]][1].StreamSeq}
	seen := map[string]int{}
	for _, m := range append(byStream[streams[0]][:1], byStream[streams[1]][:2]...) {
		seen[m.Stream+fmt.Sprint(m.StreamSeq)]++
	}
	err = log.Read(ctx, events.ReadOptions{After: after, StartSeq: 999}, func(m events.Msg) error {
		seen[m.Stream+fmt.Sprint(m.StreamSeq)]++
		return nil
	})
	if err != nil {
		t.Fatalf("resumed read: %v", err)
	}
	if len(seen) != 24 {
		t.Fatalf("the read and its resumption delivered %d distinct events, want 24", len(seen))
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("event %s delivered %d times", k, n)
		}
	}
}
