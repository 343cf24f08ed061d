package events

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Hash returns the hex sha256 of an event's stored bytes, as the next
// event of its session carries it in PrevHash.
func Hash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// Version is the schema version written into every event. Within a
// version, events only gain optional fields (and data payloads optional
// fields), which readers ignore; anything else is a new version. Every
// reader checks it (CheckVersion) and sets aside an event of a version it
// does not know rather than guess at it.
//
// Version 2 is the event schema of contract v1 (the data types of this
// package). Version 1 was the first wave's, before the contract was fixed:
// its data fields differ (a snapshot's "digest" is now "sha256", output
// was lossy text), so readers set such events aside too.
const Version = 2

// ErrUnsupportedVersion is the kind of error CheckVersion returns.
var ErrUnsupportedVersion = errors.New("unsupported event version")

// CheckVersion returns an error wrapping ErrUnsupportedVersion unless the
// event is of Version.
func (e *Event) CheckVersion() error { return checkVersion(e.Version) }

// CheckVersion returns an error wrapping ErrUnsupportedVersion unless the
// node event is of Version.
func (e *NodeEvent) CheckVersion() error { return checkVersion(e.Version) }

func checkVersion(v int) error {
	if v != Version {
		return fmt.Errorf("%w: version %d (this reader knows %d)", ErrUnsupportedVersion, v, Version)
	}
	return nil
}

// Parse decodes a stored session event and checks its version.
func Parse(data []byte) (Event, error) {
	var ev Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return ev, err
	}
	return ev, ev.CheckVersion()
}

// ParseNode decodes a stored node event and checks its version.
func ParseNode(data []byte) (NodeEvent, error) {
	var ev NodeEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		return ev, err
	}
	return ev, ev.CheckVersion()
}

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
	// Data holds op-specific details, of the type NewData(Op, Phase)
	// gives: the create spec without secret values, exec argv and byte
	// counts, write sizes and digests, ...
	Data json.RawMessage `json:"data,omitempty"`

	// Finish only. OK is false for an op that failed (ErrorCode says why)
	// and for an exec whose command exited non-zero (ExitCode says how),
	// as the OpenAI Agents SDK's finish events have it.
	OK             *bool    `json:"ok,omitempty"`
	DurationMS     *float64 `json:"duration_ms,omitempty"`
	ErrorCode      string   `json:"error_code,omitempty"`
	ErrorType      string   `json:"error_type,omitempty"`
	ErrorMessage   string   `json:"error_message,omitempty"`
	ErrorRetryable *bool    `json:"error_retryable,omitempty"`
	ExitCode       *int     `json:"exit_code,omitempty"`
	// Stdout and Stderr hold captured exec output (only under a capture
	// policy), encoded as replies encode it: the text itself, or base64
	// with StdoutEncoding (StderrEncoding) "base64" (commands.EncodeOutput).
	Stdout          string `json:"stdout,omitempty"`
	StdoutEncoding  string `json:"stdout_encoding,omitempty"`
	Stderr          string `json:"stderr,omitempty"`
	StderrEncoding  string `json:"stderr_encoding,omitempty"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
}

// NodeEvent records a node's lifecycle (registered, stopped).
type NodeEvent struct {
	Version int       `json:"version"`
	EventID string    `json:"event_id"`
	TS      time.Time `json:"ts"`
	Node    string    `json:"node"`
	Kind    string    `json:"kind"`
	// Actor is who made the node do it, for the kinds an operator's
	// command causes (cordoned, uncordoned): the actor the engine's or
	// admin's request named (the CLI writes its identity's public key).
	Actor string          `json:"actor,omitempty"`
	Data  json.RawMessage `json:"data,omitempty"`
}

// Subjects builds event subjects under one prefix (default "sbx"), for a
// log over Partitions partitions (0 or 1: unpartitioned, see partition.go).
type Subjects struct {
	Prefix string
	// Partitions is the deployment's number of event partitions; with more
	// than one a session's subjects carry its partition.
	Partitions int
}

func (s Subjects) prefix() string {
	if s.Prefix == "" {
		return "sbx"
	}
	return s.Prefix
}

// Session is the subject of one event.
func (s Subjects) Session(tenant, session, op string, phase Phase) string {
	return s.sessionRoot(s.partitionOf(tenant, session)) + "." + tenant + "." + session + "." + op + "." + string(phase)
}

// SessionFilter matches every event of one session.
func (s Subjects) SessionFilter(tenant, session string) string {
	return s.sessionRoot(s.partitionOf(tenant, session)) + "." + tenant + "." + session + ".>"
}

// Filter matches session events by tenant, session and op; an empty value
// matches any. With several partitions a filter naming no session matches
// in every partition.
func (s Subjects) Filter(tenant, session, op string) string {
	tok := func(v string) string {
		if v == "" {
			return "*"
		}
		return v
	}
	root := s.prefix() + ".pevt.*"
	switch {
	case s.parts() == 1:
		root = s.prefix() + ".evt"
	case tenant != "" && session != "":
		root = s.sessionRoot(s.partitionOf(tenant, session))
	}
	return root + "." + tok(tenant) + "." + tok(session) + "." + tok(op) + ".*"
}

// AllSessions matches every session event (of every partition).
func (s Subjects) AllSessions() string {
	if s.parts() == 1 {
		return s.prefix() + ".evt.>"
	}
	return s.prefix() + ".pevt.>"
}

// Node is the subject of a node lifecycle event.
func (s Subjects) Node(node, kind string) string {
	return s.prefix() + ".nodeevt." + node + "." + kind
}

// AllNodes matches every node lifecycle event.
func (s Subjects) AllNodes() string { return s.prefix() + ".nodeevt.>" }
