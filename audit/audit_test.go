package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/paddock-dev/paddock/events"
)

// recorded returns the recorded stream of a real run that the projection's
// golden tests replay (stored bytes, with their real prev_hash chain).
func recorded(t *testing.T) [][]byte {
	t.Helper()
	b, err := os.ReadFile("../projection/testdata/lifecycle.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, append([]byte(nil), sc.Bytes()...))
	}
	return out
}

// check audits lines as stream seqs firstSeq, firstSeq+1, ...
func check(t *testing.T, lines [][]byte, firstSeq uint64) Report {
	t.Helper()
	var subj events.Subjects
	c := NewChecker(subj, firstSeq)
	subject := ""
	for i, l := range lines {
		var h struct {
			Tenant, SessionID, Op, Kind, Node string
			Phase                             events.Phase
		}
		if err := json.Unmarshal(l, &h); err == nil {
			var ev events.Event
			_ = json.Unmarshal(l, &ev)
			if h.Kind != "" {
				subject = subj.Node(h.Node, h.Kind)
			} else {
				subject = subj.Session(ev.Tenant, ev.SessionID, ev.Op, ev.Phase)
			}
		}
		c.Check(events.Msg{StreamSeq: firstSeq + uint64(i), Subject: subject, Data: l})
	}
	return c.Report()
}

func find(t *testing.T, lines [][]byte, session string, seq uint64) int {
	t.Helper()
	for i, l := range lines {
		var ev events.Event
		if json.Unmarshal(l, &ev) == nil && ev.SessionID == session && ev.Seq == seq {
			return i
		}
	}
	t.Fatalf("no event %s seq %d", session, seq)
	return 0
}

// lastSeq returns the seq of a session's last event in lines.
func lastSeq(lines [][]byte, session string) uint64 {
	var seq uint64
	for _, l := range lines {
		var ev events.Event
		if json.Unmarshal(l, &ev) == nil && ev.SessionID == session {
			seq = ev.Seq
		}
	}
	return seq
}

func kinds(r Report, session string, seq uint64) []Kind {
	var out []Kind
	for _, f := range r.Findings {
		if f.Session == session && f.Seq == seq {
			out = append(out, f.Kind)
		}
	}
	return out
}

func TestRecordedRunIsClean(t *testing.T) {
	r := check(t, recorded(t), 1)
	if r.Failed() || len(r.Findings) != 0 || r.Sessions != 7 {
		t.Fatalf("report = %+v, want 7 sessions (a fork child among them) and no findings", r)
	}
}

func TestTampering(t *testing.T) {
	last := lastSeq(recorded(t), "s-running")
	for _, tc := range []struct {
		name    string
		edit    func(t *testing.T, ls [][]byte) [][]byte
		session string
		seq     uint64
		want    []Kind
	}{
		{"altered event", func(t *testing.T, ls [][]byte) [][]byte {
			i := find(t, ls, "s-running", 6)
			ls[i] = bytes.Replace(ls[i], []byte(`"exit_code":3`), []byte(`"exit_code":0`), 1)
			return ls
		}, "s-running", 7, []Kind{BrokenChain}},
		{"removed event", func(t *testing.T, ls [][]byte) [][]byte {
			i := find(t, ls, "s-stopped", 5)
			return append(ls[:i:i], ls[i+1:]...)
		}, "s-stopped", 6, []Kind{BrokenChain, SeqGap, OrphanFinish}},
		{"forged finish", func(t *testing.T, ls [][]byte) [][]byte {
			var ev events.Event
			_ = json.Unmarshal(ls[find(t, ls, "s-running", last)], &ev)
			ev.Seq, ev.EventID, ev.PrevHash, ev.SpanID = last+1, "forged", strings.Repeat("0", 64), "made-up"
			b, _ := json.Marshal(ev)
			return append(ls, b)
		}, "s-running", last + 1, []Kind{BrokenChain, OrphanFinish}},
		{"unknown version", func(t *testing.T, ls [][]byte) [][]byte {
			i := find(t, ls, "s-stopped", 3)
			ls[i] = bytes.Replace(ls[i], []byte(`"version":2`), []byte(`"version":3`), 1)
			return ls
		}, "s-stopped", 3, []Kind{Version}},
		{"modified copy", func(t *testing.T, ls [][]byte) [][]byte {
			c := bytes.Replace(ls[find(t, ls, "s-running", 4)], []byte(`"ok":true`), []byte(`"ok":false`), 1)
			return append(ls, c)
		}, "s-running", 4, []Kind{BrokenChain, SeqGap, OrphanFinish}},
		{"undecodable", func(t *testing.T, ls [][]byte) [][]byte {
			i := find(t, ls, "s-shutdown", 2)
			ls[i] = []byte(`{"tenant":"acme","session_id":"s-shutdown","seq":`)
			return ls
		}, "s-shutdown", 0, []Kind{Undecodable}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := check(t, tc.edit(t, recorded(t)), 1)
			if !r.Failed() {
				t.Fatalf("audit passed, want a failure: %+v", r.Findings)
			}
			got := kinds(r, tc.session, tc.seq)
			if strings.Join(kindStrings(got), ",") != strings.Join(kindStrings(tc.want), ",") {
				t.Fatalf("findings at %s seq %d = %v, want %v (all: %v)", tc.session, tc.seq, got, tc.want, r.Findings)
			}
		})
	}
}

func kindStrings(ks []Kind) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	return out
}

func TestOpenAndTruncatedDoNotFail(t *testing.T) {
	ls := recorded(t)
	last := lastSeq(ls, "s-running")
	i := find(t, ls, "s-running", last) // the last finish of s-running
	open := append(append([][]byte{}, ls[:i]...), ls[i+1:]...)
	r := check(t, open, 1)
	if r.Failed() || len(kinds(r, "s-running", last-1)) != 1 || kinds(r, "s-running", last-1)[0] != Open {
		t.Fatalf("report = %+v, want only s-running seq %d open", r.Findings, last-1)
	}
	// The stream lost its first events to retention: s-running starts at seq 5.
	cut := find(t, ls, "s-running", 5)
	r = check(t, ls[cut:], uint64(cut+1))
	if r.Failed() || len(kinds(r, "s-running", 5)) != 1 || kinds(r, "s-running", 5)[0] != Truncated {
		t.Fatalf("report = %+v, want s-running truncated at seq 5 and no failure", r.Findings)
	}
	// Without retention the same cut is a broken history.
	if r := check(t, ls[cut:], 1); !r.Failed() {
		t.Fatal("a history starting at seq 5 passed on a stream that lost nothing")
	}
}

// FuzzCheck: any bytes on a session's subject are a finding or a clean
// event, never a panic, and the report stays consistent.
func FuzzCheck(f *testing.F) {
	f.Add([]byte(`{"tenant":"t","session_id":"s","seq":1,"op":"create","phase":"start","span_id":"a"}`))
	f.Add([]byte(`{"tenant":"t","session_id":"s","seq":2,"op":"create","phase":"finish","span_id":"a","ok":true,"prev_hash":"x"}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var subj events.Subjects
		c := NewChecker(subj, 1)
		c.Check(events.Msg{StreamSeq: 1, Subject: subj.Session("t", "s", "create", "start"), Data: data})
		c.Check(events.Msg{StreamSeq: 2, Subject: subj.Session("t", "s", "create", "finish"), Data: data})
		r := c.Report()
		if r.Events != 2 || r.Sessions != 1 {
			t.Fatalf("report %+v, want 2 events of 1 session", r)
		}
		for _, f := range r.Findings {
			if f.Session != "s" || f.StreamSeq == 0 {
				t.Fatalf("finding %+v does not name the session and stream seq", f)
			}
		}
	})
}
