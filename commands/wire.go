package commands

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/paddock-dev/paddock/errcode"
)

// Limits of the wire. Messages stay well under the NATS default max payload
// (1 MiB) so that headers and JSON overhead never push a reply over it.
const (
	// MaxRequestBytes is the largest command body a server accepts.
	MaxRequestBytes = 1 << 20
	// MaxReplyBytes is the largest reply a server sends: a result that
	// would encode larger fails with payload_too_large instead of being
	// dropped by NATS.
	MaxReplyBytes = 1<<20 - 4<<10
	// InlineLimit is the largest file content carried inside a read reply or
	// a write request. Larger files travel through a temporary object of the
	// workspace bucket (WriteArgs.Upload, ReadResult.Download).
	InlineLimit = 512 << 10
	// MaxFileBytes bounds a file read or written through the object store.
	MaxFileBytes = 8 << 30
	// MaxOutputBytes is the most stdout (and, separately, stderr) an exec
	// reply carries; more is counted and flagged truncated.
	MaxOutputBytes = 256 << 10
)

// Request is the body of every command.
type Request struct {
	// Version is the contract version the client speaks, "MAJOR.MINOR"
	// (empty: 1.0). See the compatibility rule at ContractMajor.
	Version string `json:"version,omitempty"`
	// CommandID identifies the command for retries and audit; the client
	// sets a fresh UUID when the caller gives none. It names one op on one
	// session: a retry with the same id gets the first outcome and runs
	// nothing; the same id for another op is invalid_request.
	CommandID string `json:"command_id,omitempty"`
	// TraceID and ParentSpanID link the command's events to the caller's trace.
	TraceID      string `json:"trace_id,omitempty"`
	ParentSpanID string `json:"parent_span_id,omitempty"`
	// Actor names who sent the command (an agent, a user), for audit.
	Actor string `json:"actor,omitempty"`
	// Args holds the op's arguments (CreateArgs, ExecArgs, ...).
	Args json.RawMessage `json:"args,omitempty"`
}

// MaxTraceLen bounds trace_id, parent_span_id and actor.
const MaxTraceLen = 128

// Reply is the body of every answer: either Result or Error is set.
type Reply struct {
	// Version is the contract version of the server that answered.
	Version string          `json:"version"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *WireError      `json:"error,omitempty"`
	// Replayed is set on the answer to a retried command id whose first
	// reply the node no longer holds (it restarted, or the session moved):
	// the outcome is rebuilt from the operation's finish event, so what
	// events do not record (exec output beyond the capture policy, a
	// read's content) is absent. Nothing ran again.
	Replayed bool `json:"replayed,omitempty"`
}

// WireError is an error as it crosses the wire.
type WireError struct {
	Code      errcode.Code `json:"code"`
	Message   string       `json:"message"`
	Retryable bool         `json:"retryable"`
}

// Err turns a wire error back into an *errcode.Error.
func (w *WireError) Err() error {
	return &errcode.Error{Code: w.Code, Message: w.Message}
}

// ErrorReply encodes err as a reply. Only an *errcode.Error's code and
// message cross the wire (never its cause); any other error is reported as
// internal with a fixed message, so the caller must log it.
func ErrorReply(err error) []byte {
	var e *errcode.Error
	if !errors.As(err, &e) {
		e = &errcode.Error{Code: errcode.Internal, Message: "internal error"}
	}
	b, _ := json.Marshal(Reply{Version: Version, Error: &WireError{Code: e.Code, Message: e.Message, Retryable: e.Code.Retryable()}})
	return b
}

// ResultReply encodes v as a successful reply. A result that would make
// the reply larger than MaxReplyBytes is payload_too_large.
func ResultReply(v any) ([]byte, error) {
	res, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode result: %w", err)
	}
	// What json.Marshal of a Reply writes, without validating and
	// compacting the result again (it is json.Marshal's own output: a
	// streaming exec's large replies spent most of their time there).
	b := make([]byte, 0, len(res)+40)
	b = append(b, `{"version":"`+Version+`","result":`...)
	b = append(b, res...)
	b = append(b, '}')
	if len(b) > MaxReplyBytes {
		return nil, errcode.New(errcode.PayloadTooLarge, "the result encodes to %d bytes, over the reply limit of %d", len(b), MaxReplyBytes)
	}
	return b, nil
}

// envelope is a Request with the members it does not know.
type envelope struct {
	Request
	Unknown jsontext.Value `json:",embed"`
}

// DecodeRequest decodes a command body and, when args is not nil, its args
// into args (a pointer). It refuses, as invalid_request: malformed JSON,
// invalid UTF-8, duplicate member names at any depth, trailing data, values
// of the wrong type or out of range, a command id that is not a subject
// token, and (unless the request says it is of a newer minor version)
// unknown members. A body over MaxRequestBytes is payload_too_large, an
// unknown major version unsupported_version.
func DecodeRequest(data []byte, args any) (Request, error) {
	var env envelope
	if len(data) > MaxRequestBytes {
		return env.Request, errcode.New(errcode.PayloadTooLarge, "request of %d bytes exceeds %d", len(data), MaxRequestBytes)
	}
	if len(data) == 0 {
		data = []byte("{}")
	}
	if err := jsonv2.Unmarshal(data, &env); err != nil {
		return env.Request, decodeError(err, "")
	}
	req := env.Request
	v, err := ParseVersion(req.Version)
	if err != nil {
		return req, err
	}
	if err := v.Check(); err != nil {
		return req, err
	}
	strict := v.Strict()
	if strict && len(env.Unknown) > 0 {
		return req, unknownMembers(env.Unknown, "")
	}
	if req.CommandID != "" {
		if err := CheckToken("command_id", req.CommandID); err != nil {
			return req, err
		}
	}
	for _, f := range []struct{ name, v string }{{"trace_id", req.TraceID}, {"parent_span_id", req.ParentSpanID}, {"actor", req.Actor}} {
		if err := checkText(f.name, f.v, MaxTraceLen); err != nil {
			return req, err
		}
	}
	if args == nil {
		return req, nil
	}
	if len(req.Args) == 0 || string(req.Args) == "null" {
		return req, nil
	}
	if err := jsonv2.Unmarshal(req.Args, args, jsonv2.RejectUnknownMembers(strict)); err != nil {
		return req, decodeError(err, "/args")
	}
	return req, nil
}

// unknownMembers names the members of obj (a JSON object) in an error.
func unknownMembers(obj jsontext.Value, at string) error {
	var m map[string]jsontext.Value
	_ = jsonv2.Unmarshal(obj, &m)
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, at+"/"+k)
	}
	return errcode.New(errcode.InvalidRequest, "unknown field(s) %q (this server speaks contract %s)", names, Version)
}

// decodeError turns a decoding error into an invalid_request error that
// says where and what, in JSON terms; at prefixes the JSON pointer.
func decodeError(err error, at string) error {
	var se *jsonv2.SemanticError
	var sy *jsontext.SyntacticError
	switch {
	case errors.As(err, &sy):
		if errors.Is(sy.Err, jsontext.ErrDuplicateName) {
			return errcode.New(errcode.InvalidRequest, "duplicate field %q", at+string(sy.JSONPointer))
		}
		return errcode.New(errcode.InvalidRequest, "malformed JSON at byte %d: %v", sy.ByteOffset, sy.Err)
	case errors.As(err, &se):
		where := at + string(se.JSONPointer)
		if errors.Is(se.Err, jsonv2.ErrUnknownName) {
			return errcode.New(errcode.InvalidRequest, "unknown field %q (this server speaks contract %s)", where, Version)
		}
		if where == "" {
			where = "/"
		}
		msg := fmt.Sprintf("field %q: want %s", where, jsonKindOf(se.GoType))
		if se.JSONKind != 0 {
			msg += ", got " + kindName(se.JSONKind)
		}
		if se.Err != nil {
			msg += " (" + se.Err.Error() + ")"
		}
		return errcode.New(errcode.InvalidRequest, "%s", msg)
	}
	return errcode.New(errcode.InvalidRequest, "malformed request")
}

// jsonKindOf names what JSON a Go type takes, for error messages.
func jsonKindOf(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer in range"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a value"
}

func kindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 'f', 't':
		return "a boolean"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "another value"
}

// checkText returns invalid_request unless s has at most max bytes and no
// control characters.
func checkText(what, s string, max int) error {
	if len(s) > max {
		return errcode.New(errcode.InvalidRequest, "%s is longer than %d bytes", what, max)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return errcode.New(errcode.InvalidRequest, "%s has a control character", what)
		}
	}
	return nil
}
