package mcpserver

import (
	"context"
	"encoding/base64"
	"fmt"
	"io/fs"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
)

// Bounds of what one tool call moves, within the command contract's.
const (
	// MaxFileBytes is the most a sandbox_read returns or a sandbox_write
	// takes: the contract's inline limit (commands.InlineLimit), so a
	// file moves in one command, and its base64 fits a request body
	// (MaxBodyBytes). Larger files are the CLI's (engine sandbox read,
	// write), which streams them.
	MaxFileBytes = commands.InlineLimit
	// DefaultOutputBytes caps each of an exec's stdout and stderr when
	// the call names no max_output_bytes; commands.MaxOutputBytes is the
	// most it may ask for.
	DefaultOutputBytes = 64 << 10
	// DefaultEvents and MaxEvents bound one sandbox_events page.
	DefaultEvents = 100
	MaxEvents     = 1000
)

// Identity is who a Server acts as.
type Identity struct {
	// Name names the identity in logs (its credentials' name).
	Name string
	// Client sends the identity's commands, on a connection made with its
	// credentials; its tenant is the identity's.
	Client *client.Client
	// Events reads the tenant's events for sandbox_events (nil: the tool
	// answers permission_denied; a client identity may not read the
	// stream, an auditor's may).
	Events EventSource
}

// Version is the server's version in the MCP handshake.
var Version = "dev"

// New returns an MCP server whose tools act as id.
func New(id Identity) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "paddock", Title: "Paddock sandboxes", Version: Version}, &mcp.ServerOptions{
		Instructions: "Paddock sandboxes: sandbox_create makes a session (a sandboxed workspace) and returns its session_id; " +
			"sandbox_exec runs commands in it, sandbox_read/sandbox_write/sandbox_ls work on its files (paths relative to the workspace), " +
			"sandbox_fork branches it, sandbox_events shows its audit history, sandbox_delete removes it when done.",
	})
	t := tools{id: id}
	addTool(s, "sandbox_create", "Create and start a sandbox session; returns its session_id.", t.create)
	addTool(s, "sandbox_exec", "Run a command in a session (argv, or shell through /bin/sh -c); returns its exit code and output. A non-zero exit is a result, not an error.", t.exec)
	addTool(s, "sandbox_read", fmt.Sprintf("Read a file of a session's workspace (at most %d bytes).", MaxFileBytes), t.read)
	addTool(s, "sandbox_write", fmt.Sprintf("Write a whole file of a session's workspace, creating missing parent directories (at most %d bytes).", MaxFileBytes), t.write)
	addTool(s, "sandbox_ls", "List a directory of a session's workspace, a page at a time.", t.ls)
	addTool(s, "sandbox_fork", "Fork a session into n children with its workspace as it is now (or at a snapshot); returns the children's session ids.", t.fork)
	addTool(s, "sandbox_events", "A session's audit events (who did what, when, with what outcome), a page at a time.", t.events)
	addTool(s, "sandbox_shutdown", "Shut a session's sandbox down, keeping its history.", t.shutdown)
	addTool(s, "sandbox_delete", "Shut a session down and delete it.", t.delete)
	return s
}

type tools struct{ id Identity }

// CreateInput is sandbox_create's arguments.
type CreateInput struct {
	Image       string            `json:"image,omitempty" jsonschema:"container image (default: the operator's default image)"`
	Runtime     string            `json:"runtime,omitempty" jsonschema:"runtime: docker or local (default: the node's)"`
	Env         map[string]string `json:"env,omitempty" jsonschema:"environment variables of every command"`
	Labels      map[string]string `json:"labels,omitempty" jsonschema:"labels to find the session by"`
	Network     bool              `json:"network,omitempty" jsonschema:"give the sandbox network access (the operator's policy decides)"`
	CPUs        float64           `json:"cpus,omitempty" jsonschema:"CPU limit"`
	MemoryBytes int64             `json:"memory_bytes,omitempty" jsonschema:"memory limit in bytes"`
}

func (t tools) create(ctx context.Context, in CreateInput) (commands.CreateResult, string, error) {
	res, err := t.id.Client.Create(ctx, commands.CreateArgs{
		Image: in.Image, Runtime: in.Runtime, Env: in.Env, Labels: in.Labels,
		Network: in.Network, CPUs: in.CPUs, MemoryBytes: in.MemoryBytes,
	})
	if err != nil {
		return res, "", err
	}
	return res, fmt.Sprintf("session %s %s on node %s (%s)", res.SessionID, res.Status, res.Node, res.Runtime), nil
}

// ExecInput is sandbox_exec's arguments.
type ExecInput struct {
	SessionID      string            `json:"session_id" jsonschema:"the session"`
	Argv           []string          `json:"argv,omitempty" jsonschema:"the command and its arguments (give argv or shell)"`
	Shell          string            `json:"shell,omitempty" jsonschema:"a shell command line, run with /bin/sh -c (give argv or shell)"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"working directory, relative to the workspace (default: its root)"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"extra environment variables"`
	TimeoutMS      int64             `json:"timeout_ms,omitempty" jsonschema:"kill the command after this many milliseconds (default: the node's, 10 minutes)"`
	MaxOutputBytes int               `json:"max_output_bytes,omitempty" jsonschema:"cap of each of stdout and stderr in bytes (default 65536, at most 262144)"`
}

func (t tools) exec(ctx context.Context, in ExecInput) (commands.ExecResult, string, error) {
	args := commands.ExecArgs{Argv: in.Argv, Shell: in.Shell, Cwd: in.Cwd, Env: in.Env, TimeoutMS: in.TimeoutMS, MaxOutputBytes: in.MaxOutputBytes}
	if args.MaxOutputBytes == 0 {
		args.MaxOutputBytes = DefaultOutputBytes
	}
	res, err := t.id.Client.Exec(ctx, in.SessionID, args)
	if err != nil {
		return res, "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "exit code %d (%.0f ms)", res.ExitCode, res.DurationMS)
	for _, o := range []struct {
		name, text, enc string
		n               int64
		cut             bool
	}{{"stdout", res.Stdout, res.StdoutEncoding, res.StdoutBytes, res.StdoutTruncated}, {"stderr", res.Stderr, res.StderrEncoding, res.StderrBytes, res.StderrTruncated}} {
		if o.n == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n--- %s (%d bytes", o.name, o.n)
		if o.cut {
			b.WriteString(", truncated")
		}
		if o.enc != "" {
			b.WriteString(", " + o.enc)
		}
		b.WriteString(")\n" + o.text)
	}
	return res, b.String(), nil
}

// PathInput names a path of a session's workspace.
type PathInput struct {
	SessionID string `json:"session_id" jsonschema:"the session"`
	Path      string `json:"path" jsonschema:"a path relative to the workspace root"`
}

// ReadOutput is sandbox_read's result.
type ReadOutput struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	// Content is the text itself when the file is UTF-8, else base64 with
	// Encoding "base64" (the rule of exec output).
	Content  string `json:"content"`
	Encoding string `json:"encoding,omitempty"`
}

func (t tools) read(ctx context.Context, in PathInput) (ReadOutput, string, error) {
	w := &capped{max: MaxFileBytes}
	n, err := t.id.Client.ReadTo(ctx, in.SessionID, in.Path, w)
	if w.over {
		return ReadOutput{}, "", errcode.New(errcode.PayloadTooLarge, "%s is larger than the %d bytes sandbox_read returns; read parts of it with sandbox_exec (head, tail, sed -n)", in.Path, MaxFileBytes)
	}
	if err != nil {
		return ReadOutput{}, "", err
	}
	text, enc := commands.EncodeOutput(w.buf)
	out := ReadOutput{Path: in.Path, Size: n, Content: text, Encoding: enc}
	if enc != "" {
		return out, fmt.Sprintf("%s: %d bytes, not text (base64 in the structured content)", in.Path, n), nil
	}
	return out, text, nil
}

// capped is a writer that keeps at most max bytes and fails beyond.
type capped struct {
	buf  []byte
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if len(c.buf)+len(p) > c.max {
		c.over = true
		return 0, errcode.New(errcode.PayloadTooLarge, "over %d bytes", c.max)
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

// WriteInput is sandbox_write's arguments.
type WriteInput struct {
	SessionID string `json:"session_id" jsonschema:"the session"`
	Path      string `json:"path" jsonschema:"a path relative to the workspace root"`
	Content   string `json:"content" jsonschema:"the file's whole content"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"text (default) or base64"`
	Mode      uint32 `json:"mode,omitempty" jsonschema:"permission bits as an integer (default 420, that is 0644)"`
}

func (t tools) write(ctx context.Context, in WriteInput) (commands.WriteResult, string, error) {
	var data []byte
	switch in.Encoding {
	case "", "text":
		data = []byte(in.Content)
	case "base64":
		b, err := base64.StdEncoding.DecodeString(in.Content)
		if err != nil {
			return commands.WriteResult{}, "", errcode.New(errcode.InvalidRequest, "content is not base64: %v", err)
		}
		data = b
	default:
		return commands.WriteResult{}, "", errcode.New(errcode.InvalidRequest, "encoding %q: want text or base64", in.Encoding)
	}
	if len(data) > MaxFileBytes {
		return commands.WriteResult{}, "", errcode.New(errcode.PayloadTooLarge, "content of %d bytes is more than the %d sandbox_write takes", len(data), MaxFileBytes)
	}
	if in.Mode&^0o7777 != 0 {
		return commands.WriteResult{}, "", errcode.New(errcode.InvalidRequest, "mode %o has bits outside 07777", in.Mode)
	}
	res, err := t.id.Client.WriteFile(ctx, in.SessionID, in.Path, data, fs.FileMode(in.Mode))
	if err != nil {
		return res, "", err
	}
	return res, fmt.Sprintf("wrote %d bytes to %s", res.Size, in.Path), nil
}

// LsInput is sandbox_ls's arguments.
type LsInput struct {
	SessionID string `json:"session_id" jsonschema:"the session"`
	Path      string `json:"path,omitempty" jsonschema:"a directory relative to the workspace root (default: the root)"`
	Limit     int    `json:"limit,omitempty" jsonschema:"most entries in this page (default and most 1000)"`
	After     string `json:"after,omitempty" jsonschema:"continue after this name: the next of the previous page"`
}

func (t tools) ls(ctx context.Context, in LsInput) (commands.LsResult, string, error) {
	if in.Path == "" {
		in.Path = "."
	}
	res, err := t.id.Client.ListPage(ctx, in.SessionID, commands.LsArgs{Path: in.Path, Limit: in.Limit, After: in.After})
	if err != nil {
		return res, "", err
	}
	if res.Entries == nil {
		res.Entries = []commands.Entry{}
	}
	var b strings.Builder
	for _, e := range res.Entries {
		name := e.Name
		if e.Type == "dir" {
			name += "/"
		}
		fmt.Fprintf(&b, "%s\t%d\n", name, e.Size)
	}
	if res.Next != "" {
		fmt.Fprintf(&b, "(more after %q)\n", res.Next)
	}
	return res, b.String(), nil
}

// ForkInput is sandbox_fork's arguments.
type ForkInput struct {
	SessionID  string `json:"session_id" jsonschema:"the parent session"`
	N          int    `json:"n,omitempty" jsonschema:"how many children (default 1)"`
	SnapshotID string `json:"snapshot_id,omitempty" jsonschema:"fork from this recorded snapshot instead of the workspace as it is now"`
	AtSeq      uint64 `json:"at_seq,omitempty" jsonschema:"fork from the last snapshot recorded at or before this event seq"`
}

func (t tools) fork(ctx context.Context, in ForkInput) (commands.ForkResult, string, error) {
	if in.N == 0 {
		in.N = 1
	}
	res, err := t.id.Client.Fork(ctx, in.SessionID, commands.ForkRequest{N: in.N, SnapshotID: in.SnapshotID, AtSeq: in.AtSeq})
	if err != nil {
		return res, "", err
	}
	if res.Children == nil {
		res.Children = []string{}
	}
	text := fmt.Sprintf("forked %s at snapshot %s into %s", in.SessionID, res.Parent.Snapshot, strings.Join(res.Children, ", "))
	if len(res.Failed) > 0 {
		text += fmt.Sprintf(" (%d children failed)", len(res.Failed))
	}
	return res, text, nil
}

// SessionInput names a session.
type SessionInput struct {
	SessionID string `json:"session_id" jsonschema:"the session"`
}

// DoneOutput is the result of a tool that returns nothing but success.
type DoneOutput struct {
	SessionID string `json:"session_id"`
	Done      bool   `json:"done"`
}

func (t tools) shutdown(ctx context.Context, in SessionInput) (DoneOutput, string, error) {
	if err := t.id.Client.Shutdown(ctx, in.SessionID); err != nil {
		return DoneOutput{}, "", err
	}
	return DoneOutput{SessionID: in.SessionID, Done: true}, "shut down " + in.SessionID, nil
}

func (t tools) delete(ctx context.Context, in SessionInput) (DoneOutput, string, error) {
	if err := t.id.Client.Delete(ctx, in.SessionID); err != nil {
		return DoneOutput{}, "", err
	}
	return DoneOutput{SessionID: in.SessionID, Done: true}, "deleted " + in.SessionID, nil
}
