package projector_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/replay"
	"github.com/paddock-dev/paddock/testenv"
)

// TestProjectorPerPartition: on a deployment of 4 partitions one
// projector per partition (PartitionConfig) folds every session into the
// buckets, and the projection equals a replay of all the partitions.
func TestProjectorPerPartition(t *testing.T) {
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, 60*time.Second)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	log := events.NewLog(js, "", "")
	const sessions = 24
	for i := range sessions {
		newWriter(t, log, "acme", fmt.Sprintf("s%02d", i)).op("create", true).op("exec", true)
	}
	ps := make([]*projector.Projector, 4)
	for k := range ps {
		cfg := projector.Config{}.PartitionConfig(4, k)
		if want := events.PartitionStream("", k); cfg.Stream != want {
			t.Fatalf("partition %d's projector on %s, want %s", k, cfg.Stream, want)
		}
		ps[k] = start(t, js, cfg)
	}
	for _, p := range ps {
		caughtUp(t, p)
	}
	recs := records(t, js)
	if len(recs) != sessions {
		t.Fatalf("%d session records, want %d", len(recs), sessions)
	}
	for key, rec := range recs {
		if rec.Status != projection.StatusRunning || rec.ProblemCount != 0 {
			t.Fatalf("record %s: %s with %d problems; want running, none", key, rec.Status, rec.ProblemCount)
		}
	}
	verify(t, js, log)
	for k, p := range ps {
		if st := p.Stats(); st.Problems != 0 || st.Taken == 0 {
			t.Fatalf("partition %d's projector: %+v, want events taken and no problems", k, st)
		}
	}
}

// TestVerifyLivePartitions: records that took in events after the
// rebuild stopped in their own partition are newer, not differences,
// though another partition's stream is longer (the fault loop on three
// partitions once compared each record against the sum of the
// partitions' ends).
func TestVerifyLivePartitions(t *testing.T) {
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, 60*time.Second)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	log := events.NewLog(js, "", "")
	// Sessions in both partitions; partition 0 gets many more events,
	// so its end is far past partition 1's.
	var w0, w1 *writer
	for i := 0; w0 == nil || w1 == nil; i++ {
		id := fmt.Sprintf("s%02d", i)
		w := newWriter(t, log, "acme", id).op("create", true)
		if events.PartitionOf("acme", id, 2) == 0 && w0 == nil {
			w0 = w
		} else if events.PartitionOf("acme", id, 2) == 1 && w1 == nil {
			w1 = w
		}
	}
	for range 20 {
		w0.op("exec", true)
	}
	ps := []*projector.Projector{start(t, js, projector.Config{}.PartitionConfig(2, 0)), start(t, js, projector.Config{}.PartitionConfig(2, 1))}
	for _, p := range ps {
		caughtUp(t, p)
	}
	res, err := replay.Rebuild(ctx, log, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.PartitionUpTo) != 2 || res.PartitionUpTo[0] <= res.PartitionUpTo[1] {
		t.Fatalf("rebuild stopped at %v, want two partitions, the first the longer", res.PartitionUpTo)
	}
	// The system goes on: partition 1's session takes in more events
	// than the rebuild saw, yet fewer than partition 0's end.
	w1.op("exec", true)
	for _, p := range ps {
		caughtUp(t, p)
	}
	bk, err := projector.OpenBuckets(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := replay.Verify(ctx, bk, res)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Differences) > 0 || len(rep.Newer) != 1 {
		t.Fatalf("verify of a live partitioned log: differences %v, newer %v; want none, and partition 1's session newer", rep.Differences, rep.Newer)
	}
}
