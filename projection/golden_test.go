package projection_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/testenv"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json from the replays")

// recorded returns the recorded stream of testdata/lifecycle.jsonl (made
// by the nodes package's TestRecordedHistory -record on a real stack), one
// stored event per line.
func recorded(t *testing.T) [][]byte {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "lifecycle.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, append([]byte(nil), sc.Bytes()...))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// variants are the recorded stream and bad histories made from it, by
// name: what a forger or a broken writer would leave in the stream.
func variants(t *testing.T) map[string][][]byte {
	t.Helper()
	clean := recorded(t)
	find := func(session string, seq uint64) int {
		for i, l := range clean {
			var e events.Event
			if json.Unmarshal(l, &e) == nil && e.SessionID == session && e.Seq == seq {
				return i
			}
		}
		t.Fatalf("the recording has no %s seq %d", session, seq)
		return -1
	}
	last := func(session string) events.Event {
		var out events.Event
		for _, l := range clean {
			var e events.Event
			if json.Unmarshal(l, &e) == nil && e.SessionID == session {
				out = e
			}
		}
		return out
	}
	forge := func(ev events.Event) []byte {
		ev.EventID = "forged-" + ev.SessionID + "-" + itoa(int(ev.Seq))
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	without := func(i int) [][]byte { return append(append([][]byte{}, clean[:i]...), clean[i+1:]...) }
	with := func(i int, l []byte) [][]byte {
		return append(append(append([][]byte{}, clean[:i]...), l), clean[i:]...)
	}
	appended := func(ls ...[]byte) [][]byte { return append(append([][]byte{}, clean...), ls...) }

	running := last("s-running")
	orphan := running
	orphan.Seq++
	orphan.SpanID = "forged-span"
	shut := last("s-shutdown")
	start := shut
	start.Seq, start.Op, start.Phase, start.SpanID, start.OK, start.DurationMS, start.Data = shut.Seq+1, "start", events.PhaseStart, "forged-start", nil, nil, nil
	ok := true
	finish := start
	finish.Seq, finish.Phase, finish.OK = shut.Seq+2, events.PhaseFinish, &ok
	return map[string][][]byte{
		"lifecycle":         clean,
		"bad_seq_gap":       without(find("s-running", running.Seq-1)),
		"bad_orphan_finish": appended(forge(orphan)),
		"bad_transition":    appended(forge(start), forge(finish)),
		"bad_undecodable":   with(find("s-stopped", 4), []byte(`{"version":2,"tenant":"acme","session_id":`)),
	}
}

// replayLines folds a stream (stored events, one per line, as
// `engine events export` writes them) the way replay folds the stream:
// line n is stream seq n, and its subject is the one the event was
// published on. An undecodable line gets the subject of the line before
// it, as a garbled event published on that session's subject would.
func replayLines(lines [][]byte) *projection.Set {
	var subj events.Subjects
	set := projection.NewSet()
	subject := "sbx.evt.none"
	for i, line := range lines {
		n := uint64(i + 1)
		var h struct {
			Tenant    string       `json:"tenant"`
			SessionID string       `json:"session_id"`
			Op        string       `json:"op"`
			Phase     events.Phase `json:"phase"`
			Node      string       `json:"node"`
			Kind      string       `json:"kind"`
		}
		if json.Unmarshal(line, &h) == nil {
			if h.Kind != "" {
				subject = subj.Node(h.Node, h.Kind)
			} else {
				subject = subj.Session(h.Tenant, h.SessionID, h.Op, h.Phase)
			}
		}
		set.Take(projection.Decode(subj, events.Msg{StreamSeq: n, Subject: subject, Data: line}))
	}
	return set
}

// TestGoldenReplays folds the recorded stream and each bad history made
// from it and compares the result with its .golden.json (-update
// rewrites them).
func TestGoldenReplays(t *testing.T) {
	for name, lines := range variants(t) {
		t.Run(name, func(t *testing.T) {
			got, err := json.MarshalIndent(replayLines(lines), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := filepath.Join("testdata", name+".golden.json")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("replay of %s differs from %s (run with -update after checking the diff):\n%s", name, golden, testenv.FirstDiff(string(got), string(want)))
			}
		})
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// TestReplayMeaning checks what the goldens should say, so that -update
// cannot bless a wrong fold: every status of the recorded run, no problem
// in a clean history, and in each bad history exactly the expected
// problem while every other session folds as in the clean one.
func TestReplayMeaning(t *testing.T) {
	vs := variants(t)
	clean := replayLines(vs["lifecycle"])
	want := map[string]projection.Status{
		"s-running": projection.StatusRunning, "s-stopped": projection.StatusStopped,
		"s-shutdown": projection.StatusShutDown, "s-deleted": projection.StatusDeleted, "s-failed": projection.StatusFailed,
		"s-resumed": projection.StatusRunning,
	}
	for id, st := range want {
		r := clean.Sessions[projection.SessionKey("acme", id)]
		if r.Status != st || r.ProblemCount != 0 || r.Applied != r.LastSeq || len(r.InFlight) != 0 {
			t.Errorf("%s = %s, %d problems, applied %d of %d, %d in flight; want %s, clean", id, r.Status, r.ProblemCount, r.Applied, r.LastSeq, len(r.InFlight), st)
		}
	}
	if n := clean.Nodes["node-1"]; n.Status != projection.NodeStopped || len(n.Runtimes) != 1 || n.ProblemCount != 0 {
		t.Errorf("node-1 = %+v, want stopped with its runtime and no problems", n)
	}
	if f := clean.Sessions[projection.SessionKey("acme", "s-failed")]; f.LastError == nil || f.LastError.Code != "invalid_request" {
		t.Errorf("s-failed last error = %+v, want the create's invalid_request", f.LastError)
	}
	if r := clean.Sessions[projection.SessionKey("acme", "s-resumed")]; r.Epoch != 2 || r.LastSnapshot == nil || r.LastSnapshot.SHA256 == "" {
		t.Errorf("s-resumed = epoch %d, snapshot %+v; want epoch 2 and the persisted snapshot", r.Epoch, r.LastSnapshot)
	}
	if r := clean.Sessions[projection.SessionKey("acme", "s-stopped")]; r.LastSnapshot == nil {
		t.Errorf("s-stopped has no snapshot, want the one its stop persisted")
	}
	if r := clean.Sessions[projection.SessionKey("acme", "s-running")]; r.LastError == nil || r.LastError.Code != "not_found" || r.Labels["team"] != "a" || r.Runtime != "local" {
		t.Errorf("s-running = %+v, want the read's not_found as last error, label team=a, runtime local", r)
	}

	for _, tc := range []struct {
		file, session string
		kind          projection.ProblemKind
	}{
		{"bad_seq_gap", "s-running", projection.ProblemSeqGap},
		{"bad_orphan_finish", "s-running", projection.ProblemFinishOrphan},
		{"bad_transition", "s-shutdown", projection.ProblemBadTransition},
		{"bad_undecodable", "s-stopped", projection.ProblemUndecodable},
	} {
		t.Run(tc.file, func(t *testing.T) {
			set := replayLines(vs[tc.file])
			var problems []projection.Problem
			for key, r := range set.Sessions {
				if r.ID == tc.session {
					problems = r.Problems
					continue
				}
				c := clean.Sessions[key]
				// Stream seqs past an inserted line move by one; the state may not.
				c.StreamSeq, r.StreamSeq = 0, 0
				if !reflect.DeepEqual(r, c) {
					t.Errorf("session %s folds to %+v, want %+v as in the clean history", key, r, c)
				}
			}
			if len(problems) != 1 || problems[0].Kind != tc.kind {
				t.Fatalf("problems of %s = %+v, want one %s", tc.session, problems, tc.kind)
			}
			if set.Stray.ProblemCount != 0 {
				t.Errorf("stray problems %+v, want none", set.Stray.Problems)
			}
		})
	}
}
