package events_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/testenv"
)

// TestCopyRepartitions: a one-stream log's history copied onto 4
// partitions keeps every session's events in order with their bytes and
// signatures (each chain checks, each signature verifies), puts each
// session in the partition PartitionOf names, node events in partition 0,
// and appends go on after it under the guard; a second copy into the
// now-filled streams is refused (invalid_state).
func TestCopyRepartitions(t *testing.T) {
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, 60*time.Second)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Name: "PRE_EVENTS", Prefix: "pre"}); err != nil {
		t.Fatal(err)
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	from := signedBy(t, events.NewLog(js, "PRE_EVENTS", "pre"))
	const sessions = 16
	for i := range sessions {
		c := events.NewChain(from, "acme", fmt.Sprintf("s%02d", i), "n1", events.Position{}, events.ChainConfig{})
		for _, ph := range []events.Phase{events.PhaseStart, events.PhaseFinish, events.PhaseStart} {
			if err := c.Append(ctx, op(ph)); err != nil {
				t.Fatal(err)
			}
		}
		if i%4 == 0 {
			if err := from.AppendNode(ctx, &events.NodeEvent{Version: events.Version, EventID: uuid.NewString(), TS: time.Now().UTC(), Node: "n1", Kind: "up"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	to := events.NewLog(js, "", "")
	st, err := events.Copy(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if st.Sessions != sessions || st.SessionEvents != 3*sessions || st.NodeEvents != 4 {
		t.Fatalf("copied %+v, want %d sessions, %d session events, 4 node events", st, sessions, 3*sessions)
	}
	used := map[string]bool{}
	for i := range sessions {
		id := fmt.Sprintf("s%02d", i)
		old, moved := storedIn(t, from, "acme", id), storedIn(t, to, "acme", id)
		checkChain(t, moved)
		if len(moved) != len(old) {
			t.Fatalf("%s: %d events copied, want %d", id, len(moved), len(old))
		}
		want := events.PartitionStream("", events.PartitionOf("acme", id, 4))
		for j, m := range moved {
			if !bytes.Equal(m.Data, old[j].Data) || m.Signer != old[j].Signer || m.Sig != old[j].Sig || m.Stream != want {
				t.Fatalf("%s event %d: in %s, bytes or signature changed; want them as stored, in %s", id, j, m.Stream, want)
			}
			if err := m.VerifySignature(); err != nil {
				t.Fatalf("%s event %d: %v", id, j, err)
			}
		}
		used[want] = true
	}
	if len(used) != 4 {
		t.Fatalf("the sessions landed in %d partitions, want all 4", len(used))
	}
	var nodes int
	if err := to.Read(ctx, events.ReadOptions{Filters: []string{to.Subjects().AllNodes()}}, func(m events.Msg) error {
		if m.Stream != events.DefaultStream || m.VerifySignature() != nil {
			return fmt.Errorf("node event in %s (signature %v), want in %s, signed", m.Stream, m.VerifySignature(), events.DefaultStream)
		}
		nodes++
		return nil
	}); err != nil || nodes != 4 {
		t.Fatalf("node events on the new layout: %d, %v; want 4", nodes, err)
	}
	// The chain goes on in the new layout, under the guard.
	moved := storedIn(t, to, "acme", "s03")
	c := events.NewChain(signedBy(t, to), "acme", "s03", "n1", events.Position{Seq: 3, Hash: events.Hash(moved[2].Data), StreamSeq: moved[2].StreamSeq}, events.ChainConfig{})
	if err := c.Append(ctx, op(events.PhaseFinish)); err != nil {
		t.Fatalf("append after the copy: %v", err)
	}
	checkChain(t, storedIn(t, to, "acme", "s03"))
	if _, err := events.Copy(ctx, from, to); errcode.Of(err) != errcode.InvalidState {
		t.Fatalf("a second copy into filled streams: %v, want invalid_state", err)
	}
}

// storedIn reads a session's events from log as stored.
func storedIn(t *testing.T, log *events.Log, tenant, session string) []events.Msg {
	t.Helper()
	var out []events.Msg
	err := log.Read(testenv.Context(t, 10*time.Second), events.ReadOptions{Filters: []string{log.Subjects().SessionFilter(tenant, session)}}, func(m events.Msg) error {
		out = append(out, m)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
