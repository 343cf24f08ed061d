package projector_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
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
