package events_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/testenv"
)

// TestStreamSurvivesServerLoss: the events stream at three replicas on a
// three-server cluster keeps taking guarded appends when the server that
// leads it is killed, takes that server back, and loses no event.
func TestStreamSurvivesServerLoss(t *testing.T) {
	c := testenv.StartCluster(t, 3, broker.Config{})
	nc := testenv.Connect(t, c.URL())
	js := testenv.JetStream(t, nc)
	ctx := testenv.Context(t, 2*time.Minute)
	// A cluster that has just formed may refuse an R3 placement for a
	// moment ("no suitable peers"); the engine retries it too.
	testenv.Eventually(t, time.Minute, func() error {
		_, err := events.EnsureStream(ctx, js, events.StreamConfig{Replicas: 3})
		return err
	})
	log := events.NewLog(js, "", "")
	session := uuid.NewString()
	var last uint64
	appendEv := func(seq uint64, id string) error {
		ev := &events.Event{Version: events.Version, EventID: id, TS: time.Now().UTC(), Tenant: "t", SessionID: session,
			Seq: seq, Op: "exec", Phase: events.PhaseStart, SpanID: fmt.Sprint(seq)}
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		s, err := log.Append(actx, ev, last)
		if err == nil {
			last = s
		}
		return err
	}
	for seq := uint64(1); seq <= 5; seq++ {
		if err := appendEv(seq, uuid.NewString()); err != nil {
			t.Fatal(err)
		}
	}
	info, err := log.StreamInfo(ctx)
	if err != nil || info.Cluster == nil {
		t.Fatalf("stream info %+v, %v", info, err)
	}
	leader := -1
	for i := range 3 {
		if info.Cluster.Leader == fmt.Sprintf("s%d", i+1) {
			leader = i
		}
	}
	if leader < 0 || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("leader %q, replicas %d; want a leader among s1..s3 and two followers", info.Cluster.Leader, len(info.Cluster.Replicas))
	}
	c.Stop(leader)
	id := uuid.NewString() // the same id on every try: a retried append is deduplicated
	testenv.Eventually(t, 60*time.Second, func() error { return appendEv(6, id) })
	c.Restart(leader)
	testenv.Eventually(t, 60*time.Second, func() error {
		info, err := log.StreamInfo(ctx)
		if err != nil {
			return err
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Offline {
				return fmt.Errorf("replica %s not current", r.Name)
			}
		}
		if len(info.Cluster.Replicas) != 2 {
			return fmt.Errorf("%d followers", len(info.Cluster.Replicas))
		}
		return nil
	})
	// A read just after the restart may meet a stream still settling
	// (unavailable, retryable): a reader tries again, as this does.
	var evs []events.Event
	testenv.Eventually(t, 30*time.Second, func() error {
		var err error
		evs, err = log.Session(ctx, "t", session)
		return err
	})
	if len(evs) != 6 {
		t.Fatalf("%d events after the loss, want 6", len(evs))
	}
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
	}
	// The tail as the leader has it, read as an append refused for its
	// expected last sequence reads it: the last append's, read after read
	// (a direct get may be answered by the replica that just restarted).
	testenv.Eventually(t, 30*time.Second, func() error {
		_, err := log.LastFromLeader(ctx, "t", session)
		return err
	})
	for range 20 {
		lt, err := log.LastFromLeader(ctx, "t", session)
		if err != nil || lt.Event == nil || lt.StreamSeq != last || lt.Event.Seq != 6 {
			t.Fatalf("tail from the leader: %+v, %v; want seq 6 at stream seq %d", lt, err, last)
		}
	}
}

// TestSpreadLeaders: four partitions at three replicas whose leaders are
// all on one server end with their leaders on three servers, two at most
// on one (2, 1, 1), after SpreadLeaders, and take guarded appends on every
// partition after it; a second SpreadLeaders moves nothing.
func TestSpreadLeaders(t *testing.T) {
	c := testenv.StartCluster(t, 3, broker.Config{})
	js := testenv.JetStream(t, testenv.Connect(t, c.URL()))
	ctx := testenv.Context(t, 3*time.Minute)
	log := testenv.PartitionedLog(t, js, 4)
	// Gather every leader on s1 (the attack on the spread: the meta
	// layer's placement at its worst), spread them, and check the outcome;
	// again if an election of the loaded machine's own came in between.
	testenv.Eventually(t, 2*time.Minute, func() error {
		testenv.Eventually(t, time.Minute, func() error { return testenv.GatherLeaders(ctx, js, log, "s1") })
		moves, err := log.SpreadLeaders(ctx)
		if err != nil {
			return err
		}
		if len(moves) < 2 {
			return fmt.Errorf("%d moves (%v), want at least 2 from all-on-s1 (4, 0, 0 to 2, 1, 1)", len(moves), moves)
		}
		for _, m := range moves {
			if m.From == m.To || m.To == "" {
				t.Fatalf("move %+v: want a leader that changed", m)
			}
		}
		leaders, err := log.Leaders(ctx)
		if err != nil {
			return err
		}
		count := map[string]int{}
		for _, l := range leaders {
			count[l]++
		}
		if len(count) != 3 || slices.Max(slices.Collect(maps.Values(count))) != 2 {
			return fmt.Errorf("leaders %v after the spread, want them on 3 servers, 2 at most on one", leaders)
		}
		if again, err := log.SpreadLeaders(ctx); err != nil || len(again) != 0 {
			return fmt.Errorf("second spread: moves %v, err %v; want none", again, err)
		}
		return nil
	})
	// Every partition takes guarded appends under its new leader.
	seen := map[string]bool{}
	for i := 0; len(seen) < 4; i++ {
		if i > 200 {
			t.Fatalf("200 sessions reached partitions %v only", seen)
		}
		session := uuid.NewString()
		stream := log.Streams()[events.PartitionOf("t", session, 4)]
		if seen[stream] {
			continue
		}
		ev := &events.Event{Version: events.Version, EventID: uuid.NewString(), TS: time.Now().UTC(), Tenant: "t", SessionID: session,
			Seq: 1, Op: "exec", Phase: events.PhaseStart, SpanID: "1"}
		testenv.Eventually(t, 30*time.Second, func() error {
			_, err := log.Append(ctx, ev, 0)
			return err
		})
		seen[stream] = true
	}
}
