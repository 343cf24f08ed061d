package events_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
)

// sdkJSON converts ev and returns the SDK event's JSON as a generic map.
func sdkJSON(t *testing.T, ev events.Event) (map[string]any, bool) {
	t.Helper()
	out, ok := events.ToSDK(ev)
	if !ok {
		return nil, false
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatalf("marshal %+v: %v", out, err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m, true
}

func TestToSDK(t *testing.T) {
	const sid = "0b7d3c7e-8a51-4a6e-9d0c-2f3b1f9d6e11"
	ts := time.Date(2025, 6, 1, 12, 0, 0, 123456789, time.UTC)
	yes, no := true, false
	exit3 := 3
	dur := 12.5
	ev := func(op string, phase events.Phase, mod func(*events.Event)) events.Event {
		e := events.Event{
			Version: events.Version, EventID: "5c0e4b0a-3d3e-4d43-8f0a-6a2b9b1e0c77", TS: ts,
			Tenant: "acme", SessionID: sid, Seq: 7, Op: op, Phase: phase, SpanID: "span-1",
			Node: "n1", Actor: "cli", PrevHash: "ab12",
		}
		if phase == events.PhaseFinish {
			e.OK = &yes
			e.DurationMS = &dur
		}
		if mod != nil {
			mod(&e)
		}
		return e
	}
	for _, tc := range []struct {
		name string
		ev   events.Event
		// want holds top-level fields to check; nil values must be null
		// (present). wantData holds data keys to check.
		want     map[string]any
		wantData map[string]any
		absent   []string // top-level keys that must not appear
		skip     bool
	}{
		{name: "create start", ev: ev("create", events.PhaseStart, func(e *events.Event) {
			e.Data = json.RawMessage(`{"runtime":"local","workspace_root":"/w","epoch":1}`)
		}), want: map[string]any{
			"version": 1.0, "op": "start", "phase": "start", "session_id": sid, "seq": 7.0, "span_id": "span-1",
			"event_id": "5c0e4b0a-3d3e-4d43-8f0a-6a2b9b1e0c77", "ts": "2025-06-01T12:00:00.123456789Z",
			"parent_span_id": nil, "trace_id": nil,
		}, wantData: map[string]any{
			"runtime": "local", "epoch": 1.0, "paddock.tenant": "acme", "paddock.session_id": sid, "paddock.op": "create",
			"paddock.node": "n1", "paddock.actor": "cli", "paddock.prev_hash": "ab12",
		}, absent: []string{"ok", "duration_ms", "error_code", "stdout"}},
		{name: "start", ev: ev("start", events.PhaseFinish, nil), want: map[string]any{"op": "start", "ok": true, "duration_ms": 12.5, "error_code": nil, "error_type": nil, "error_message": nil, "error_retryable": nil, "stdout": nil, "stderr": nil}},
		{name: "resume", ev: ev("resume", events.PhaseStart, nil), want: map[string]any{"op": "start"}, wantData: map[string]any{"paddock.op": "resume"}},
		{name: "stop", ev: ev("stop", events.PhaseStart, nil), want: map[string]any{"op": "stop"}},
		{name: "shutdown", ev: ev("shutdown", events.PhaseStart, nil), want: map[string]any{"op": "shutdown"}},
		{name: "delete", ev: ev("delete", events.PhaseFinish, nil), want: map[string]any{"op": "shutdown"}, wantData: map[string]any{"paddock.op": "delete"}},
		{name: "read", ev: ev("read", events.PhaseStart, nil), want: map[string]any{"op": "read"}},
		{name: "write", ev: ev("write", events.PhaseStart, nil), want: map[string]any{"op": "write"}},
		{name: "running", ev: ev("running", events.PhaseStart, nil), want: map[string]any{"op": "running"}},
		{name: "persist", ev: ev("persist", events.PhaseStart, nil), want: map[string]any{"op": "persist_workspace"}},
		{name: "hydrate", ev: ev("hydrate", events.PhaseStart, nil), want: map[string]any{"op": "hydrate_workspace"}},
		{name: "trace ids kept", ev: ev("exec", events.PhaseStart, func(e *events.Event) {
			e.ParentSpanID, e.TraceID, e.CommandID = "p-1", "trace_1", "c-1"
		}), want: map[string]any{"parent_span_id": "p-1", "trace_id": "trace_1"}, wantData: map[string]any{"paddock.command_id": "c-1"}},
		{name: "non-UUID session id", ev: ev("running", events.PhaseStart, func(e *events.Event) { e.SessionID = "my-session" }),
			want:     map[string]any{"session_id": uuid.NewSHA1(uuid.MustParse(events.SDKSessionNamespace), []byte("acme\x00my-session")).String()},
			wantData: map[string]any{"paddock.session_id": "my-session", "paddock.tenant": "acme"}},
		{name: "upper-case UUID made canonical", ev: ev("running", events.PhaseStart, func(e *events.Event) { e.SessionID = "0B7D3C7E-8A51-4A6E-9D0C-2F3B1F9D6E11" }),
			want: map[string]any{"session_id": sid}},
		{name: "exec start", ev: ev("exec", events.PhaseStart, func(e *events.Event) {
			e.Data = json.RawMessage(`{"argv":["sh","-c","exit 3"],"timeout_ms":1500}`)
		}), want: map[string]any{"op": "exec"}, wantData: map[string]any{
			"argv": []any{"sh", "-c", "exit 3"}, "timeout_ms": 1500.0,
			"command": []any{"sh", "-c", "exit 3"}, "timeout_s": 1.5,
		}},
		{name: "exec finish with exit code", ev: ev("exec", events.PhaseFinish, func(e *events.Event) {
			e.OK, e.ExitCode = &no, &exit3
			e.Data = json.RawMessage(`{"stdout_bytes":0,"stderr_bytes":0}`)
		}), want: map[string]any{"ok": false, "error_code": nil, "error_type": nil}, wantData: map[string]any{
			"exit_code": 3.0, "process.exit.code": 3.0, "stdout_bytes": 0.0,
		}},
		{name: "output as text", ev: ev("exec", events.PhaseFinish, func(e *events.Event) {
			e.Stdout = base64.StdEncoding.EncodeToString([]byte("a\xffb\n"))
			e.StdoutEncoding = "base64"
			e.Stderr = "plain ✓\n"
			e.StdoutTruncated = true
		}), want: map[string]any{"stdout": "a\uFFFDb\n", "stderr": "plain ✓\n"}, wantData: map[string]any{"paddock.stdout_truncated": true}},
		{name: "exec timeout", ev: ev("exec", events.PhaseFinish, func(e *events.Event) {
			e.OK, e.ErrorCode, e.ErrorMessage, e.ErrorRetryable = &no, "exec_timeout", "killed after 1s", &no
		}), want: map[string]any{"ok": false, "error_code": "exec_timeout", "error_type": "paddock.exec_timeout", "error_message": "killed after 1s", "error_retryable": false}},
		{name: "read not found", ev: ev("read", events.PhaseFinish, func(e *events.Event) {
			e.OK, e.ErrorCode = &no, "not_found"
		}), want: map[string]any{"error_code": "workspace_read_not_found", "error_type": "paddock.not_found"}},
		{name: "code without an SDK equivalent", ev: ev("start", events.PhaseFinish, func(e *events.Event) {
			e.OK, e.ErrorCode, e.ErrorRetryable = &no, "invalid_state", &no
		}), want: map[string]any{"error_code": nil, "error_type": "paddock.invalid_state", "error_retryable": false}},
		{name: "exec start as another user", ev: ev("exec", events.PhaseStart, func(e *events.Event) {
			e.Data = json.RawMessage(`{"argv":["sh","-lc","id -un"],"cwd":"sub","timeout_ms":600000,"env_keys":["A"],"user":"agent"}`)
		}), want: map[string]any{"op": "exec"}, wantData: map[string]any{
			"command": []any{"sh", "-lc", "id -un"}, "timeout_s": 600.0, "user": "agent", "cwd": "sub", "env_keys": []any{"A"},
		}},
		{name: "exec start as the session's user", ev: ev("exec", events.PhaseStart, func(e *events.Event) {
			e.Data = json.RawMessage(`{"argv":["sh","-c","true"],"timeout_ms":1000}`)
		}), wantData: map[string]any{"command": []any{"sh", "-c", "true"}, "user": nil}},
		{name: "proc_start start is exec", ev: ev("proc_start", events.PhaseStart, func(e *events.Event) {
			e.Data = json.RawMessage(`{"argv":["sh","-lc","pytest -q"],"tty":true}`)
		}), want: map[string]any{"op": "exec"}, wantData: map[string]any{
			"command": []any{"sh", "-lc", "pytest -q"}, "timeout_s": nil, "user": nil, "tty": true, "paddock.op": "proc_start",
		}},
		{name: "proc_start finish with exit code", ev: ev("proc_start", events.PhaseFinish, func(e *events.Event) {
			e.Data = json.RawMessage(`{"process_id":7,"output_bytes":3,"running":false,"exit_code":4}`)
		}), want: map[string]any{"op": "exec", "ok": true}, wantData: map[string]any{"exit_code": 4.0, "process.exit.code": 4.0}},
		{name: "proc_write is skipped", ev: ev("proc_write", events.PhaseStart, nil), skip: true},
		{name: "ls is skipped", ev: ev("ls", events.PhaseStart, nil), skip: true},
		{name: "rm is skipped", ev: ev("rm", events.PhaseFinish, nil), skip: true},
		{name: "mkdir is skipped", ev: ev("mkdir", events.PhaseStart, nil), skip: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := sdkJSON(t, tc.ev)
			if ok == tc.skip {
				t.Fatalf("ToSDK(%s %s) converted = %v, want %v", tc.ev.Op, tc.ev.Phase, ok, !tc.skip)
			}
			if !ok {
				return
			}
			for k, want := range tc.want {
				v, present := got[k]
				if !present || !reflect.DeepEqual(v, want) {
					t.Errorf("%s = %#v (present %v), want %#v", k, v, present, want)
				}
			}
			for _, k := range tc.absent {
				if v, present := got[k]; present {
					t.Errorf("%s = %#v, want it absent", k, v)
				}
			}
			data, _ := got["data"].(map[string]any)
			for k, want := range tc.wantData {
				if v := data[k]; !reflect.DeepEqual(v, want) {
					t.Errorf("data[%q] = %#v, want %#v", k, v, want)
				}
			}
		})
	}
}

func TestSDKErrorCode(t *testing.T) {
	for _, tc := range []struct {
		op, code string
		want     string // "" for null
	}{
		{"exec", "exec_timeout", "exec_timeout"},
		{"exec", "runtime_error", "exec_transport_error"},
		{"exec", "unavailable", "exec_transport_error"},
		{"start", "runtime_error", ""},
		{"read", "not_found", "workspace_read_not_found"},
		{"write", "not_found", ""},
		{"read", "invalid_path", "invalid_manifest_path"},
		{"write", "invalid_path", "invalid_manifest_path"},
		{"create", "invalid_path", "invalid_manifest_path"},
		{"exec", "invalid_path", ""},
		{"hydrate", "snapshot_not_found", "snapshot_not_restorable"},
		{"resume", "snapshot_not_found", "snapshot_not_restorable"},
		{"hydrate", "snapshot_corrupt", "snapshot_restore_error"},
		{"hydrate", "invalid_archive", "workspace_archive_write_error"},
		{"resume", "invalid_archive", "snapshot_restore_error"},
		{"write", "invalid_archive", ""},
		{"exec", "internal", ""},
		{"exec", "", ""},
	} {
		got := events.SDKErrorCode(tc.op, errcode.Code(tc.code))
		if (got == nil) != (tc.want == "") || (got != nil && *got != tc.want) {
			t.Errorf("SDKErrorCode(%s, %s) = %v, want %q", tc.op, tc.code, deref(got), tc.want)
		}
	}
}

// TestToSDKRecordedHistory converts every event of a history a real node
// recorded: each is either skipped for an op without an SDK op, or
// becomes JSON with the SDK's required members.
func TestToSDKRecordedHistory(t *testing.T) {
	b, err := os.ReadFile("../projection/testdata/lifecycle.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	converted := 0
	for n := 1; sc.Scan(); n++ {
		if bytes.Contains(sc.Bytes(), []byte(`"kind":`)) {
			continue // a node event
		}
		ev, err := events.Parse(sc.Bytes())
		if err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		got, ok := sdkJSON(t, ev)
		switch ev.Op {
		case "ls", "rm", "mkdir", "exec_read", "proc_write", "proc_read", "proc_resize", "proc_signal", "proc_list", "proc_exit", "fork":
			if ok {
				t.Errorf("line %d: %s converted, want it skipped", n, ev.Op)
			}
			continue
		}
		if !ok {
			t.Fatalf("line %d: %s skipped", n, ev.Op)
		}
		converted++
		required := []string{"version", "event_id", "ts", "session_id", "seq", "op", "phase", "span_id", "data"}
		if ev.Phase == events.PhaseFinish {
			required = append(required, "ok", "duration_ms")
		}
		for _, k := range required {
			if _, present := got[k]; !present {
				t.Errorf("line %d: %s %s has no %s", n, ev.Op, ev.Phase, k)
			}
		}
		if _, err := uuid.Parse(got["session_id"].(string)); err != nil {
			t.Errorf("line %d: session_id %v is not a UUID", n, got["session_id"])
		}
	}
	if converted == 0 {
		t.Fatal("no event converted")
	}
}

// TestSDKExporterRecordedShapes converts events as a node recorded them
// for the Python provider's commands: exec with ["sh","-lc",CMD] (the
// SDK's default shell) as another user with env and a timeout, exec with
// ["sh","-c",CMD] in a cwd, and the shell tool's proc_start. Every one is
// an SDK exec whose start and finish both carry the command, as the SDK's
// own finish data does.
func TestSDKExporterRecordedShapes(t *testing.T) {
	recorded := []string{
		`{"version":2,"event_id":"8a0c8f35-57a5-4b8a-9f43-1b7c2b0e6a01","ts":"2026-11-27T08:30:14.1Z","tenant":"acme","session_id":"s1","seq":5,"op":"exec","phase":"start","span_id":"a1","data":{"argv":["sh","-lc","pip list"],"timeout_ms":30000,"env_keys":["PIP_NO_INPUT"],"user":"agent"}}`,
		`{"version":2,"event_id":"9d1b5e2c-6a0f-4a1e-8e0b-2c3d4e5f6a02","ts":"2026-11-27T08:30:14.2Z","tenant":"acme","session_id":"s1","seq":6,"op":"exec","phase":"start","span_id":"a2","data":{"argv":["sh","-c","ls"],"cwd":"src","timeout_ms":600000}}`,
		`{"version":2,"event_id":"0e2c6f3d-7b1a-4b2f-9f1c-3d4e5f6a7b03","ts":"2026-11-27T08:30:14.3Z","tenant":"acme","session_id":"s1","seq":7,"op":"exec","phase":"finish","span_id":"a2","data":{"stdout_bytes":4,"stderr_bytes":0},"ok":true,"duration_ms":3.1,"exit_code":0}`,
		`{"version":2,"event_id":"1f3d7a4e-8c2b-4c3a-8a2d-4e5f6a7b8c04","ts":"2026-11-27T08:30:14.4Z","tenant":"acme","session_id":"s1","seq":8,"op":"exec","phase":"finish","span_id":"a1","data":{"stdout_bytes":9,"stderr_bytes":0},"ok":false,"duration_ms":80.2,"exit_code":1}`,
		`{"version":2,"event_id":"2a4e8b5f-9d3c-4d4b-9b3e-5f6a7b8c9d05","ts":"2026-11-27T08:30:14.5Z","tenant":"acme","session_id":"s1","seq":9,"op":"proc_start","phase":"start","span_id":"a3","data":{"argv":["sh","-lc","cd /workspace && pytest -q"],"tty":true}}`,
		`{"version":2,"event_id":"3b5f9c6a-0e4d-4e5c-8c4f-6a7b8c9d0e06","ts":"2026-11-27T08:30:14.6Z","tenant":"acme","session_id":"s1","seq":10,"op":"proc_start","phase":"finish","span_id":"a3","data":{"process_id":9,"output_bytes":120,"running":false,"exit_code":0},"ok":true,"duration_ms":900.5}`,
	}
	wantCommand := map[string][]any{
		"a1": {"sh", "-lc", "pip list"},
		"a2": {"sh", "-c", "ls"},
		"a3": {"sh", "-lc", "cd /workspace && pytest -q"},
	}
	wantUser := map[string]any{"a1": "agent", "a2": nil, "a3": nil}
	wantExit := map[string]float64{"a1": 1, "a2": 0, "a3": 0}
	var x events.SDKExporter
	finished := map[string]bool{}
	for n, line := range recorded {
		ev, err := events.Parse([]byte(line))
		if err != nil {
			t.Fatalf("line %d: %v", n+1, err)
		}
		out, ok := x.Convert(ev)
		if !ok || out.Op != "exec" {
			t.Fatalf("line %d: converted %v, op %q; want exec", n+1, ok, out.Op)
		}
		b, err := json.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Data map[string]any `json:"data"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if got := m.Data["command"]; !reflect.DeepEqual(got, wantCommand[ev.SpanID]) {
			t.Errorf("line %d (%s %s): command %#v, want %#v", n+1, ev.Op, ev.Phase, got, wantCommand[ev.SpanID])
		}
		if got, present := m.Data["user"]; !present || !reflect.DeepEqual(got, wantUser[ev.SpanID]) {
			t.Errorf("line %d (%s %s): user %#v (present %v), want %#v", n+1, ev.Op, ev.Phase, got, present, wantUser[ev.SpanID])
		}
		if ev.Phase == events.PhaseFinish {
			finished[ev.SpanID] = true
			if got := m.Data["exit_code"]; got != wantExit[ev.SpanID] {
				t.Errorf("line %d: exit_code %#v, want %v", n+1, got, wantExit[ev.SpanID])
			}
		}
	}
	if len(finished) != 3 {
		t.Errorf("finished %v, want all three", finished)
	}
}

func deref(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}
