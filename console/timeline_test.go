package console_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/console"
	"github.com/paddock-dev/paddock/events"
)

// msg makes a stored message of ev at stream seq.
func msg(t testing.TB, seq uint64, ev events.Event) events.Msg {
	t.Helper()
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return events.Msg{StreamSeq: seq, Data: b, Sig: "sig"}
}

func TestTimeline(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ok, failed, exit := true, false, 3
	dur := 12.5
	ev := func(seq uint64, op string, phase events.Phase, span, data string) events.Event {
		return events.Event{Version: events.Version, TS: ts, Tenant: "t", SessionID: "s", Seq: seq, Op: op, Phase: phase, SpanID: span, Data: json.RawMessage(data)}
	}
	fin := func(e events.Event, okp *bool, code string, exitp *int) events.Event {
		e.OK, e.ErrorCode, e.ExitCode, e.DurationMS = okp, code, exitp, &dur
		return e
	}
	msgs := []events.Msg{
		msg(t, 10, ev(1, "create", events.PhaseStart, "a", `{"runtime":"local","workspace_root":"/w","epoch":1,"parent":{"session_id":"p","seq":4,"snapshot":"snap","root_sha256":"r"}}`)),
		msg(t, 11, ev(2, "exec", events.PhaseStart, "b", `{"argv":["sh","-c","exit 3"],"timeout_ms":1}`)),
		msg(t, 12, fin(ev(3, "create", events.PhaseFinish, "a", `{"status":"running"}`), &ok, "", nil)),
		msg(t, 13, fin(ev(4, "exec", events.PhaseFinish, "b", `{"stdout_bytes":0,"stderr_bytes":0,"changes":{"created":1,"modified":0,"removed":0,"bytes_written":2,"observed":"watch","paths":[{"path":"x","change":"created"}]}}`), &failed, "", &exit)),
		msg(t, 14, ev(5, "egress", events.PhaseStart, "c", `{"method":"CONNECT","host":"evil.example","port":443,"allowed":false,"reason":"no rule"}`)),
		msg(t, 15, fin(ev(6, "egress", events.PhaseFinish, "c", ``), &failed, "policy_denied", nil)),
		msg(t, 16, ev(7, "fork", events.PhaseStart, "d", `{"children":["c1","c2"]}`)),
		msg(t, 17, ev(8, "proc_signal", events.PhaseStart, "e", `{"process_id":42,"signal":"TERM"}`)),
		{StreamSeq: 18, Data: []byte("not json")},
		msg(t, 19, fin(ev(9, "rm", events.PhaseFinish, "orphan", `{"removed":true}`), &ok, "", nil)),
	}
	ops := console.Timeline(msgs)
	if len(ops) != 7 {
		t.Fatalf("%d ops, want 7: %+v", len(ops), ops)
	}
	want := []struct {
		op, outcome, summary, egress string
	}{
		{"create", "ok", "local", ""},
		{"exec", "failed", "sh -c exit 3", ""},
		{"egress", "failed", "CONNECT evil.example:443 refused: no rule", "refused"},
		{"fork", "open", "", ""},
		{"proc_signal", "open", "TERM", ""},
		{"", "undecodable", "", ""},
		{"rm", "ok", "", ""},
	}
	for i, w := range want {
		o := ops[i]
		if o.Op != w.op || o.Outcome() != w.outcome || o.Summary != w.summary || o.Egress != w.egress {
			t.Errorf("op %d: got %q %q %q %q, want %q %q %q %q", i, o.Op, o.Outcome(), o.Summary, o.Egress, w.op, w.outcome, w.summary, w.egress)
		}
	}
	if p := ops[0].Parent; p == nil || p.SessionID != "p" {
		t.Errorf("create's parent %+v, want p", p)
	}
	if e := ops[1]; e.ExitCode == nil || *e.ExitCode != 3 || e.Changes == nil || e.Changes.Created != 1 || e.DurationMS == nil {
		t.Errorf("exec: %+v, want exit 3, one file created, a duration", e)
	}
	if ops[2].ErrorCode != "policy_denied" {
		t.Errorf("egress error code %q, want policy_denied", ops[2].ErrorCode)
	}
	if len(ops[3].Children) != 2 || ops[4].Process != 42 {
		t.Errorf("fork children %v, proc process %d; want 2 and 42", ops[3].Children, ops[4].Process)
	}
}

// FuzzTimeline feeds Timeline stored bytes it cannot trust: it must not
// panic, and must return an op for every start and every unmatched or
// undecodable message.
func FuzzTimeline(f *testing.F) {
	f.Add([]byte(`{"version":2,"op":"exec","phase":"start","span_id":"a","data":{"argv":["x"]}}`), []byte(`{"version":2,"op":"exec","phase":"finish","span_id":"a","data":{"changes":{"paths":[{}]}}}`))
	f.Add([]byte(`{"version":2,"op":"egress","phase":"start","span_id":"a","data":[]}`), []byte(`null`))
	f.Add([]byte(`{"version":2,"op":"fork","phase":"finish","span_id":"b","data":{"children":"x"}}`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ops := console.Timeline([]events.Msg{{StreamSeq: 1, Data: a}, {StreamSeq: 2, Data: b}})
		if len(ops) == 0 || len(ops) > 2 {
			t.Fatalf("%d ops from two messages", len(ops))
		}
		for _, o := range ops {
			_ = o.Outcome()
		}
	})
}
