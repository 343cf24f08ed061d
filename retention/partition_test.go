package retention_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/retention"
	"github.com/paddock-dev/paddock/testenv"
)

// TestProjectedSessionsEveryPartition: retention reads no events stream
// but the sessions projection, which the engine's projectors (one per
// partition) fill; on a deployment of 4 partitions the sessions it sees
// are those of every partition, so no snapshot of a session in partition
// 1..3 is judged as of a session that does not exist.
func TestProjectedSessionsEveryPartition(t *testing.T) {
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, time.Minute)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	log, err := events.OpenLog(ctx, js, "", "")
	if err != nil {
		t.Fatal(err)
	}
	const sessions = 16
	parts := map[int]bool{}
	for i := range sessions {
		id := fmt.Sprintf("s%02d", i)
		parts[events.PartitionOf("acme", id, 4)] = true
		var last uint64
		var prev string
		ok := true
		for seq, phase := range []events.Phase{events.PhaseStart, events.PhaseFinish} {
			ev := &events.Event{Version: events.Version, EventID: id + string(phase), TS: time.Now().UTC(), Tenant: "acme", SessionID: id,
				Seq: uint64(seq + 1), Op: "create", Phase: phase, SpanID: "c", Node: "n1", PrevHash: prev}
			if phase == events.PhaseStart {
				ev.Data = json.RawMessage(`{"runtime":"local","epoch":1}`)
			} else {
				ev.OK = &ok
			}
			data, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			if last, err = log.AppendRaw(ctx, ev, data, last); err != nil {
				t.Fatal(err)
			}
			prev = events.Hash(data)
		}
	}
	if len(parts) != 4 {
		t.Fatalf("sessions in %d partitions, want 4", len(parts))
	}
	for k := range 4 {
		p, err := projector.New(js, projector.Config{}.PartitionConfig(4, k), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close(context.Background()) })
	}
	read := retention.ProjectedSessions(js)
	testenv.Eventually(t, 30*time.Second, func() error {
		recs, err := read(ctx)
		if err != nil {
			return err
		}
		seen := map[int]int{}
		for _, r := range recs {
			seen[events.PartitionOf(r.Tenant, r.ID, 4)]++
		}
		if len(recs) != sessions || len(seen) != 4 {
			return fmt.Errorf("retention sees %d sessions in partitions %v, want %d in 4", len(recs), seen, sessions)
		}
		return nil
	})
}
