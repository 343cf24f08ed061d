package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/replay"
	"github.com/paddock-dev/paddock/testenv"
)

// appendOps appends n ok exec operations after a create, as a node would.
func appendOps(t *testing.T, log *events.Log, id string, n int) {
	t.Helper()
	var seq, last uint64
	var hash string
	ok := true
	put := func(op string, phase events.Phase, span string) {
		seq++
		ev := &events.Event{Version: events.Version, EventID: uuid.NewString(), TS: time.Now().UTC(), Tenant: "t",
			SessionID: id, Seq: seq, Op: op, Phase: phase, SpanID: span, PrevHash: hash}
		if phase == events.PhaseFinish {
			ev.OK = &ok
		}
		data, _ := json.Marshal(ev)
		s, err := log.AppendRaw(context.Background(), ev, data, last)
		if err != nil {
			t.Fatal(err)
		}
		last, hash = s, events.Hash(data)
	}
	for i := 0; i <= n; i++ {
		op := "exec"
		if i == 0 {
			op = "create"
		}
		span := fmt.Sprint(i)
		put(op, events.PhaseStart, span)
		put(op, events.PhaseFinish, span)
	}
}

// TestRetention: once the stream's limits dropped a session's first
// events, Rebuild says the session is truncated instead of broken; --at
// bounds the fold.
func TestRetention(t *testing.T) {
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, 20*time.Second)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{MaxBytes: 8 << 10, DropOldest: true}); err != nil {
		t.Fatal(err)
	}
	log := events.NewLog(js, "", "")
	appendOps(t, log, "old", 20)  // 42 events: more than 8 KiB, its create goes
	appendOps(t, log, "young", 2) // 6 events, all kept

	res, err := replay.Rebuild(ctx, log, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	old := res.Set.Sessions[projection.SessionKey("t", "old")]
	young := res.Set.Sessions[projection.SessionKey("t", "young")]
	if res.FirstSeq <= 1 || !res.Truncated(old) || res.Truncated(young) || young.Status != projection.StatusRunning {
		t.Fatalf("first seq %d, old truncated %v, young truncated %v %s; want old truncated and young whole", res.FirstSeq, res.Truncated(old), res.Truncated(young), young.Status)
	}
	if res.UpTo != 48 || res.Events != 48-res.FirstSeq+1 {
		t.Fatalf("rebuilt up to %d from %d events, want 48 from %d", res.UpTo, res.Events, 48-res.FirstSeq+1)
	}
	at, err := replay.Rebuild(ctx, log, replay.Options{UpToSeq: 44})
	if err != nil {
		t.Fatal(err)
	}
	if y := at.Set.Sessions[projection.SessionKey("t", "young")]; at.UpTo != 44 || y.LastSeq != 2 {
		t.Fatalf("as of 44: up to %d, young at seq %d; want 44 and seq 2", at.UpTo, y.LastSeq)
	}
}
