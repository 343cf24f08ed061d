package projection

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/events"
)

func nodeEv(kind string, data string) events.NodeEvent {
	ev := events.NodeEvent{Version: events.Version, Node: "n1", Kind: kind, TS: time.Unix(1, 0).UTC()}
	if data != "" {
		ev.Data = json.RawMessage(data)
	}
	return ev
}

func TestApplyNode(t *testing.T) {
	reg := nodeEv(KindRegistered, `{"runtimes":["local","docker"],"capacity":8,"labels":{"zone":"a"}}`)
	for _, tc := range []struct {
		name  string
		kinds []string
		want  NodeStatus
		err   error
	}{
		{"registered", nil, NodeUp, nil},
		{"draining", []string{KindDraining}, NodeDraining, nil},
		{"stopped", []string{KindDraining, KindStopped}, NodeStopped, nil},
		{"registers again after stopping", []string{KindStopped, KindRegistered}, NodeUp, nil},
		{"lost", []string{KindLost}, NodeLost, nil},
		{"lost after stopped", []string{KindStopped, KindLost}, NodeStopped, ErrBadTransition},
		{"draining after lost", []string{KindLost, KindDraining}, NodeLost, ErrBadTransition},
		{"unknown kind", []string{"exploded"}, NodeUp, ErrBadTransition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := ApplyNode(Node{}, reg)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range tc.kinds {
				ev := nodeEv(k, "")
				if k == KindRegistered {
					ev = reg
				}
				var e error
				if n, e = ApplyNode(n, ev); e != nil {
					err = e
				}
			}
			if !errors.Is(err, tc.err) || n.Status != tc.want {
				t.Fatalf("got %s, %v; want %s, %v", n.Status, err, tc.want, tc.err)
			}
			if n.Capacity != 8 || len(n.Runtimes) != 2 || n.Labels["zone"] != "a" {
				t.Fatalf("node = %+v, want the registration's details", n)
			}
		})
	}
	if _, err := ApplyNode(Node{}, nodeEv(KindStopped, "")); !errors.Is(err, ErrNotRegisteredFirst) {
		t.Fatalf("stopped first: got %v, want ErrNotRegisteredFirst", err)
	}
	n, _ := ApplyNode(Node{}, reg)
	other := reg
	other.Node = "n2"
	if _, err := ApplyNode(n, other); !errors.Is(err, ErrForeignEvent) {
		t.Fatalf("other node's event: got %v, want ErrForeignEvent", err)
	}
}

func msgOf(t *testing.T, streamSeq uint64, ev events.Event) (events.Msg, events.Ref) {
	t.Helper()
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var subj events.Subjects
	m := events.Msg{StreamSeq: streamSeq, Subject: subj.Session(ev.Tenant, ev.SessionID, ev.Op, ev.Phase), Data: b}
	ref, ok := subj.Parse(m.Subject)
	if !ok {
		t.Fatalf("subject %s does not parse", m.Subject)
	}
	return m, ref
}

// TestTakeIsIdempotent: a redelivered event (stream seq at or below the
// record's) changes nothing, so a projector that crashed between writing
// a record and acknowledging the event cannot apply it twice.
func TestTakeIsIdempotent(t *testing.T) {
	h := new(history).op("create", true).op("exec", true)
	var r SessionRecord
	for i, ev := range h.evs {
		m, ref := msgOf(t, uint64(10+i), ev)
		var took bool
		if r, took = r.Take(decoded(m, ref)); !took {
			t.Fatalf("event %d not taken", i)
		}
	}
	before := r
	for i, ev := range h.evs {
		m, ref := msgOf(t, uint64(10+i), ev)
		var took bool
		if r, took = r.Take(decoded(m, ref)); took {
			t.Fatalf("redelivered event %d taken again", i)
		}
	}
	if r.Applied != 4 || r.LastSeq != 4 || r.StreamSeq != 13 || r.ProblemCount != 0 || r.Status != before.Status {
		t.Fatalf("record = %+v, want 4 applied up to stream seq 13 and no problems", r)
	}
}

func TestTakeRecordsProblems(t *testing.T) {
	h := new(history).op("create", true)
	var r SessionRecord
	for i, ev := range h.evs {
		m, ref := msgOf(t, uint64(i+1), ev)
		r, _ = r.Take(decoded(m, ref))
	}
	// The body names another session than the subject.
	ev := h.evs[1]
	ev.Seq = 3
	m, ref := msgOf(t, 3, ev)
	ref.Session = "other"
	r, _ = r.Take(decoded(m, ref))
	// Garbage on the session's subject.
	m, ref = msgOf(t, 4, ev)
	m.Data = []byte("{garbage")
	r, _ = r.Take(decoded(m, ref))
	if r.ProblemCount != 2 || r.Problems[0].Kind != ProblemSubject || r.Problems[1].Kind != ProblemUndecodable || r.Problems[1].StreamSeq != 4 {
		t.Fatalf("problems = %+v, want subject_mismatch then undecodable at stream seq 4", r.Problems)
	}
	if r.LastSeq != 2 || r.Status != StatusRunning || r.StreamSeq != 4 {
		t.Fatalf("record = %+v, want the state before the bad events, taken up to 4", r)
	}
	for i := 0; i < MaxProblems+5; i++ {
		m, ref := msgOf(t, uint64(5+i), ev)
		m.Data = []byte("x")
		r, _ = r.Take(decoded(m, ref))
	}
	if len(r.Problems) != MaxProblems || r.ProblemCount != MaxProblems+7 {
		t.Fatalf("kept %d problems counting %d, want %d counting %d", len(r.Problems), r.ProblemCount, MaxProblems, MaxProblems+7)
	}
}

func TestKeys(t *testing.T) {
	seen := map[string]string{}
	for _, id := range []string{"acme", "3f1c-uuid_x", "a:b", "=YQ", "Ünïcode", "a+b", "a=b", "A"} {
		k := NodeKey(id)
		if prev, dup := seen[k]; dup {
			t.Fatalf("%q and %q share key %q", prev, id, k)
		}
		seen[k] = id
		for _, c := range k {
			if !(c == '-' || c == '_' || c == '=' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
				t.Fatalf("key %q of %q has %q, not valid in a KV key", k, id, c)
			}
		}
	}
	if k := SessionKey("acme", "s-1"); k != "acme.s-1" {
		t.Fatalf("SessionKey = %q, want acme.s-1", k)
	}
}

func FuzzSessionTake(f *testing.F) {
	f.Add([]byte(`{"tenant":"t","session_id":"s","seq":1,"op":"create","phase":"start","span_id":"a"}`))
	f.Add([]byte(`{"tenant":"t","session_id":"s","seq":3,"op":"exec","phase":"finish","span_id":"b","ok":true}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, data []byte) {
		base, _ := Fold(new(history).op("create", true).evs)
		r := SessionRecord{Session: base, Ledger: Ledger{StreamSeq: 2, Applied: 2}}
		var subj events.Subjects
		ref := events.Ref{Tenant: "t", Session: "s", Op: "exec", Phase: events.PhaseFinish}
		m := events.Msg{StreamSeq: 3, Subject: subj.Session("t", "s", "exec", "finish"), Data: data}
		next, took := r.Take(decoded(m, ref))
		if !took || next.StreamSeq != 3 {
			t.Fatalf("a new event was not taken")
		}
		if next.Applied+next.ProblemCount != 3 {
			t.Fatalf("applied %d + problems %d, want 3: every event is applied or recorded", next.Applied, next.ProblemCount)
		}
		if again, took := next.Take(decoded(m, ref)); took || again.StreamSeq != next.StreamSeq || again.Applied != next.Applied {
			t.Fatalf("a redelivered event was taken again")
		}
	})
}

func TestResumeMovesSession(t *testing.T) {
	h := new(history).op("create", true).op("shutdown", true).op("resume", true)
	h.evs[len(h.evs)-1].Data = json.RawMessage(`{"status":"running","node":"n2","epoch":2,"restored":true}`)
	stop := new(history).op("create", true).op("stop", true)
	stop.evs[3].Data = json.RawMessage(`{"status":"stopped","snapshot":{"snapshot_id":"x1","name":"t/s/x1.tar","digest":"ab","size":10}}`)
	s, err := Fold(h.evs)
	if err != nil || s.Status != StatusRunning || s.Node != "n2" || s.Epoch != 2 {
		t.Fatalf("after resume: %s on %s epoch %d, %v; want running on n2 epoch 2", s.Status, s.Node, s.Epoch, err)
	}
	s, err = Fold(stop.evs)
	if err != nil || s.LastSnapshot == nil || s.LastSnapshot.ID != "x1" || s.LastSnapshot.Size != 10 {
		t.Fatalf("after stop: snapshot %+v, %v; want x1 of 10 bytes", s.LastSnapshot, err)
	}
	if _, err := Fold(new(history).op("create", true).op("delete", true).op("resume", true).evs); !errors.Is(err, ErrBadTransition) {
		t.Fatalf("resume after delete: got %v, want ErrBadTransition", err)
	}
}

// decoded is Decode with the subject's reading given.
func decoded(m events.Msg, ref events.Ref) Decoded {
	d := Decode(events.Subjects{}, m)
	d.Ref, d.RefOK = ref, true
	return d
}

// TestTakeSetsAsideUnknownVersions: an event of a schema version this
// code does not know is a problem, not a guess: the state stays as it
// was and the session's later events are seq gaps.
func TestTakeSetsAsideUnknownVersions(t *testing.T) {
	h := new(history).op("create", true).op("exec", true)
	var r SessionRecord
	for i, ev := range h.evs {
		if i == 2 {
			ev.Version = events.Version + 1
		}
		m, ref := msgOf(t, uint64(i+1), ev)
		r, _ = r.Take(decoded(m, ref))
	}
	if r.ProblemCount == 0 || r.Problems[0].Kind != ProblemVersion || r.Problems[0].StreamSeq != 3 {
		t.Fatalf("problems = %+v, want unsupported_version at stream seq 3 first", r.Problems)
	}
	if r.LastSeq != 2 || r.Status != StatusRunning {
		t.Fatalf("record = %+v, want the state before the unknown event", r.Session)
	}
}
