package projector_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/testenv"
)

// TestReadStatusPartitioned: on a deployment of 4 event partitions each
// projector's lag is read against its own partition's stream, not the
// first one's.
func TestReadStatusPartitioned(t *testing.T) {
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	for subj, n := range map[string]int{"sbx.pevt.0.t.s.exec.start": 10, "sbx.pevt.2.t.s.exec.start": 3} {
		for range n {
			if _, err := js.Publish(ctx, subj, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	bk, err := projector.EnsureBuckets(ctx, js, projector.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for name, seq := range map[string]uint64{"projector_n": 4, "projector_n_p2": 1} {
		cp, _ := json.Marshal(projector.Checkpoint{StreamSeq: seq, UpdatedAt: time.Now().UTC()})
		if _, err := bk.State.Put(ctx, projector.CheckpointKey(name), cp); err != nil {
			t.Fatal(err)
		}
	}
	last, sts, err := projector.ReadStatus(ctx, js, "")
	if err != nil {
		t.Fatal(err)
	}
	if last != 10 || len(sts) != 2 {
		t.Fatalf("last %d, %d projectors; want 10 and 2", last, len(sts))
	}
	want := map[string][2]any{"projector_n": {events.PartitionStream("", 0), uint64(6)}, "projector_n_p2": {events.PartitionStream("", 2), uint64(2)}}
	for _, s := range sts {
		if w := want[s.Name]; s.Stream != w[0] || s.Lag != w[1] {
			t.Errorf("projector %s: stream %s lag %d, want %v lag %v", s.Name, s.Stream, s.Lag, w[0], w[1])
		}
	}
}
