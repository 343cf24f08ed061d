package events_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nkeys"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/testenv"
)

// chainEnv is an events stream on an embedded broker, an unsigned log on
// it and a log signed with the chain writer's key.
type chainEnv struct {
	ctx      context.Context
	unsigned *events.Log
	signed   *events.Log
}

func newChainEnv(t *testing.T) chainEnv {
	t.Helper()
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	log := events.NewLog(js, "", "")
	return chainEnv{ctx: ctx, unsigned: log, signed: signedBy(t, log)}
}

// signedBy returns log signed with a new key.
func signedBy(t *testing.T, log *events.Log) *events.Log {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	l, err := log.Signed(kp)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// op returns a start or finish of an exec, as a caller hands it to a chain.
func op(phase events.Phase) *events.Event {
	return &events.Event{Op: "exec", Phase: phase, SpanID: "a1b2c3d4e5f60718"}
}

// stored reads the session's events as stored, with their stream metadata.
func stored(t *testing.T, ctx context.Context, log *events.Log, session string) []events.Msg {
	t.Helper()
	var out []events.Msg
	err := log.Read(ctx, events.ReadOptions{Filters: []string{log.Subjects().SessionFilter("t", session)}}, func(m events.Msg) error {
		out = append(out, m)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkChain fails t unless msgs are one hash chain with seq 1, 2, ...
func checkChain(t *testing.T, msgs []events.Msg) []events.Event {
	t.Helper()
	var evs []events.Event
	prev := ""
	for i, m := range msgs {
		ev, err := m.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Seq != uint64(i+1) || ev.PrevHash != prev {
			t.Fatalf("event %d: seq %d prev_hash %q, want seq %d prev_hash %q", i, ev.Seq, ev.PrevHash, i+1, prev)
		}
		prev = events.Hash(m.Data)
		evs = append(evs, ev)
	}
	return evs
}

// TestChainAppends: three appends make one chain, each event signed by
// the writer's key and stamped with its identity, and the chain's
// position is the session's tail.
func TestChainAppends(t *testing.T) {
	e := newChainEnv(t)
	prepared := 0
	c := events.NewChain(e.signed, "t", "s1", "n1", events.Position{}, events.ChainConfig{
		Prepare: func(ev *events.Event) { prepared++; ev.Actor = "redacted" },
	})
	for _, ph := range []events.Phase{events.PhaseStart, events.PhaseFinish, events.PhaseStart} {
		if err := c.Append(e.ctx, op(ph)); err != nil {
			t.Fatalf("append %s: %v", ph, err)
		}
	}
	msgs := stored(t, e.ctx, e.unsigned, "s1")
	evs := checkChain(t, msgs)
	if len(evs) != 3 || prepared != 3 {
		t.Fatalf("got %d events, %d prepared; want 3 and 3", len(evs), prepared)
	}
	for i, ev := range evs {
		if ev.Node != "n1" || ev.Tenant != "t" || ev.SessionID != "s1" || ev.Version != events.Version || ev.EventID == "" || ev.TS.IsZero() || ev.Actor != "redacted" {
			t.Errorf("event %d: %+v, want stamped with the chain's identity and prepared", i, ev)
		}
		if msgs[i].Signer != e.signed.SigningKey() || msgs[i].VerifySignature() != nil {
			t.Errorf("event %d: signer %q, want the writer's key %q, verified", i, msgs[i].Signer, e.signed.SigningKey())
		}
	}
	tail, err := e.unsigned.Last(e.ctx, "t", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Position(), tail.Position(); got != want || got.Seq != 3 {
		t.Fatalf("chain at %+v, want the tail %+v (seq 3)", got, want)
	}
}

// TestChainTakenOver: a signed event of another writer after the chain's
// last one fences the chain out: its append fails with *TakenOverError,
// a concurrency conflict naming that writer, nothing is appended, and the
// chain stays where it was.
func TestChainTakenOver(t *testing.T) {
	e := newChainEnv(t)
	c := events.NewChain(e.signed, "t", "s1", "n1", events.Position{}, events.ChainConfig{})
	if err := c.Append(e.ctx, op(events.PhaseStart)); err != nil {
		t.Fatal(err)
	}
	before := c.Position()
	other := events.NewChain(signedBy(t, e.unsigned), "t", "s1", "engine-a", before, events.ChainConfig{})
	if err := other.Append(e.ctx, &events.Event{Op: "node_lost", Phase: events.PhaseStart, SpanID: "0f0f0f0f0f0f0f0f"}); err != nil {
		t.Fatal(err)
	}

	err := c.Append(e.ctx, op(events.PhaseFinish))
	var taken *events.TakenOverError
	if !errors.As(err, &taken) {
		t.Fatalf("append after another writer's event: %v, want *TakenOverError", err)
	}
	if got := errcode.Of(err); got != errcode.ConcurrencyConflict {
		t.Errorf("code %s, want %s", got, errcode.ConcurrencyConflict)
	}
	if taken.Tail.Event.Node != "engine-a" || taken.Tail.Event.Op != "node_lost" {
		t.Errorf("taken over by %s (%s), want engine-a (node_lost)", taken.Tail.Event.Node, taken.Tail.Event.Op)
	}
	if got := c.Position(); got != before {
		t.Errorf("chain at %+v after the refusal, want %+v", got, before)
	}
	if n := len(checkChain(t, stored(t, e.ctx, e.unsigned, "s1"))); n != 2 {
		t.Fatalf("%d events stored, want 2", n)
	}
}

// TestChainPastForged: an unsigned event, and one that claims the writer
// but is signed by another key, are forged: the chain appends after them
// (logging each) and the session goes on.
func TestChainPastForged(t *testing.T) {
	e := newChainEnv(t)
	var logs testenv.SyncBuffer
	c := events.NewChain(e.signed, "t", "s1", "n1", events.Position{}, events.ChainConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err := c.Append(e.ctx, op(events.PhaseStart)); err != nil {
		t.Fatal(err)
	}
	forge := func(log *events.Log) {
		t.Helper()
		tail, err := e.unsigned.Last(e.ctx, "t", "s1")
		if err != nil {
			t.Fatal(err)
		}
		ev := &events.Event{Version: events.Version, EventID: uuid.NewString(), TS: time.Now().UTC(), Tenant: "t", SessionID: "s1",
			Seq: tail.Event.Seq + 1, Op: "delete", Phase: events.PhaseStart, SpanID: "f0f0f0f0f0f0f0f0", Node: "n1", PrevHash: tail.Hash}
		if _, err := log.Append(e.ctx, ev, tail.StreamSeq); err != nil {
			t.Fatal(err)
		}
	}
	forge(e.unsigned)
	if err := c.Append(e.ctx, op(events.PhaseFinish)); err != nil {
		t.Fatalf("append after an unsigned event: %v", err)
	}
	forge(signedBy(t, e.unsigned))
	if err := c.Append(e.ctx, op(events.PhaseStart)); err != nil {
		t.Fatalf("append after an event signed by a stranger: %v", err)
	}
	evs := checkChain(t, stored(t, e.ctx, e.unsigned, "s1"))
	if len(evs) != 5 || evs[1].Op != "delete" || evs[3].Op != "delete" || evs[4].Op != "exec" {
		t.Fatalf("history %v, want exec, forged, exec, forged, exec", evs)
	}
	if n := strings.Count(logs.String(), "chaining past it"); n != 2 {
		t.Errorf("logged %d forged events, want 2:\n%s", n, logs.String())
	}
	if got := c.Seq(); got != 5 {
		t.Errorf("chain at seq %d, want 5", got)
	}
}

// TestChainLostAck: an event that landed although its append's ack was
// lost (here: appended first by hand, as the chain would have sent it) is
// recognised as this very event when the chain appends it: no error, no
// second copy, and the chain goes on after it.
func TestChainLostAck(t *testing.T) {
	e := newChainEnv(t)
	c := events.NewChain(e.signed, "t", "s1", "n1", events.Position{}, events.ChainConfig{})
	if err := c.Append(e.ctx, op(events.PhaseStart)); err != nil {
		t.Fatal(err)
	}
	at := c.Position()
	ev := op(events.PhaseFinish)
	ev.Version, ev.EventID, ev.TS, ev.Tenant, ev.SessionID, ev.Node = events.Version, uuid.NewString(), time.Now().UTC(), "t", "s1", "n1"
	landed := *ev
	landed.Seq, landed.PrevHash = at.Seq+1, at.Hash
	if _, err := e.signed.Append(e.ctx, &landed, at.StreamSeq); err != nil {
		t.Fatal(err)
	}

	if err := c.Append(e.ctx, ev); err != nil {
		t.Fatalf("append of an event that landed: %v", err)
	}
	tail, err := e.unsigned.Last(e.ctx, "t", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Position(); got != tail.Position() || tail.Event.EventID != ev.EventID {
		t.Fatalf("chain at %+v, tail %+v (event %s), want the landed event %s", got, tail.Position(), tail.Event.EventID, ev.EventID)
	}
	if err := c.Append(e.ctx, op(events.PhaseStart)); err != nil {
		t.Fatal(err)
	}
	if n := len(checkChain(t, stored(t, e.ctx, e.unsigned, "s1"))); n != 3 {
		t.Fatalf("%d events stored, want 3", n)
	}
}

// TestChainTakesUpUnconfirmed: an event of the writer's own that it
// counted as not appended (a start whose outcome stayed unknown) is taken
// into the chain and closed with a failed finish, since it never ran;
// the new event follows.
func TestChainTakesUpUnconfirmed(t *testing.T) {
	e := newChainEnv(t)
	c := events.NewChain(e.signed, "t", "s1", "n1", events.Position{}, events.ChainConfig{})
	if err := c.Append(e.ctx, op(events.PhaseStart)); err != nil {
		t.Fatal(err)
	}
	if err := c.Append(e.ctx, op(events.PhaseFinish)); err != nil {
		t.Fatal(err)
	}
	// Another chain of the same writer and key, from the same place: its
	// start lands behind c's back.
	lost := events.NewChain(e.signed, "t", "s1", "n1", c.Position(), events.ChainConfig{})
	start := &events.Event{Op: "write_file", Phase: events.PhaseStart, SpanID: "1111111111111111", CommandID: "cmd-1"}
	if err := lost.Append(e.ctx, start); err != nil {
		t.Fatal(err)
	}

	if err := c.Append(e.ctx, op(events.PhaseStart)); err != nil {
		t.Fatalf("append after an unconfirmed start: %v", err)
	}
	evs := checkChain(t, stored(t, e.ctx, e.unsigned, "s1"))
	if len(evs) != 5 {
		t.Fatalf("%d events stored, want 5", len(evs))
	}
	fin := evs[3]
	if fin.Op != "write_file" || fin.Phase != events.PhaseFinish || fin.SpanID != start.SpanID || fin.CommandID != "cmd-1" ||
		fin.OK == nil || *fin.OK || fin.ErrorCode != string(errcode.Unavailable) || fin.Node != "n1" {
		t.Errorf("event 4: %+v, want the unconfirmed start's failed finish", fin)
	}
	if evs[4].Op != "exec" || evs[4].Phase != events.PhaseStart {
		t.Errorf("event 5: %s %s, want the new exec start", evs[4].Op, evs[4].Phase)
	}
}
