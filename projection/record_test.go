package projection_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/testenv"
)

var record = flag.Bool("record", false, "record testdata/*.jsonl from a real run (then run with -update)")

// TestRecordFixtures records the event streams the golden tests replay,
// from a real stack driven through the client, and derives the bad
// histories from it by editing the recording. It runs only with -record:
//
//	go test ./projection -run TestRecordFixtures -record && go test ./projection -update
func TestRecordFixtures(t *testing.T) {
	if !*record {
		t.Skip("run with -record to record the fixtures again")
	}
	st := testenv.StartStack(t, testenv.StackOptions{Tenant: "acme"})
	ctx := testenv.Context(t, 60*time.Second)
	c := st.Client
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	create := func(id string, labels map[string]string) {
		t.Helper()
		_, err := c.Create(ctx, commands.CreateArgs{SessionID: id, Runtime: "local", Labels: labels, Env: map[string]string{"NAME": "paddock"}})
		must(err)
	}
	// s-running: ops that succeed and ops that fail, left running.
	create("s-running", map[string]string{"team": "a"})
	_, err := c.Exec(ctx, "s-running", commands.ExecArgs{Argv: []string{"sh", "-c", "echo hi"}})
	must(err)
	_, err = c.Exec(ctx, "s-running", commands.ExecArgs{Argv: []string{"sh", "-c", "exit 3"}})
	must(err)
	if _, err := c.Exec(ctx, "s-running", commands.ExecArgs{Argv: []string{"sleep", "5"}, TimeoutMS: 100}); err == nil {
		t.Fatal("exec past its timeout succeeded")
	}
	_, err = c.WriteFile(ctx, "s-running", "src/main.py", []byte("print('hi')\n"), 0)
	must(err)
	if _, err := c.ReadFile(ctx, "s-running", "missing.txt"); err == nil {
		t.Fatal("read of a missing file succeeded")
	}
	_, err = c.List(ctx, "s-running", "")
	must(err)
	_, err = c.Running(ctx, "s-running")
	must(err)
	// s-stopped: stop, start, stop; an exec while stopped fails.
	create("s-stopped", map[string]string{"team": "b"})
	must(c.Stop(ctx, "s-stopped"))
	if _, err := c.Exec(ctx, "s-stopped", commands.ExecArgs{Argv: []string{"true"}}); err == nil {
		t.Fatal("exec on a stopped session succeeded")
	}
	must(c.Start(ctx, "s-stopped"))
	must(c.Stop(ctx, "s-stopped"))
	// s-shutdown and s-deleted.
	create("s-shutdown", nil)
	must(c.Shutdown(ctx, "s-shutdown"))
	create("s-deleted", nil)
	must(c.Shutdown(ctx, "s-deleted"))
	must(c.Delete(ctx, "s-deleted"))
	// s-resumed: persisted, shut down, then resumed into a new sandbox at
	// epoch 2 from its snapshot.
	create("s-resumed", nil)
	_, err = c.WriteFile(ctx, "s-resumed", "notes.txt", []byte("kept\n"), 0)
	must(err)
	_, err = c.Persist(ctx, "s-resumed")
	must(err)
	must(c.Shutdown(ctx, "s-resumed"))
	_, err = c.Resume(ctx, "s-resumed", nil)
	must(err)
	// s-failed: the local runtime cannot switch users, so the create fails
	// after its start event.
	if _, err := c.Create(ctx, commands.CreateArgs{SessionID: "s-failed", Runtime: "local", User: "nobody"}); err == nil {
		t.Fatal("create as another user on the local runtime succeeded")
	}
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(st.Agent.Close(cctx)) // records the node's stopped event

	var lines [][]byte
	must(st.Log.Read(ctx, events.ReadOptions{Filters: []string{"sbx.>"}}, func(m events.Msg) error {
		lines = append(lines, append([]byte(nil), m.Data...))
		return nil
	}))
	write := func(name string, ls [][]byte) {
		t.Helper()
		must(os.WriteFile(filepath.Join("testdata", name), append(bytes.Join(ls, []byte("\n")), '\n'), 0o644))
	}
	write("lifecycle.jsonl", lines)

	// The bad histories, each an edit of the recording.
	idx := func(session string, seq uint64) int {
		t.Helper()
		for i, l := range lines {
			var ev events.Event
			if json.Unmarshal(l, &ev) == nil && ev.SessionID == session && ev.Seq == seq {
				return i
			}
		}
		t.Fatalf("no event %s seq %d", session, seq)
		return -1
	}
	last := func(session string) (events.Event, []byte) {
		t.Helper()
		var out events.Event
		var raw []byte
		for _, l := range lines {
			var ev events.Event
			if json.Unmarshal(l, &ev) == nil && ev.SessionID == session {
				out, raw = ev, l
			}
		}
		return out, raw
	}
	forge := func(prev []byte, ev events.Event) []byte {
		t.Helper()
		ev.EventID = fmt.Sprintf("forged-%s-%d", ev.SessionID, ev.Seq)
		ev.PrevHash = events.Hash(prev)
		b, err := json.Marshal(ev)
		must(err)
		return b
	}
	without := func(i int) [][]byte {
		return append(append([][]byte{}, lines[:i]...), lines[i+1:]...)
	}
	with := func(extra ...[]byte) [][]byte {
		return append(append([][]byte{}, lines...), extra...)
	}
	ok := true

	// A seq gap: s-running's second-to-last event is gone.
	lr, _ := last("s-running")
	write("bad_seq_gap.jsonl", without(idx("s-running", lr.Seq-1)))

	// An orphan finish: a finish for a span that never started.
	orphan := lr
	orphan.Seq, orphan.Op, orphan.Phase, orphan.SpanID, orphan.OK = lr.Seq+1, "exec", events.PhaseFinish, "never-started", &ok
	_, raw := last("s-running")
	write("bad_orphan_finish.jsonl", with(forge(raw, orphan)))

	// An impossible transition: start after shutdown.
	ls, raw := last("s-shutdown")
	start := ls
	start.Seq, start.Op, start.Phase, start.SpanID, start.OK, start.Data = ls.Seq+1, "start", events.PhaseStart, "forged-span", nil, nil
	startRaw := forge(raw, start)
	fin := start
	fin.Seq, fin.Phase, fin.OK = start.Seq+1, events.PhaseFinish, &ok
	write("bad_transition.jsonl", with(startRaw, forge(startRaw, fin)))

	// An undecodable line in the middle.
	mid := len(lines) / 2
	bad := append(append(append([][]byte{}, lines[:mid]...), []byte(`{"version":1,"tenant":"acme","session_id":`)), lines[mid:]...)
	write("bad_undecodable.jsonl", bad)
}
