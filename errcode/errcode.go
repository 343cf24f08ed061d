package errcode

import (
	"errors"
	"fmt"
)

// Code is a stable, machine-readable error code.
type Code string

// The registry. Each code is documented in docs/architecture.md; the
// retryable flag says whether the same command may succeed if sent again
// unchanged.
const (
	InvalidRequest      Code = "invalid_request"
	UnknownOp           Code = "unknown_op"
	InvalidPath         Code = "invalid_path"
	NotFound            Code = "not_found"
	SessionNotFound     Code = "session_not_found"
	AlreadyExists       Code = "already_exists"
	PayloadTooLarge     Code = "payload_too_large"
	ExecTimeout         Code = "exec_timeout"
	RuntimeError        Code = "runtime_error"
	ConcurrencyConflict Code = "concurrency_conflict"
	Unavailable         Code = "unavailable"
	InvalidState        Code = "invalid_state"
	NoCapacity          Code = "no_capacity"
	Internal            Code = "internal"
	ImageNotFound       Code = "image_not_found"
	InvalidArchive      Code = "invalid_archive"
	SnapshotNotFound    Code = "snapshot_not_found"
	SnapshotCorrupt     Code = "snapshot_corrupt"
	UnsupportedVersion  Code = "unsupported_version"
	QuotaExceeded       Code = "quota_exceeded"
	PolicyDenied        Code = "policy_denied"
	PermissionDenied    Code = "permission_denied"
	// SessionMoved (1.2): the node that received the command no longer
	// serves the session (an engine declared it lost, or another node
	// resumed the session) and ran nothing; the client sends the command
	// again and reaches the session where it is now.
	SessionMoved Code = "session_moved"
)

// StorageQuotaExceeded is a write that does not fit its storage: the
// workspace bucket at its quota, the events stream at its reserved size,
// or the JetStream store full. Unlike quota_exceeded (a share that frees
// itself as commands end) it stays until someone frees space or raises
// the limit, so it is not retryable.
const StorageQuotaExceeded Code = "storage_quota_exceeded"

type entry struct {
	retryable   bool
	description string
}

var registry = map[Code]entry{
	InvalidRequest:      {false, "the request is malformed: bad JSON, unknown fields, missing or invalid values"},
	UnknownOp:           {false, "the operation named in the subject does not exist"},
	InvalidPath:         {false, "the path is empty, malformed or leaves the workspace root"},
	NotFound:            {false, "the file or directory does not exist"},
	SessionNotFound:     {false, "no such session (never created, or deleted)"},
	AlreadyExists:       {false, "the session, file or directory already exists"},
	PayloadTooLarge:     {false, "the payload exceeds the inline limit"},
	ExecTimeout:         {false, "the command ran past its timeout and was killed"},
	RuntimeError:        {true, "the container runtime failed"},
	ConcurrencyConflict: {true, "another writer appended to the session's event log first"},
	Unavailable:         {true, "the node or engine that serves the request is not reachable"},
	InvalidState:        {false, "the session is not in a state that allows the operation"},
	NoCapacity:          {true, "no registered node has the requested runtime and room"},
	Internal:            {false, "an unexpected failure inside Paddock; the node's log has the cause"},
	ImageNotFound:       {false, "the sandbox image is not on the node and cannot be pulled"},
	InvalidArchive:      {false, "the workspace archive has a member that could leave the workspace, or breaks a limit"},
	SnapshotNotFound:    {false, "no such workspace snapshot"},
	SnapshotCorrupt:     {false, "the workspace snapshot does not match its sha256"},
	UnsupportedVersion:  {false, "the request's contract version has a major version the server does not speak"},
	QuotaExceeded:       {true, "the tenant is at its share of the node (commands in flight, sessions); the message names the limit"},
	PolicyDenied:        {false, "the node's operator policy does not allow what the request asks (an image, network, root, a limit)"},
	PermissionDenied:    {false, "the request names what belongs to another tenant (an object of the workspace bucket)"},
	SessionMoved:        {true, "the node no longer serves the session (declared lost, or resumed elsewhere) and ran nothing; send the command again"},

	// Storage: a limit that only freeing space or raising it lifts.
	StorageQuotaExceeded: {false, "the write does not fit: the workspace bucket is at its quota, the events stream at its reserved size, or the JetStream store is full; the message says which and how to free space"},
}

// Known reports whether c is in the registry.
func Known(c Code) bool { _, ok := registry[c]; return ok }

// Retryable reports whether an operation that failed with c may succeed when
// retried unchanged. Unknown codes are not retryable.
func (c Code) Retryable() bool { return registry[c].retryable }

// Description returns the registry's one-line description of c, or "" for an
// unknown code.
func (c Code) Description() string { return registry[c].description }

// Codes returns every registered code, for documentation and tests.
func Codes() []Code {
	out := make([]Code, 0, len(registry))
	for c := range registry {
		out = append(out, c)
	}
	return out
}

// Error is an error with a wire code. Two *Error values match under
// errors.Is when their codes are equal, whatever their messages.
//
// Message is what crosses the wire: Paddock's own words and the values the
// client sent, never the text of a cause (a NATS API error, a Docker daemon
// message, a host path). The cause stays in Err, for errors.Is/As and for
// the logs of the process that met it.
type Error struct {
	Code    Code
	Message string
	// Err is the underlying cause, kept for errors.Is/As and logs inside a
	// process. It never crosses the wire.
	Err error
}

// New returns an *Error with the given code and formatted message.
func New(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error with code c and message msg that unwraps to err.
// err's text is not part of the message, so it never reaches a client; it
// shows in Error (for logs) and through errors.Is/As.
func Wrap(c Code, err error, msg string) *Error {
	return &Error{Code: c, Message: msg, Err: err}
}

// Error implements error as "<code>: <message>", followed by ": <cause>"
// when there is a cause: the form for logs and for the CLI's own errors.
func (e *Error) Error() string {
	s := string(e.Code)
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is matches any *Error with the same code.
func (e *Error) Is(target error) bool {
	var t *Error
	if errors.As(target, &t) {
		return t.Code == e.Code
	}
	return false
}

// Retryable reports whether the error's code is retryable.
func (e *Error) Retryable() bool { return e.Code.Retryable() }

// Of returns the code of the first *Error in err's chain, Internal for any
// other non-nil error, and "" for nil.
func Of(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}

// Sentinels for errors.Is: errors.Is(err, errcode.ErrSessionNotFound) holds
// for any error carrying that code.
var (
	ErrInvalidRequest      = &Error{Code: InvalidRequest}
	ErrUnknownOp           = &Error{Code: UnknownOp}
	ErrInvalidPath         = &Error{Code: InvalidPath}
	ErrNotFound            = &Error{Code: NotFound}
	ErrSessionNotFound     = &Error{Code: SessionNotFound}
	ErrAlreadyExists       = &Error{Code: AlreadyExists}
	ErrPayloadTooLarge     = &Error{Code: PayloadTooLarge}
	ErrExecTimeout         = &Error{Code: ExecTimeout}
	ErrRuntime             = &Error{Code: RuntimeError}
	ErrConcurrencyConflict = &Error{Code: ConcurrencyConflict}
	ErrUnavailable         = &Error{Code: Unavailable}
	ErrInvalidState        = &Error{Code: InvalidState}
	ErrNoCapacity          = &Error{Code: NoCapacity}
	ErrInternal            = &Error{Code: Internal}
	ErrImageNotFound       = &Error{Code: ImageNotFound}
	ErrInvalidArchive      = &Error{Code: InvalidArchive}
	ErrSnapshotNotFound    = &Error{Code: SnapshotNotFound}
	ErrSnapshotCorrupt     = &Error{Code: SnapshotCorrupt}
	ErrUnsupportedVersion  = &Error{Code: UnsupportedVersion}
	ErrQuotaExceeded       = &Error{Code: QuotaExceeded}
	ErrPolicyDenied        = &Error{Code: PolicyDenied}
	ErrPermissionDenied    = &Error{Code: PermissionDenied}
	ErrSessionMoved        = &Error{Code: SessionMoved}
)

// ErrStorageQuotaExceeded matches any storage_quota_exceeded error.
var ErrStorageQuotaExceeded = &Error{Code: StorageQuotaExceeded}
