package projector_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/testenv"
)

// streamSetup starts a broker with the events stream and returns its
// JetStream context and log.
func streamSetup(t *testing.T) (jetstream.JetStream, *events.Log) {
	t.Helper()
	b := testenv.StartBrokerWith(t, broker.Config{})
	nc := testenv.Connect(t, b.ClientURL())
	js := testenv.JetStream(t, nc)
	if _, err := events.EnsureStream(testenv.Context(t, 10*time.Second), js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	return js, events.NewLog(js, "", "")
}

// revisions returns every session key's KV revision.
func revisions(t *testing.T, js jetstream.JetStream) map[string]uint64 {
	t.Helper()
	ctx := testenv.Context(t, 10*time.Second)
	kv, err := js.KeyValue(ctx, projector.SessionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	out := map[string]uint64{}
	for e := range w.Updates() {
		if e == nil {
			return out
		}
		out[e.Key()] = e.Revision()
	}
	return out
}

func checkClean(t *testing.T, js jetstream.JetStream, sessions int) {
	t.Helper()
	recs := records(t, js)
	if len(recs) != sessions {
		t.Fatalf("%d session records, want %d", len(recs), sessions)
	}
	for k, r := range recs {
		if r.Applied != r.LastSeq || r.ProblemCount != 0 || r.Status != projection.StatusRunning && r.Status != projection.StatusStopped {
			t.Fatalf("%s: applied %d of %d events, %d problems, %s; want each event applied once", k, r.Applied, r.LastSeq, r.ProblemCount, r.Status)
		}
	}
}

// TestRestartResumesFromCheckpoint: a projector that stopped resumes after
// its checkpoint and takes in only what came after.
func TestRestartResumesFromCheckpoint(t *testing.T) {
	js, log := streamSetup(t)
	ws := make([]*writer, 4)
	for i := range ws {
		ws[i] = newWriter(t, log, "t", fmt.Sprintf("s%d", i)).op("create", true).op("exec", true)
	}
	p := start(t, js, projector.Config{})
	caughtUp(t, p)
	closeP(t, p)
	first := p.Stats()
	if first.Taken != 16 || first.Checkpoint != 16 {
		t.Fatalf("first run %+v, want 16 taken and checkpoint 16", first)
	}
	ctx := testenv.Context(t, 10*time.Second)
	b, err := projector.EnsureBuckets(ctx, js, projector.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if cp, err := projector.ReadCheckpoint(ctx, b.State, projector.DefaultName); err != nil || cp.StreamSeq != 16 {
		t.Fatalf("stored checkpoint = %+v, %v; want 16", cp, err)
	}

	for _, w := range ws {
		w.op("exec", false).op("stop", true)
	}
	p2 := start(t, js, projector.Config{})
	caughtUp(t, p2)
	if s := p2.Stats(); s.Taken != 16 || s.Skipped != 0 {
		t.Fatalf("second run %+v, want exactly the 16 new events taken, none skipped", s)
	}
	checkClean(t, js, 4)
	verify(t, js, log)
}

// TestRedeliveryAppliesNothingTwice: when every event comes again (as after
// a kill -9 before any checkpoint or acknowledgement was saved), nothing
// is applied twice and no record is even rewritten.
func TestRedeliveryAppliesNothingTwice(t *testing.T) {
	js, log := streamSetup(t)
	for i := 0; i < 5; i++ {
		newWriter(t, log, "t", fmt.Sprintf("s%d", i)).op("create", true).op("exec", true).op("stop", true)
	}
	p := start(t, js, projector.Config{})
	caughtUp(t, p)
	closeP(t, p)
	before := revisions(t, js)

	// Forget the checkpoint: the next projector starts over at seq 1.
	ctx := testenv.Context(t, 10*time.Second)
	b, err := projector.EnsureBuckets(ctx, js, projector.Config{})
	if err != nil {
		t.Fatal(err)
	}
	zero, _ := json.Marshal(projector.Checkpoint{})
	if _, err := b.State.Put(ctx, projector.CheckpointKey(projector.DefaultName), zero); err != nil {
		t.Fatal(err)
	}
	p2 := start(t, js, projector.Config{})
	caughtUp(t, p2)
	if s := p2.Stats(); s.Taken != 0 || s.Skipped != 30 {
		t.Fatalf("redelivery run %+v, want all 30 events skipped and none taken", s)
	}
	if after := revisions(t, js); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("revisions changed on redelivery: %v, was %v", after, before)
	}
	checkClean(t, js, 5)
	verify(t, js, log)
}

// TestProjectorsAgree: two projectors (two engines) write the same buckets
// while events arrive; compare-and-set keeps each event applied once.
func TestProjectorsAgree(t *testing.T) {
	js, log := streamSetup(t)
	a := start(t, js, projector.Config{Name: "engine-a", Batch: 4})
	b := start(t, js, projector.Config{Name: "engine-b", Batch: 7})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := newWriter(t, log, "t", fmt.Sprintf("s%d", i)).op("create", true)
			for j := 0; j < 10; j++ {
				w.op("exec", j%3 != 0)
			}
		}()
	}
	wg.Wait()
	caughtUp(t, a)
	caughtUp(t, b)
	sa, sb := a.Stats(), b.Stats()
	if sa.Problems+sb.Problems != 0 || sa.Taken+sb.Taken+sa.Skipped+sb.Skipped != 2*88 {
		t.Fatalf("stats %+v and %+v: want no problems and every event handled by both", sa, sb)
	}
	checkClean(t, js, 4)
	verify(t, js, log)
}

// TestBadEventsAreRecorded: undecodable events, seq gaps, orphan finishes,
// impossible transitions and stray subjects are recorded in their records
// and counted, acknowledged (not redelivered), and projection of other
// sessions goes on; replay reports the same.
func TestBadEventsAreRecorded(t *testing.T) {
	js, log := streamSetup(t)
	p := start(t, js, projector.Config{})
	ctx := testenv.Context(t, 20*time.Second)
	good := newWriter(t, log, "t", "good").op("create", true)

	// Undecodable bytes on a session's subject.
	raw := func(subject, data string) {
		t.Helper()
		if _, err := js.Publish(ctx, subject, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	var subj events.Subjects
	newWriter(t, log, "t", "garbled").op("create", true)
	raw(subj.Session("t", "garbled", "exec", "start"), `{"tenant":"t",`)
	// A seq gap: seq 3 skipped.
	gap := newWriter(t, log, "t", "gap").op("create", true)
	gap.seq++
	gap.op("exec", true)
	// An orphan finish.
	orphan := newWriter(t, log, "t", "orphan").op("create", true)
	ok := true
	orphan.event("exec", events.PhaseFinish, "never-started", &ok)
	// An impossible transition: start after shutdown.
	newWriter(t, log, "t", "trans").op("create", true).op("shutdown", true).op("start", true)
	// A subject that names no session.
	raw("sbx.evt.nonsense", `{}`)
	// The good session goes on after all that.
	good.op("exec", true).op("stop", true)
	caughtUp(t, p)

	recs := records(t, js)
	for _, tc := range []struct {
		id   string
		kind projection.ProblemKind
	}{
		{"garbled", projection.ProblemUndecodable},
		{"gap", projection.ProblemSeqGap},
		{"orphan", projection.ProblemFinishOrphan},
		{"trans", projection.ProblemBadTransition},
	} {
		r := recs[projection.SessionKey("t", tc.id)]
		if r.ProblemCount == 0 || r.Problems[0].Kind != tc.kind {
			t.Errorf("%s problems = %+v, want %s first", tc.id, r.Problems, tc.kind)
		}
	}
	if g := recs[projection.SessionKey("t", "good")]; g.Status != projection.StatusStopped || g.ProblemCount != 0 || g.Applied != 6 {
		t.Errorf("good = %s, %d problems, %d applied; want stopped, clean, 6", g.Status, g.ProblemCount, g.Applied)
	}
	b, err := projector.EnsureBuckets(ctx, js, projector.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := b.State.Get(ctx, projector.StrayKey)
	if err != nil {
		t.Fatal(err)
	}
	var stray projection.Ledger
	if err := json.Unmarshal(e.Value(), &stray); err != nil || stray.ProblemCount != 1 || stray.Problems[0].Subject != "sbx.evt.nonsense" {
		t.Fatalf("stray = %+v, %v; want the nonsense subject", stray, err)
	}
	// gap: 1 seq gap on its exec finish too (the start's gap left LastSeq behind).
	if s := p.Stats(); s.Problems < 5 {
		t.Fatalf("stats %+v, want at least 5 problems counted", s)
	}
	cons, err := js.Consumer(ctx, events.DefaultStream, projector.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumAckPending != 0 || info.NumRedelivered != 0 || info.AckFloor.Stream != info.Delivered.Stream {
			return fmt.Errorf("consumer: %d ack pending, %d redelivered, ack floor %d of %d", info.NumAckPending, info.NumRedelivered, info.AckFloor.Stream, info.Delivered.Stream)
		}
		return nil
	})
	// Replay finds the same problems, so the projection verifies.
	rep := verify(t, js, log)
	if rep.Compared != 6 {
		t.Fatalf("verify compared %d records, want 6: five sessions and the stray record", rep.Compared)
	}
}

// TestDeliveryGapIsReset: events of the projector's consumer delivered
// elsewhere and never acknowledged (as a pull request a killed server
// took with it) leave a gap in what the projector is delivered; it resets
// its consumer to the first missing event and takes every event in, in
// stream order, instead of skipping the missing ones as already seen.
func TestDeliveryGapIsReset(t *testing.T) {
	js, log := streamSetup(t)
	p := start(t, js, projector.Config{Name: "gaps", Batch: 4})
	w := newWriter(t, log, "t", "s1").op("create", true)
	caughtUp(t, p)
	ctx := testenv.Context(t, time.Minute)
	thief, err := js.Consumer(ctx, events.DefaultStream, "gaps")
	if err != nil {
		t.Fatal(err)
	}
	stolen := 0
	for round := 0; stolen == 0 && round < 50; round++ {
		// A pull request waiting beside the projector's takes some of
		// what comes next.
		got := make(chan int, 1)
		go func() {
			n := 0
			if batch, err := thief.Fetch(3, jetstream.FetchMaxWait(time.Second)); err == nil {
				for range batch.Messages() {
					n++ // never acknowledged
				}
			}
			got <- n
		}()
		for range 20 {
			w.op("exec", true)
		}
		stolen += <-got
	}
	if stolen == 0 {
		t.Fatal("no delivery was taken from the projector's consumer: the test proves nothing")
	}
	w.op("exec", true)
	testenv.Eventually(t, 20*time.Second, func() error {
		r := records(t, js)["t.s1"]
		if r.LastSeq != w.seq || r.Applied != r.LastSeq || r.ProblemCount != 0 {
			return fmt.Errorf("record at seq %d of %d, %d applied, %d problems", r.LastSeq, w.seq, r.Applied, r.ProblemCount)
		}
		return nil
	})
	t.Logf("%d deliveries taken from the projector's consumer", stolen)
	checkClean(t, js, 1)
	verify(t, js, log)
}

// TestRepeatedGapIsNotSkipped: deliveries taken from the projector's
// consumer again and again, by a reader that keeps a pull request waiting
// on its name across the projector's resets, make gaps at the same place
// more than once. Those events are in the stream: the projector must wait
// for them, never skip them (it used to take a second gap at the same
// place for events gone from the stream, and the session's record showed
// seq_gap from there on, as in CI's fault loop).
func TestRepeatedGapIsNotSkipped(t *testing.T) {
	js, log := streamSetup(t)
	p := start(t, js, projector.Config{Name: "gaps", Batch: 4})
	w := newWriter(t, log, "t", "s1").op("create", true)
	caughtUp(t, p)
	ctx := testenv.Context(t, 2*time.Minute)
	thief, err := js.Consumer(ctx, events.DefaultStream, "gaps")
	if err != nil {
		t.Fatal(err)
	}
	// The thief pulls without pause (never acknowledging) until it has
	// taken deliveries in enough rounds.
	var stolen, rounds atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // stopped by stop, waited for below
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if batch, err := thief.Fetch(2, jetstream.FetchMaxWait(200*time.Millisecond)); err == nil {
				n := 0
				for range batch.Messages() {
					n++
				}
				if n > 0 {
					stolen.Add(int64(n))
					rounds.Add(1)
				}
			}
		}
	}()
	for i := 0; rounds.Load() < 4 && i < 400; i++ {
		w.op("exec", true)
	}
	close(stop)
	<-done
	if rounds.Load() < 2 {
		t.Fatalf("deliveries taken in %d rounds: the test proves nothing", rounds.Load())
	}
	w.op("exec", true)
	testenv.Eventually(t, time.Minute, func() error {
		r := records(t, js)["t.s1"]
		if r.LastSeq != w.seq || r.Applied != r.LastSeq || r.ProblemCount != 0 {
			return fmt.Errorf("record at seq %d of %d, %d applied, %d problems", r.LastSeq, w.seq, r.Applied, r.ProblemCount)
		}
		return nil
	})
	t.Logf("%d deliveries taken from the projector's consumer in %d rounds", stolen.Load(), rounds.Load())
	checkClean(t, js, 1)
	verify(t, js, log)
}

// TestGoneEventsAreSkipped: events removed from the stream while no
// projector ran (dropped by its limits, --events-drop-oldest) leave a gap
// in the deliveries that the stream's leader confirms, and the projector
// goes on past it.
func TestGoneEventsAreSkipped(t *testing.T) {
	js, log := streamSetup(t)
	p := start(t, js, projector.Config{Name: "gone"})
	newWriter(t, log, "t", "s1").op("create", true)
	caughtUp(t, p)
	closeP(t, p)
	ctx := testenv.Context(t, time.Minute)
	s, err := js.Stream(ctx, events.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	lastSeq := func() uint64 {
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	newWriter(t, log, "t", "s2").op("create", true).op("exec", true)
	w3 := newWriter(t, log, "t", "s3").op("create", true).op("exec", true)
	// The stream keeps s3's four events only.
	cfg := s.CachedInfo().Config
	cfg.MaxMsgs, cfg.Discard = 4, jetstream.DiscardOld
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	p = start(t, js, projector.Config{Name: "gone"})
	caughtUp(t, p)
	recs := records(t, js)
	if r, ok := recs["t.s3"]; !ok || r.LastSeq != w3.seq || r.ProblemCount != 0 {
		t.Fatalf("s3's record %+v (present %v), want seq %d and no problems", r, ok, w3.seq)
	}
	if _, ok := recs["t.s2"]; ok {
		t.Fatalf("s2, whose events were deleted, has a record: %+v", recs["t.s2"])
	}
	if st := p.Stats(); st.Position != lastSeq() {
		t.Fatalf("projector at %d, want the stream's end %d", st.Position, lastSeq())
	}
}

// TestResumeFromAnotherProjector: a projector with Resume starts after the
// furthest checkpoint of its partition's projectors (one engine's
// projector taking over from another's), taking in only what came after;
// a checkpoint past the stream's end (another stream's) is not followed.
func TestResumeFromAnotherProjector(t *testing.T) {
	js, log := streamSetup(t)
	for i := range 4 {
		newWriter(t, log, "t", fmt.Sprintf("s%d", i)).op("create", true).op("exec", true)
	}
	a := start(t, js, projector.Config{Name: "engine-a"})
	caughtUp(t, a)
	closeP(t, a)
	ctx := testenv.Context(t, 10*time.Second)
	b, err := projector.EnsureBuckets(ctx, js, projector.Config{})
	if err != nil {
		t.Fatal(err)
	}
	far, _ := json.Marshal(projector.Checkpoint{StreamSeq: 1 << 40})
	if _, err := b.State.Put(ctx, projector.CheckpointKey("other-stream"), far); err != nil {
		t.Fatal(err)
	}
	newWriter(t, log, "t", "late").op("create", true)
	c := start(t, js, projector.Config{Name: "engine-b", Resume: true})
	caughtUp(t, c)
	if st := c.Stats(); st.Taken != 2 || st.Skipped != 0 || st.Position != 18 {
		t.Fatalf("resumed projector %+v, want the 2 new events taken from a's checkpoint 16, none skipped, position 18", st)
	}
	checkClean(t, js, 5)
}
