package events

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
)

// SDKVersion is the schema version of the OpenAI Agents SDK's sandbox
// audit events (agents.sandbox.session.events), which SDKEvent carries.
const SDKVersion = 1

// SDKSessionNamespace is the namespace of the name-based (SHA-1) UUIDs
// that ToSDK gives sessions whose id is not a UUID. It is fixed: the same
// tenant and session always map to the same UUID.
const SDKSessionNamespace = "4f1f3a0e-5c1b-4b8e-9d6a-0c7a2e9b5d31"

// SDKEvent is a session event in the OpenAI Agents SDK's format: its JSON
// is accepted by the SDK's validate_sandbox_session_event. Start events
// have a nil SDKFinish, so they carry none of its fields.
type SDKEvent struct {
	Version      int       `json:"version"`
	EventID      string    `json:"event_id"`
	TS           time.Time `json:"ts"`
	SessionID    string    `json:"session_id"`
	Seq          uint64    `json:"seq"`
	Op           string    `json:"op"`
	Phase        Phase     `json:"phase"`
	SpanID       string    `json:"span_id"`
	ParentSpanID *string   `json:"parent_span_id"`
	TraceID      *string   `json:"trace_id"`
	// Data is ours, value for value as stored, plus the SDK's own keys and
	// the "paddock.*" keys ToSDK documents.
	Data map[string]json.RawMessage `json:"data"`
	*SDKFinish
}

// SDKFinish holds the fields of an SDK finish event.
type SDKFinish struct {
	OK         bool    `json:"ok"`
	DurationMS float64 `json:"duration_ms"`
	// ErrorCode is a value of the SDK's ErrorCode enum, or nil.
	ErrorCode      *string `json:"error_code"`
	ErrorType      *string `json:"error_type"`
	ErrorMessage   *string `json:"error_message"`
	ErrorRetryable *bool   `json:"error_retryable"`
	Stdout         *string `json:"stdout"`
	Stderr         *string `json:"stderr"`
}

// sdkOps maps our ops to the SDK's OpName. Ops missing here (ls, rm,
// mkdir, lookup, exec_read, fork, checkpoint and the proc ops but
// proc_start) have no SDK op. proc_start is exec: the SDK audits no PTY
// call, but an agent's shell tool runs its commands through one on a session that supports
// PTYs (as the Paddock provider's does), so without it an export would
// hold none of the agent's commands.
var sdkOps = map[commands.Op]string{
	commands.OpProcStart: "exec",
	commands.OpCreate:    "start",
	commands.OpStart:     "start",
	commands.OpResume:    "start",
	commands.OpStop:      "stop",
	commands.OpShutdown:  "shutdown",
	commands.OpDelete:    "shutdown",
	commands.OpExec:      "exec",
	commands.OpRead:      "read",
	commands.OpWrite:     "write",
	commands.OpRunning:   "running",
	commands.OpPersist:   "persist_workspace",
	commands.OpHydrate:   "hydrate_workspace",
	commands.OpPort:      "resolve_exposed_port",
}

// ToSDK converts a session event to the OpenAI Agents SDK's audit event
// format (docs/architecture.md, "Exporting in the OpenAI Agents SDK's
// format", has the same rules as a table). It returns false, and no
// event, for an op the SDK has no OpName for (ls, rm, mkdir: the SDK
// leaves them unaudited); node events are not session events and have no
// SDK form either.
//
//   - version is SDKVersion; event_id, ts, seq, span_id and phase are as
//     stored; parent_span_id and trace_id are null when empty. The SDK
//     requires event_id to be a UUID, which ours are.
//   - session_id is ours in canonical form when it parses as a UUID, else
//     uuid.NewSHA1(SDKSessionNamespace, tenant+"\x00"+session). A UUID
//     session id is unique within a tenant only, so export one tenant at a
//     time or tell sessions apart by "paddock.tenant".
//   - op: create, start and resume are start; stop is stop; shutdown and
//     delete are shutdown; exec, read, write and running keep their
//     names; proc_start is exec too (the agent's shell commands when the
//     session supports PTYs); persist is persist_workspace, hydrate is
//     hydrate_workspace, port is resolve_exposed_port.
//   - data is ours plus "paddock.tenant", "paddock.session_id" and
//     "paddock.op" (always), and "paddock.command_id", "paddock.node",
//     "paddock.actor", "paddock.prev_hash", "paddock.stdout_truncated",
//     "paddock.stderr_truncated" when set, so nothing stored is lost. An
//     exec or proc_start start adds the SDK's "command" (our argv, as the
//     node ran it: ["sh","-lc",CMD] stays that), "timeout_s"
//     (timeout_ms/1000; null for proc_start, whose process has none) and
//     "user" (null when the session's own); an exec or proc_start finish
//     with an exit code adds "exit_code" and "process.exit.code". ToSDK
//     sees one event: SDKExporter also copies the start's "command",
//     "timeout_s" and "user" into the finish, as the SDK's finish data has
//     them.
//   - A finish has ok (false when absent), duration_ms (0 when absent),
//     error_code (see SDKErrorCode), error_type "paddock.<our code>",
//     error_message and error_retryable as stored (null when absent), and
//     stdout and stderr as text: base64 output is decoded and invalid
//     UTF-8 replaced by U+FFFD (null when absent; malformed base64 is
//     kept as stored).
func ToSDK(ev Event) (SDKEvent, bool) {
	op, ok := sdkOps[commands.Op(ev.Op)]
	if !ok {
		return SDKEvent{}, false
	}
	out := SDKEvent{
		Version:      SDKVersion,
		EventID:      ev.EventID,
		TS:           ev.TS,
		SessionID:    SDKSessionID(ev.Tenant, ev.SessionID),
		Seq:          ev.Seq,
		Op:           op,
		Phase:        ev.Phase,
		SpanID:       ev.SpanID,
		ParentSpanID: nonEmpty(ev.ParentSpanID),
		TraceID:      nonEmpty(ev.TraceID),
		Data:         sdkData(ev),
	}
	if ev.Phase != PhaseFinish {
		return out, true
	}
	f := &SDKFinish{
		OK:             ev.OK != nil && *ev.OK,
		ErrorCode:      SDKErrorCode(ev.Op, errcode.Code(ev.ErrorCode)),
		ErrorMessage:   nonEmpty(ev.ErrorMessage),
		ErrorRetryable: ev.ErrorRetryable,
		Stdout:         sdkText(ev.Stdout, ev.StdoutEncoding),
		Stderr:         sdkText(ev.Stderr, ev.StderrEncoding),
	}
	if ev.DurationMS != nil {
		f.DurationMS = *ev.DurationMS
	}
	if ev.ErrorCode != "" {
		f.ErrorType = nonEmpty("paddock." + ev.ErrorCode)
	}
	out.SDKFinish = f
	return out, true
}

// SDKSessionID returns the SDK session_id of one of our sessions: its id
// in canonical form when it is a UUID, else a name-based UUID of tenant
// and session id (see ToSDK).
func SDKSessionID(tenant, session string) string {
	if u, err := uuid.Parse(session); err == nil {
		return u.String()
	}
	return uuid.NewSHA1(uuid.MustParse(SDKSessionNamespace), []byte(tenant+"\x00"+session)).String()
}

// SDKErrorCode returns the SDK ErrorCode value that means the same as our
// code c on op, or nil when none does (ToSDK's error_type keeps our code
// either way):
//
//	exec_timeout                   -> exec_timeout
//	runtime_error, unavailable     -> exec_transport_error   on exec
//	not_found                      -> workspace_read_not_found on read
//	invalid_path                   -> invalid_manifest_path  on create, read, write
//	snapshot_not_found             -> snapshot_not_restorable
//	snapshot_corrupt               -> snapshot_restore_error
//	invalid_archive                -> workspace_archive_write_error on hydrate,
//	                                  snapshot_restore_error on resume
//
// The SDK raises invalid_manifest_path for a manifest entry, or a read or
// write path, that is absolute outside the root or escapes it: what our
// invalid_path means on those ops. Elsewhere (an exec's cwd, ls, rm) the
// SDK has no such check, so there is no equivalent. Its hydrate_workspace
// raises workspace_archive_write_error for an unsafe or unreadable tar,
// what invalid_archive means on hydrate; on resume the archive is one of
// our stored snapshots, whose failed restore is snapshot_restore_error.
func SDKErrorCode(op string, c errcode.Code) *string {
	for _, m := range sdkErrorCodes {
		if m.code != c {
			continue
		}
		if len(m.ops) == 0 {
			return nonEmpty(m.sdk)
		}
		for _, o := range m.ops {
			if o == commands.Op(op) {
				return nonEmpty(m.sdk)
			}
		}
	}
	return nil
}

// sdkErrorCodes is SDKErrorCode's table; no ops means on any op.
var sdkErrorCodes = []struct {
	code errcode.Code
	ops  []commands.Op
	sdk  string
}{
	{errcode.ExecTimeout, nil, "exec_timeout"},
	{errcode.RuntimeError, []commands.Op{commands.OpExec}, "exec_transport_error"},
	{errcode.Unavailable, []commands.Op{commands.OpExec}, "exec_transport_error"},
	{errcode.NotFound, []commands.Op{commands.OpRead}, "workspace_read_not_found"},
	{errcode.InvalidPath, []commands.Op{commands.OpCreate, commands.OpRead, commands.OpWrite}, "invalid_manifest_path"},
	{errcode.SnapshotNotFound, nil, "snapshot_not_restorable"},
	{errcode.SnapshotCorrupt, nil, "snapshot_restore_error"},
	{errcode.InvalidArchive, []commands.Op{commands.OpHydrate}, "workspace_archive_write_error"},
	{errcode.InvalidArchive, []commands.Op{commands.OpResume}, "snapshot_restore_error"},
}

// sdkData builds an SDK event's data: ours, value for value, plus the
// SDK's keys for exec and the paddock.* keys.
func sdkData(ev Event) map[string]json.RawMessage {
	data := map[string]json.RawMessage{}
	if len(ev.Data) > 0 && string(ev.Data) != "null" {
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			// Not an object: keep it whole under a key of ours.
			data = map[string]json.RawMessage{"paddock.data": ev.Data}
		}
	}
	set := func(k string, v any) {
		b, err := json.Marshal(v)
		if err == nil {
			data[k] = b
		}
	}
	set("paddock.tenant", ev.Tenant)
	set("paddock.session_id", ev.SessionID)
	set("paddock.op", ev.Op)
	for _, kv := range []struct{ k, v string }{
		{"paddock.command_id", ev.CommandID},
		{"paddock.node", ev.Node},
		{"paddock.actor", ev.Actor},
		{"paddock.prev_hash", ev.PrevHash},
	} {
		if kv.v != "" {
			set(kv.k, kv.v)
		}
	}
	if ev.StdoutTruncated {
		set("paddock.stdout_truncated", true)
	}
	if ev.StderrTruncated {
		set("paddock.stderr_truncated", true)
	}
	switch commands.Op(ev.Op) {
	case commands.OpExec:
		if ev.Phase == PhaseStart {
			if st, err := DecodeData[ExecStart](ev); err == nil {
				set("command", st.Argv)
				if st.TimeoutMS > 0 {
					set("timeout_s", float64(st.TimeoutMS)/1000)
				} else {
					set("timeout_s", nil)
				}
				setUser(set, st.User)
			}
			return data
		}
	case commands.OpProcStart:
		if ev.Phase == PhaseStart {
			if st, err := DecodeData[ProcStart](ev); err == nil {
				set("command", st.Argv)
				set("timeout_s", nil)
				setUser(set, st.User)
			}
			return data
		}
		if fin, err := DecodeData[ProcUpdate](ev); err == nil && fin.ExitCode != nil && ev.ExitCode == nil {
			set("exit_code", *fin.ExitCode)
			set("process.exit.code", *fin.ExitCode)
		}
	default:
		return data
	}
	if ev.ExitCode != nil {
		set("exit_code", *ev.ExitCode)
		set("process.exit.code", *ev.ExitCode)
	}
	return data
}

// setUser sets the SDK's "user": the exec's user, or null for the
// session's own.
func setUser(set func(string, any), user string) {
	if user == "" {
		set("user", nil)
		return
	}
	set("user", user)
}

// sdkStartKeys are the SDK's exec start data keys that its finish data
// repeats (the SDK's finish data is its start data plus the exit code).
var sdkStartKeys = []string{"command", "timeout_s", "user"}

// maxSDKOpenSpans bounds the exec starts an SDKExporter holds waiting for
// their finish; past it a finish may lack its command.
const maxSDKOpenSpans = 100_000

// SDKExporter converts a sequence of session events, in stream order, to
// the SDK's format: ToSDK, plus what needs the start event when its finish
// comes. An exec's (and proc_start's) finish gets the start's "command",
// "timeout_s" and "user", so a reader of finish events alone still sees
// which command exited how, as in the SDK's own events. The zero value is
// ready; it is not safe for concurrent use.
type SDKExporter struct {
	open map[string]map[string]json.RawMessage // span id -> start keys
}

// Convert returns ev in the SDK's format, or false when it has none (see
// ToSDK).
func (x *SDKExporter) Convert(ev Event) (SDKEvent, bool) {
	out, ok := ToSDK(ev)
	if !ok || out.Op != "exec" {
		return out, ok
	}
	key := ev.Tenant + "\x00" + ev.SessionID + "\x00" + ev.SpanID
	if ev.Phase == PhaseStart {
		if x.open == nil {
			x.open = map[string]map[string]json.RawMessage{}
		}
		if len(x.open) < maxSDKOpenSpans {
			kept := map[string]json.RawMessage{}
			for _, k := range sdkStartKeys {
				if v, ok := out.Data[k]; ok {
					kept[k] = v
				}
			}
			x.open[key] = kept
		}
		return out, true
	}
	if kept, ok := x.open[key]; ok {
		delete(x.open, key)
		for k, v := range kept {
			if _, set := out.Data[k]; !set {
				out.Data[k] = v
			}
		}
	}
	return out, true
}

// sdkText returns captured output as the SDK's text, or nil when there is
// none.
func sdkText(text, encoding string) *string {
	if text == "" {
		return nil
	}
	b, err := commands.DecodeOutput(text, encoding)
	if err != nil {
		return &text
	}
	// Each byte that is not part of valid UTF-8 becomes U+FFFD.
	s := string([]rune(string(b)))
	return &s
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
