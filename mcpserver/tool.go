package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
)

// ToolError is the structured content of a tool's error result.
type ToolError struct {
	Error commands.WireError `json:"error"`
}

// schemaOptions map the types jsonschema-go cannot infer: raw JSON (an
// event's data) is any JSON value.
var schemaOptions = &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
	reflect.TypeFor[json.RawMessage](): {},
}}

// handler is a tool's body: it returns its typed result and a short text
// for the model, or an error (an *errcode.Error, ideally).
type handler[In, Out any] func(ctx context.Context, in In) (Out, string, error)

// addTool registers a tool whose input and output schemas are inferred
// from In and Out (descriptions from their jsonschema tags). Arguments are
// decoded strictly (an unknown member is invalid_request, as the engine's
// own decoder has it); the result carries Out as structured content and
// text; an error becomes an error result (toolError).
func addTool[In, Out any](s *mcp.Server, name, description string, h handler[In, Out]) {
	in, err := jsonschema.For[In](schemaOptions)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: input schema of %s: %v", name, err)) // a programming error, found by every test
	}
	out, err := jsonschema.For[Out](schemaOptions)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: output schema of %s: %v", name, err))
	}
	tool := &mcp.Tool{Name: name, Description: description, InputSchema: in, OutputSchema: out}
	s.AddTool(tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args In
		if err := decodeArgs(req.Params.Arguments, &args); err != nil {
			return toolError(err), nil
		}
		res, text, err := h(ctx, args)
		if err != nil {
			return toolError(err), nil
		}
		b, err := json.Marshal(res)
		if err != nil {
			return toolError(errcode.Wrap(errcode.Internal, err, "encode the result")), nil
		}
		return &mcp.CallToolResult{
			Content:           []mcp.Content{&mcp.TextContent{Text: text}},
			StructuredContent: json.RawMessage(b),
		}, nil
	})
}

// decodeArgs decodes a tool's arguments into v, refusing unknown members
// and trailing data; no arguments decode as {}.
func decodeArgs(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errcode.New(errcode.InvalidRequest, "arguments: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errcode.New(errcode.InvalidRequest, "arguments: data after the object")
	}
	return nil
}

// toolError is err as an MCP tool error: its code and message (never the
// wrapped cause, which may name internals) in the text and the structured
// content, with the code's retryable flag. An error without a code is
// internal.
func toolError(err error) *mcp.CallToolResult {
	var e *errcode.Error
	w := commands.WireError{Code: errcode.Internal, Message: "internal error"}
	if errors.As(err, &e) {
		w = commands.WireError{Code: e.Code, Message: e.Message, Retryable: e.Code.Retryable()}
	} else if errors.Is(err, context.DeadlineExceeded) {
		w = commands.WireError{Code: errcode.Unavailable, Message: "the tool call timed out", Retryable: errcode.Unavailable.Retryable()}
	}
	b, _ := json.Marshal(ToolError{Error: w}) // a WireError always encodes
	return &mcp.CallToolResult{
		IsError:           true,
		Content:           []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s: %s", w.Code, w.Message)}},
		StructuredContent: json.RawMessage(b),
	}
}
