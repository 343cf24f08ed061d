package events_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/testenv"
)

func newEvent(session string, seq uint64, phase events.Phase) *events.Event {
	return &events.Event{
		Version: events.Version, EventID: uuid.NewString(), TS: time.Now().UTC(),
		Tenant: "t", SessionID: session, Seq: seq, Op: "exec", Phase: phase, SpanID: "s",
	}
}

// TestSecondWriterRefused: a writer appending with a stale expected
// sequence is refused with concurrency_conflict, and the log is unchanged.
func TestSecondWriterRefused(t *testing.T) {
	b := testenv.StartBroker(t)
	nc := testenv.Connect(t, b.ClientURL())
	js := testenv.JetStream(t, nc)
	ctx := testenv.Context(t, 20*time.Second)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	log := events.NewLog(js, "", "")

	first, err := log.Append(ctx, newEvent("s1", 1, events.PhaseStart), 0)
	if err != nil {
		t.Fatalf("first append: %v", err)
	}
	// Another session's events do not disturb s1's guard.
	if _, err := log.Append(ctx, newEvent("s2", 1, events.PhaseStart), 0); err != nil {
		t.Fatalf("other session: %v", err)
	}
	// Writer A appends seq 2 against the true last sequence.
	if _, err := log.Append(ctx, newEvent("s1", 2, events.PhaseFinish), first); err != nil {
		t.Fatalf("writer A: %v", err)
	}
	// Writer B still believes the last sequence is `first`: refused.
	_, err = log.Append(ctx, newEvent("s1", 2, events.PhaseFinish), first)
	if !errors.Is(err, errcode.ErrConcurrencyConflict) {
		t.Fatalf("stale writer: got %v, want concurrency_conflict", err)
	}
	// A writer that thinks the session is new is refused too.
	if _, err := log.Append(ctx, newEvent("s1", 1, events.PhaseStart), 0); !errors.Is(err, errcode.ErrConcurrencyConflict) {
		t.Fatalf("second creator: got %v, want concurrency_conflict", err)
	}
	evs, err := log.Session(ctx, "t", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Seq != 1 || evs[1].Seq != 2 {
		t.Fatalf("s1 has %d events, want seq 1 and 2 only", len(evs))
	}
}

// TestDuplicateEventID: re-publishing an event id is deduplicated.
func TestDuplicateEventID(t *testing.T) {
	b := testenv.StartBroker(t)
	nc := testenv.Connect(t, b.ClientURL())
	js := testenv.JetStream(t, nc)
	ctx := testenv.Context(t, 20*time.Second)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	log := events.NewLog(js, "", "")
	ev := newEvent("s1", 1, events.PhaseStart)
	seq1, err := log.Append(ctx, ev, 0)
	if err != nil {
		t.Fatal(err)
	}
	seq2, err := log.Append(ctx, ev, seq1)
	if err != nil || seq2 != seq1 {
		t.Fatalf("duplicate append = %d, %v; want the original seq %d", seq2, err, seq1)
	}
	evs, err := log.Session(ctx, "t", "s1")
	if err != nil || len(evs) != 1 {
		t.Fatalf("got %d events, %v; want 1", len(evs), err)
	}
	tail, err := log.Last(ctx, "t", "s1")
	last, lastSeq := tail.Event, tail.StreamSeq
	if err != nil || last == nil || lastSeq != seq1 {
		t.Fatalf("last = %v @%d, %v; want the event at %d", last, lastSeq, err, seq1)
	}
	if none, err := log.Last(ctx, "t", "nobody"); err != nil || none.Event != nil {
		t.Fatalf("last of empty session = %v, %v; want nil, nil", none, err)
	}
}

// TestStreamDeniesDeleteAndPurge: the audit log cannot be edited through
// the stream API, and EnsureStream is idempotent.
func TestStreamDeniesDeleteAndPurge(t *testing.T) {
	b := testenv.StartBroker(t)
	nc := testenv.Connect(t, b.ClientURL())
	js := testenv.JetStream(t, nc)
	ctx := testenv.Context(t, 20*time.Second)
	s, err := events.EnsureStream(ctx, js, events.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatalf("second ensure: %v", err)
	}
	seq, err := events.NewLog(js, "", "").Append(ctx, newEvent("s1", 1, events.PhaseStart), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMsg(ctx, seq); err == nil {
		t.Fatal("delete of an event succeeded, want refused")
	}
	if err := s.Purge(ctx); err == nil {
		t.Fatal("purge succeeded, want refused")
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Replicas: 9}); err == nil {
		t.Fatal("replicas 9 accepted, want a config error")
	}
}

// TestReadLeavesNoConsumer: a read, of what is there or until an error,
// leaves no consumer on the server, so a caller reading in a loop cannot
// fill the stream's consumer limit.
func TestReadLeavesNoConsumer(t *testing.T) {
	b := testenv.StartBroker(t)
	nc := testenv.Connect(t, b.ClientURL())
	js := testenv.JetStream(t, nc)
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	log := events.NewLog(js, "", "")
	if _, err := log.Append(ctx, newEvent("s1", 1, events.PhaseStart), 0); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stop")
	for i := range 20 {
		if _, err := log.Session(ctx, "t", "s1"); err != nil {
			t.Fatal(err)
		}
		// A reader that stops at its first event.
		if err := log.Read(ctx, events.ReadOptions{}, func(events.Msg) error { return stop }); !errors.Is(err, stop) {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	st, err := js.Stream(ctx, events.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers != 0 {
		t.Fatalf("%d consumers left after 40 reads, want 0", info.State.Consumers)
	}
}
