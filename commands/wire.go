package commands

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/paddock-dev/paddock/errcode"
)

// Limits of the wire. Messages stay well under the NATS default max payload
// (1 MiB) so that headers and JSON overhead never push a reply over it.
const (
	// MaxRequestBytes is the largest command body a server accepts.
	MaxRequestBytes = 1 << 20
	// InlineLimit is the largest file content carried inside a read reply or
	// a write request. Larger files travel through a temporary object of the
	// workspace bucket (WriteArgs.Upload, ReadResult.Download).
	InlineLimit = 512 << 10
	// MaxFileBytes bounds a file read or written through the object store.
	MaxFileBytes = 8 << 30
	// MaxOutputBytes is the most stdout (and, separately, stderr) an exec
	// reply carries; more is truncated and flagged.
	MaxOutputBytes = 256 << 10
)

// Request is the body of every command.
type Request struct {
	// CommandID identifies the command for retries and audit; the client
	// sets a fresh UUID when the caller gives none.
	CommandID string `json:"command_id,omitempty"`
	// TraceID and ParentSpanID link the command's events to the caller's trace.
	TraceID      string `json:"trace_id,omitempty"`
	ParentSpanID string `json:"parent_span_id,omitempty"`
	// Actor names who sent the command (an agent, a user), for audit.
	Actor string `json:"actor,omitempty"`
	// Args holds the op's arguments (CreateArgs, ExecArgs, ...).
	Args json.RawMessage `json:"args,omitempty"`
}

// Reply is the body of every answer: either Result or Error is set.
type Reply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *WireError      `json:"error,omitempty"`
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

// ErrorReply encodes err as a reply. Errors without a code are reported as
// internal, with their text.
func ErrorReply(err error) []byte {
	var e *errcode.Error
	if !errors.As(err, &e) {
		e = &errcode.Error{Code: errcode.Internal, Message: err.Error()}
	}
	b, _ := json.Marshal(Reply{Error: &WireError{Code: e.Code, Message: e.Message, Retryable: e.Code.Retryable()}})
	return b
}

// ResultReply encodes v as a successful reply.
func ResultReply(v any) ([]byte, error) {
	res, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode result: %w", err)
	}
	return json.Marshal(Reply{Result: res})
}

// Decode decodes data into v strictly: unknown fields and trailing data are
// invalid_request errors. Empty data decodes as {}.
func Decode(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errcode.Wrap(errcode.InvalidRequest, err, "decode")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errcode.New(errcode.InvalidRequest, "decode: trailing data after the JSON value")
	}
	return nil
}

// DecodeRequest decodes a command body and its args into args, which must
// be a pointer. It checks the size bound first.
func DecodeRequest(data []byte, args any) (Request, error) {
	var req Request
	if len(data) > MaxRequestBytes {
		return req, errcode.New(errcode.PayloadTooLarge, "request of %d bytes exceeds %d", len(data), MaxRequestBytes)
	}
	if err := Decode(data, &req); err != nil {
		return req, err
	}
	if req.CommandID != "" {
		if err := CheckToken("command_id", req.CommandID); err != nil {
			return req, err
		}
	}
	if args != nil {
		if err := Decode(req.Args, args); err != nil {
			return req, err
		}
	}
	return req, nil
}
