package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/paddock-dev/paddock/errcode"
)

// TestToolError: an error result carries the code and message, never the
// wrapped cause (which may name internals); an error without a code is
// internal, a deadline unavailable (retryable).
func TestToolError(t *testing.T) {
	for _, c := range []struct {
		name      string
		err       error
		code      errcode.Code
		text      string
		retryable bool
	}{
		{"coded", errcode.New(errcode.SessionNotFound, "no session x"), errcode.SessionNotFound, "session_not_found: no session x", false},
		{"cause hidden", errcode.Wrap(errcode.Unavailable, errors.New("dial tcp 10.0.0.7:4222: secret-host"), "cannot reach Paddock"), errcode.Unavailable, "unavailable: cannot reach Paddock", true},
		{"wrapped twice", fmt.Errorf("read: %w", errcode.New(errcode.InvalidPath, "escapes")), errcode.InvalidPath, "invalid_path: escapes", false},
		{"uncoded", errors.New("nil pointer somewhere"), errcode.Internal, "internal: internal error", false},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), errcode.Unavailable, "unavailable: the tool call timed out", true},
	} {
		res := toolError(c.err)
		var te ToolError
		if err := json.Unmarshal(res.StructuredContent.(json.RawMessage), &te); err != nil {
			t.Fatal(err)
		}
		text := res.Content[0].(*mcp.TextContent).Text
		if !res.IsError || te.Error.Code != c.code || text != c.text || te.Error.Retryable != c.retryable || strings.Contains(text, "secret-host") {
			t.Errorf("%s: isError %t, %+v, text %q; want %s, %q, retryable %t", c.name, res.IsError, te.Error, text, c.code, c.text, c.retryable)
		}
	}
}

// FuzzDecodeArgs: any bytes decode into a tool's arguments or fail with
// invalid_request; nothing panics, and what decodes has no unknown member.
func FuzzDecodeArgs(f *testing.F) {
	for _, s := range []string{``, `null`, `{}`, `{"session_id":"s","argv":["ls"]}`, `{"session_id":"s"} {}`, `{"x":1}`, `[1]`, `{"argv":"ls"}`, `{"session_id":"s","env":{"A":"1"}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var in ExecInput
		err := decodeArgs(b, &in)
		if err != nil {
			if errcode.Of(err) != errcode.InvalidRequest {
				t.Fatalf("decodeArgs(%q) = %v; want invalid_request", b, err)
			}
			return
		}
		// What decoded re-encodes into something that decodes the same.
		again, _ := json.Marshal(in)
		var in2 ExecInput
		if err := decodeArgs(again, &in2); err != nil {
			t.Fatalf("re-decode of %s: %v", again, err)
		}
	})
}
