package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/tracing"
	"go.opentelemetry.io/otel/trace"
)

// Options configures a Client.
type Options struct {
	// Tenant scopes every command (default "default").
	Tenant string
	// Prefix of every subject (default sbx).
	Prefix string
	// Timeout bounds a command when ctx has no deadline (default 60s);
	// exec adds its own timeout to it.
	Timeout time.Duration
	// Actor is recorded in events as who sent the commands.
	Actor string
	// LivenessCheck is how often a session command that has waited that
	// long asks the engine whether the session's node is still up (a
	// lookup); when the engine has declared the node lost the command
	// ends with unavailable at once instead of waiting out its timeout
	// (default 2s; negative: never ask).
	LivenessCheck time.Duration
	// TracerProvider makes a span for every command the client sends,
	// whose trace context travels in the request's headers (nil: no
	// spans; a span context already in a call's ctx is still sent on).
	TracerProvider trace.TracerProvider
}

// Client sends commands. It is safe for concurrent use.
type Client struct {
	nc   *nats.Conn
	opts Options
	subj commands.Subjects
	tr   *tracing.Tracer
}

// New returns a client on nc. It fails if the tenant is not a valid
// subject token.
func New(nc *nats.Conn, opts Options) (*Client, error) {
	if opts.Tenant == "" {
		opts.Tenant = "default"
	}
	if err := commands.CheckToken("tenant", opts.Tenant); err != nil {
		return nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 60 * time.Second
	}
	if opts.LivenessCheck == 0 {
		opts.LivenessCheck = 2 * time.Second
	}
	return &Client{nc: nc, opts: opts, subj: commands.Subjects{Prefix: opts.Prefix}, tr: tracing.New(opts.TracerProvider)}, nil
}

// Tenant returns the client's tenant.
func (c *Client) Tenant() string { return c.opts.Tenant }

// CallOption sets per-command envelope fields.
type CallOption func(*commands.Request)

// WithCommandID sets the command id; a retry with the same id gets the
// first result instead of running the command twice.
func WithCommandID(id string) CallOption { return func(r *commands.Request) { r.CommandID = id } }

// WithTrace links the command's events to a trace.
func WithTrace(traceID, parentSpanID string) CallOption {
	return func(r *commands.Request) { r.TraceID, r.ParentSpanID = traceID, parentSpanID }
}

// Create creates and starts a session and returns where it runs.
func (c *Client) Create(ctx context.Context, spec commands.CreateArgs, opts ...CallOption) (commands.CreateResult, error) {
	var res commands.CreateResult
	if err := spec.Validate(); err != nil {
		return res, err
	}
	err := c.request(ctx, c.subj.Create(c.opts.Tenant), "", spec, &res, 0, opts)
	return res, err
}

// Do sends op with args to session id and decodes the result into out
// (which may be nil). It is the generic form of the typed methods.
func (c *Client) Do(ctx context.Context, id string, op commands.Op, args, out any, opts ...CallOption) error {
	return c.do(ctx, id, op, args, out, 0, opts)
}

func (c *Client) do(ctx context.Context, id string, op commands.Op, args, out any, extra time.Duration, opts []CallOption) error {
	if err := commands.CheckToken("session id", id); err != nil {
		return err
	}
	if err := commands.CheckToken("op", string(op)); err != nil {
		return err
	}
	return c.request(ctx, c.subj.Session(c.opts.Tenant, id, op), id, args, out, extra, opts)
}

// Exec runs a command and returns its exit code and output. A non-zero
// exit is not an error.
func (c *Client) Exec(ctx context.Context, id string, args commands.ExecArgs, opts ...CallOption) (commands.ExecResult, error) {
	var res commands.ExecResult
	if err := args.Validate(); err != nil {
		return res, err
	}
	extra := time.Duration(args.TimeoutMS) * time.Millisecond
	if extra == 0 {
		extra = 10 * time.Minute
	}
	err := c.do(ctx, id, commands.OpExec, args, &res, extra, opts)
	return res, err
}

// ReadFile returns a file's content.
func (c *Client) ReadFile(ctx context.Context, id, path string) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := c.ReadTo(ctx, id, path, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ReadTo streams a file's content to w and returns its size. A file over
// the inline limit comes through a temporary object of the workspace
// bucket, which the engine's transfer service streams to the client and
// deletes once read.
func (c *Client) ReadTo(ctx context.Context, id, path string, w io.Writer) (int64, error) {
	var res commands.ReadResult
	if err := c.do(ctx, id, commands.OpRead, commands.ReadArgs{Path: path}, &res, workspaceTimeout, nil); err != nil {
		return 0, err
	}
	if res.Download == "" {
		n, err := w.Write(res.Content)
		return int64(n), err
	}
	n, err := c.download(ctx, res.Download, w)
	if err == nil && n != res.Size {
		err = errcode.New(errcode.Unavailable, "read %s: got %d of %d bytes", path, n, res.Size)
	}
	return n, err
}

// WriteFile writes a whole file, creating missing parent directories.
// Content over the inline limit goes through the workspace bucket.
func (c *Client) WriteFile(ctx context.Context, id, path string, data []byte, mode fs.FileMode) (commands.WriteResult, error) {
	return c.WriteFrom(ctx, id, path, bytes.NewReader(data), mode)
}

// WriteFrom writes a whole file with the content of r, streamed: content
// over the inline limit is uploaded in chunks (through the engine's
// transfer service) to a temporary object of the workspace bucket that the
// node writes from and deletes.
func (c *Client) WriteFrom(ctx context.Context, id, path string, r io.Reader, mode fs.FileMode) (commands.WriteResult, error) {
	var res commands.WriteResult
	head := make([]byte, commands.InlineLimit+1)
	n, err := io.ReadFull(r, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return res, errcode.Wrap(errcode.InvalidRequest, err, "read content")
	}
	args := commands.WriteArgs{Path: path, Mode: uint32(mode)}
	if n <= commands.InlineLimit {
		args.Content = head[:n]
		if err := args.Validate(); err != nil {
			return res, err
		}
		err := c.do(ctx, id, commands.OpWrite, args, &res, 0, nil)
		return res, err
	}
	if err := commands.CheckToken("session id", id); err != nil {
		return res, err
	}
	name, size, err := c.upload(ctx, io.MultiReader(bytes.NewReader(head[:n]), r))
	if err != nil {
		return res, err
	}
	args.Upload, args.Size = name, size
	if err := args.Validate(); err != nil {
		c.discard(ctx, name)
		return res, err
	}
	if err := c.do(ctx, id, commands.OpWrite, args, &res, workspaceTimeout, nil); err != nil {
		c.discard(ctx, name)
		return res, err
	}
	return res, nil
}

// List returns all of a directory's entries sorted by name (a file lists
// itself), asking for as many pages as it takes.
func (c *Client) List(ctx context.Context, id, path string) ([]commands.Entry, error) {
	var out []commands.Entry
	args := commands.LsArgs{Path: path}
	for {
		res, err := c.ListPage(ctx, id, args)
		if err != nil {
			return out, err
		}
		out = append(out, res.Entries...)
		if res.Next == "" {
			return out, nil
		}
		args.After = res.Next
	}
}

// ListPage returns one page of a directory's entries: those named after
// args.After, at most args.Limit (0: the server's default).
func (c *Client) ListPage(ctx context.Context, id string, args commands.LsArgs) (commands.LsResult, error) {
	var res commands.LsResult
	if err := args.Validate(); err != nil {
		return res, err
	}
	err := c.do(ctx, id, commands.OpLs, args, &res, 0, nil)
	return res, err
}

// Remove removes a path; a non-empty directory needs recursive. A
// missing path is not_found, unless force is set (then it succeeds, as
// rm -f does).
func (c *Client) Remove(ctx context.Context, id, path string, recursive, force bool) error {
	return c.do(ctx, id, commands.OpRm, commands.RmArgs{Path: path, Recursive: recursive, Force: force}, nil, 0, nil)
}

// Mkdir makes a directory; parents makes missing parents too.
func (c *Client) Mkdir(ctx context.Context, id, path string, parents bool) error {
	return c.do(ctx, id, commands.OpMkdir, commands.MkdirArgs{Path: path, Parents: parents}, nil, 0, nil)
}

// Running reports whether the session can execute commands now.
func (c *Client) Running(ctx context.Context, id string) (bool, error) {
	var res commands.RunningResult
	err := c.do(ctx, id, commands.OpRunning, nil, &res, 0, nil)
	return res.Running, err
}

// Port returns an address that reaches port, one the session's create
// exposed, inside its running sandbox: a TCP listener on the node that
// serves the session. Ask again after a stop and start, or a resume: the
// address changes with the sandbox.
func (c *Client) Port(ctx context.Context, id string, port int) (commands.PortResult, error) {
	var res commands.PortResult
	err := c.do(ctx, id, commands.OpPort, commands.PortArgs{Port: port}, &res, 0, nil)
	return res, err
}

// Start starts a stopped session.
func (c *Client) Start(ctx context.Context, id string) error {
	return c.lifecycle(ctx, id, commands.OpStart)
}

// Stop stops a session, keeping its workspace.
func (c *Client) Stop(ctx context.Context, id string) error {
	return c.lifecycle(ctx, id, commands.OpStop)
}

// Shutdown tears down a session's runtime resources.
func (c *Client) Shutdown(ctx context.Context, id string) error {
	return c.lifecycle(ctx, id, commands.OpShutdown)
}

// Delete shuts a session down and forgets it. A session no node serves
// (lost, or shut down on a node that is gone) is deleted by the engine.
func (c *Client) Delete(ctx context.Context, id string) error {
	if err := commands.CheckToken("session id", id); err != nil {
		return err
	}
	err := c.request(ctx, c.subj.Session(c.opts.Tenant, id, commands.OpDelete), "", nil, nil, 0, nil)
	if !errors.Is(err, nats.ErrNoResponders) {
		return err
	}
	return c.request(ctx, c.subj.Delete(c.opts.Tenant), "", commands.DeleteRequest{SessionID: id}, nil, 0, nil)
}

func (c *Client) lifecycle(ctx context.Context, id string, op commands.Op) error {
	return c.do(ctx, id, op, nil, nil, 0, nil)
}

// Lookup asks the engine for a session's status and node.
func (c *Client) Lookup(ctx context.Context, id string) (commands.LookupResult, error) {
	var res commands.LookupResult
	err := c.request(ctx, c.subj.Lookup(c.opts.Tenant), "", commands.LookupArgs{SessionID: id}, &res, 0, nil)
	return res, err
}

func (c *Client) request(ctx context.Context, subj, session string, args, out any, extra time.Duration, opts []CallOption) (err error) {
	req := commands.Request{Version: commands.Version, CommandID: uuid.NewString(), Actor: c.opts.Actor}
	for _, o := range opts {
		o(&req)
	}
	ctx, span, _ := c.tr.Start(ctx, "paddock.client "+tracing.SubjectOp(subj), trace.SpanKindClient, req.TraceID, req.ParentSpanID,
		c.tr.ClientAttrs(c.opts.Tenant, session, req.CommandID)...)
	defer func() { tracing.End(span, string(errcode.Of(err)), err) }()
	hdr := tracing.Inject(ctx, nil)
	body, err := EncodeRequest(req, args)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.Timeout+extra)
		defer cancel()
	}
	if session != "" && c.opts.LivenessCheck > 0 {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		stop := c.watchNode(ctx, cancel, session)
		defer stop()
	}
	var rep commands.Reply
	for moved := 0; ; moved++ {
		msg, err := c.send(ctx, subj, hdr, body)
		if err != nil {
			if cause := context.Cause(ctx); errors.Is(cause, errNodeLost) {
				return cause
			}
			return c.transportError(ctx, subj, session, err)
		}
		if rep, err = DecodeReply(msg.Data); err != nil {
			return err
		}
		// A node that lost the session ran nothing and has let it go: the
		// same command, sent again, reaches the session where it is now
		// (or finds no responder, and the engine says why).
		if rep.Error == nil || rep.Error.Code != errcode.SessionMoved || moved == 2 {
			break
		}
	}
	return ReplyResult(rep, out)
}

// NoResponderGrace is how long a request that found no responder is sent
// again before the client gives up on it. Nothing received such a request,
// so sending it again is always safe; and a responder can be missing for a
// moment while the server reloads its accounts (adding a tenant drops the
// tenants' imports for milliseconds) or a node restarts.
const NoResponderGrace = time.Second

// send sends body on subj and returns the reply, sending it again while
// nobody answers, within NoResponderGrace and ctx.
func (c *Client) send(ctx context.Context, subj string, hdr nats.Header, body []byte) (*nats.Msg, error) {
	return Requester{Conn: c.nc, Resend: NoResponderGrace}.Send(ctx, subj, hdr, body)
}

// errNodeLost marks the error a command ends with when its session's
// node was declared lost while it waited.
var errNodeLost = errors.New("node lost")

// watchNode asks the engine every LivenessCheck, until stop, whether
// session is lost; when it is, it cancels the command with an unavailable
// error (retryable: once the session is resumed, send the command again).
func (c *Client) watchNode(ctx context.Context, cancel context.CancelCauseFunc, session string) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() { // owned by the command: stop ends it and waits
		defer close(finished)
		t := time.NewTicker(c.opts.LivenessCheck)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			lctx, lcancel := context.WithTimeout(ctx, c.opts.LivenessCheck)
			res, err := c.Lookup(lctx, session)
			lcancel()
			if err == nil && res.Status == "lost" {
				cancel(fmt.Errorf("%w: %w", errNodeLost, errcode.New(errcode.Unavailable,
					"session %s: its node %s was declared lost while the command ran; the command's outcome is unknown (the session's history records it as failed). Resume the session (automatic when the engine runs with --auto-resume lost), then send the command again", session, res.Node)))
				return
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

func (c *Client) transportError(ctx context.Context, subj, session string, err error) error {
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		return errcode.Wrap(errcode.PayloadTooLarge, err, "request")
	case errors.Is(err, nats.ErrNoResponders) && session != "":
		// Nobody serves the session: ask the engine why. A failed lookup
		// (no engine) leaves the answer at unavailable.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		res, lerr := c.Lookup(lctx, session)
		if errcode.Of(lerr) == errcode.SessionNotFound {
			return lerr
		}
		if lerr == nil && res.Status == "lost" {
			return errcode.New(errcode.Unavailable, "session %s was lost with node %s; resume it (automatic when the engine runs with --auto-resume lost), then send the command again", session, res.Node)
		}
		if lerr == nil {
			return errcode.New(errcode.Unavailable, "session %s (%s) is on node %s, which does not answer", session, res.Status, res.Node)
		}
		return errcode.Wrap(errcode.Unavailable, err, fmt.Sprintf("session %s does not answer", session))
	case errors.Is(err, nats.ErrNoResponders):
		return errcode.Wrap(errcode.Unavailable, err, "no engine serves "+subj)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return errcode.Wrap(errcode.Unavailable, err, "no reply on "+subj+" in time")
	default:
		return errcode.Wrap(errcode.Unavailable, err, "request "+subj)
	}
}
