package events

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// Hash returns the hex sha256 of an event's stored bytes, as the next
// event of its session carries it in PrevHash.
func Hash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// Version is the schema version written into every event.
const Version = 1

// Phase is start or finish.
type Phase string

// The two phases of an operation.
const (
	PhaseStart  Phase = "start"
	PhaseFinish Phase = "finish"
)

// Event is one audit event. Finish-only fields are omitted on start events.
type Event struct {
	Version      int       `json:"version"`
	EventID      string    `json:"event_id"`
	TS           time.Time `json:"ts"`
	Tenant       string    `json:"tenant"`
	SessionID    string    `json:"session_id"`
	Seq          uint64    `json:"seq"`
	Op           string    `json:"op"`
	Phase        Phase     `json:"phase"`
	CommandID    string    `json:"command_id,omitempty"`
	SpanID       string    `json:"span_id"`
	ParentSpanID string    `json:"parent_span_id,omitempty"`
	TraceID      string    `json:"trace_id,omitempty"`
	Node         string    `json:"node,omitempty"`
	Actor        string    `json:"actor,omitempty"`
	// PrevHash is Hash of the stored bytes of the session's previous event
	// (empty on the first), so that altering or removing an event breaks
	// the chain.
	PrevHash string `json:"prev_hash,omitempty"`
	// Data holds op-specific details: the create spec (secret values
	// redacted), exec argv and byte counts, write sizes and digests.
	Data json.RawMessage `json:"data,omitempty"`

	// Finish only.
	OK              *bool    `json:"ok,omitempty"`
	DurationMS      *float64 `json:"duration_ms,omitempty"`
	ErrorCode       string   `json:"error_code,omitempty"`
	ErrorType       string   `json:"error_type,omitempty"`
	ErrorMessage    string   `json:"error_message,omitempty"`
	ErrorRetryable  *bool    `json:"error_retryable,omitempty"`
	ExitCode        *int     `json:"exit_code,omitempty"`
	Stdout          string   `json:"stdout,omitempty"`
	Stderr          string   `json:"stderr,omitempty"`
	StdoutTruncated bool     `json:"stdout_truncated,omitempty"`
	StderrTruncated bool     `json:"stderr_truncated,omitempty"`
}

// NodeEvent records a node's lifecycle (registered, stopped).
type NodeEvent struct {
	Version int             `json:"version"`
	EventID string          `json:"event_id"`
	TS      time.Time       `json:"ts"`
	Node    string          `json:"node"`
	Kind    string          `json:"kind"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// Subjects builds event subjects under one prefix (default "sbx").
type Subjects struct {
	Prefix string
}

func (s Subjects) prefix() string {
	if s.Prefix == "" {
		return "sbx"
	}
	return s.Prefix
}

// Session is the subject of one event.
func (s Subjects) Session(tenant, session, op string, phase Phase) string {
	return s.prefix() + ".evt." + tenant + "." + session + "." + op + "." + string(phase)
}

// SessionFilter matches every event of one session.
func (s Subjects) SessionFilter(tenant, session string) string {
	return s.prefix() + ".evt." + tenant + "." + session + ".>"
}

// Filter matches session events by tenant, session and op; an empty value
// matches any.
func (s Subjects) Filter(tenant, session, op string) string {
	tok := func(v string) string {
		if v == "" {
			return "*"
		}
		return v
	}
	return s.prefix() + ".evt." + tok(tenant) + "." + tok(session) + "." + tok(op) + ".*"
}

// AllSessions matches every session event.
func (s Subjects) AllSessions() string { return s.prefix() + ".evt.>" }

// Node is the subject of a node lifecycle event.
func (s Subjects) Node(node, kind string) string {
	return s.prefix() + ".nodeevt." + node + "." + kind
}

// AllNodes matches every node lifecycle event.
func (s Subjects) AllNodes() string { return s.prefix() + ".nodeevt.>" }
