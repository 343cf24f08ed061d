package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// Client is the node's end of the supervisor's calls on one connection:
// exec, processes and file operations on a sandbox whose workspace root
// (inside the container) is root. Everything read from a supervisor is
// the sandbox's word: bounded, checked, and at worst a misreport about the
// sandbox itself. The node's lexical path checks (runtime.Rel against the
// root) come before every call.
type Client struct {
	conn *Conn
	root string
}

// NewClient returns the client of the supervisor on conn, whose sandbox's
// workspace root is root.
func NewClient(conn *Conn, root string) *Client { return &Client{conn: conn, root: root} }

// Limits of what the node takes from a supervisor.
const (
	// processOutputMax bounds the output a process holds for its reader;
	// past it the copying waits for the reader, and so (through the
	// stream's window) does the program.
	processOutputMax = 1 << 20
	// stdinWait bounds a write to a process's stdin: a process that does
	// not read it holds a writer this long at most.
	stdinWait = 20 * time.Second
	// maxListOutput bounds a listing.
	maxListOutput = 64 << 20
	// maxSignal is the highest signal number Linux has (SIGRTMAX).
	maxSignal = 64
)

// timeoutGrace is how long past an exec's own timeout the node waits for
// the supervisor to report it before it gives the call up itself.
const timeoutGrace = 10 * time.Second

// maxMessage bounds the message of an error a supervisor reports.
const maxMessage = 512

// supCodes are the error codes a supervisor may report; any other is
// runtime_error.
var supCodes = map[errcode.Code]bool{
	errcode.InvalidRequest: true, errcode.InvalidPath: true, errcode.NotFound: true,
	errcode.AlreadyExists: true, errcode.PayloadTooLarge: true, errcode.ExecTimeout: true,
	errcode.InvalidState: true,
}

// ErrDenied is what a file operation through the supervisor returns when
// the sandbox's user may not do it: the caller does it through the Docker
// API, whose archive endpoints act with the daemon's rights, as file
// operations always have on this runtime. (A supervisor that claims it
// for everything only slows its own sandbox down.)
var ErrDenied = errors.New("the sandbox's user may not do this")

// supErr maps a failed stream (the connection ended, a violation) onto a
// typed error.
func supErr(op string, err error) error {
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return errcode.Wrap(errcode.Unavailable, err, op)
	case errors.Is(err, ErrProtocol):
		return errcode.Wrap(errcode.RuntimeError, err, op+": the sandbox's supervisor broke the protocol")
	}
	return errcode.Wrap(errcode.RuntimeError, err, op+": the sandbox's supervisor failed")
}

// decodeResult decodes a Result frame's payload into res and its error.
func decodeResult(op string, payload []byte) (ResultMsg, error) {
	var res ResultMsg
	if err := json.Unmarshal(payload, &res); err != nil {
		return res, errcode.New(errcode.RuntimeError, "%s: the sandbox's supervisor sent a malformed result", op)
	}
	if res.Code == "" {
		return res, nil
	}
	if res.Denied {
		return res, ErrDenied
	}
	msg := res.Message
	if len(msg) > maxMessage {
		msg = msg[:maxMessage] + "..."
	}
	code := errcode.Code(res.Code)
	if !supCodes[code] {
		return res, errcode.New(errcode.RuntimeError, "%s: the sandbox's supervisor reported %.64q: %s", op, res.Code, msg)
	}
	return res, errcode.New(code, "%s", msg)
}

// Configure sends the supervisor on c a configure call with env (the
// environment its commands get from now on) and waits for its result.
func Configure(ctx context.Context, c *Conn, env map[string]string) error {
	b, _ := json.Marshal(CallMsg{Op: OpConfigure, Env: env})
	st, err := c.Open(ctx, b)
	if err != nil {
		return err
	}
	_, err = finish(ctx, st)
	return err
}

// finish reads a stream to its Result, dropping any data.
func finish(ctx context.Context, st *Stream) (ResultMsg, error) {
	return finishOp(ctx, st, "supervisor")
}

// open opens a call on the supervisor's connection.
func (c *Client) open(ctx context.Context, call CallMsg) (*Stream, error) {
	b, err := json.Marshal(call)
	if err != nil {
		return nil, errcode.Wrap(errcode.InvalidRequest, err, call.Op)
	}
	st, err := c.conn.Open(ctx, b)
	if err != nil {
		return nil, supErr(call.Op, err)
	}
	return st, nil
}

// Exec runs spec through the supervisor with each output stream kept up
// to maxOut bytes (see runtime.Sandbox.Exec for the errors).
func (c *Client) Exec(ctx context.Context, spec runtime.ExecSpec, maxOut int) (runtime.ExecResult, error) {
	if _, err := runtime.Rel(c.root, spec.Cwd); err != nil && spec.Cwd != "" {
		return runtime.ExecResult{}, err
	}
	st, err := c.open(ctx, CallMsg{
		Op: OpExec, Argv: spec.Argv, Env: spec.Env, Cwd: spec.Cwd, TimeoutMS: spec.Timeout.Milliseconds(),
		Changes: spec.Changes,
	})
	if err != nil {
		return runtime.ExecResult{}, err
	}
	tctx, cancel := ctx, context.CancelFunc(func() {})
	if spec.Timeout > 0 {
		tctx, cancel = context.WithTimeout(ctx, spec.Timeout+timeoutGrace)
	}
	defer cancel()
	stdout := &runtime.CappedBuffer{Max: maxOut}
	stderr := &runtime.CappedBuffer{Max: maxOut}
	outW, errW := runtime.TeeOf(stdout, false, spec.Output), runtime.TeeOf(stderr, true, spec.Output)
	res := func() runtime.ExecResult {
		return runtime.ExecResult{
			Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), StdoutBytes: stdout.Total(), StderrBytes: stderr.Total(),
			StdoutTruncated: stdout.Truncated(), StderrTruncated: stderr.Truncated(),
		}
	}
	for {
		f, err := st.Recv(tctx)
		if err != nil {
			st.Abandon()
			switch {
			case ctx.Err() != nil:
				return res(), errcode.Wrap(errcode.Unavailable, ctx.Err(), "exec")
			case tctx.Err() != nil:
				return res(), errcode.New(errcode.ExecTimeout, "exec: the command ran past its timeout of %s", spec.Timeout)
			}
			return res(), supErr("exec", err)
		}
		switch f.Type {
		case Data:
			_, _ = outW.Write(f.Payload)
		case Stderr:
			_, _ = errW.Write(f.Payload)
		case Result:
			r, err := decodeResult("exec", f.Payload)
			out := res()
			out.ExitCode, out.Changes = r.ExitCode, r.Changes
			return out, err
		}
	}
}

// ReadTo reads a file of at most limit bytes through the supervisor into
// w and returns its size and permission bits; ErrDenied when the
// sandbox's user may not read it.
func (c *Client) ReadTo(ctx context.Context, p string, w io.Writer, limit int64) (int64, fs.FileMode, error) {
	if _, err := runtime.Rel(c.root, p); err != nil {
		return 0, 0, err
	}
	st, err := c.open(ctx, CallMsg{Op: OpRead, Path: p, Limit: limit})
	if err != nil {
		return 0, 0, err
	}
	var n int64
	var werr error
	for {
		f, err := st.Recv(ctx)
		if err != nil {
			st.Abandon()
			return n, 0, supErr("read", err)
		}
		switch f.Type {
		case Data:
			n += int64(len(f.Payload))
			if n > limit {
				st.Abandon()
				return n, 0, errcode.New(errcode.RuntimeError, "read: the sandbox's supervisor sent more than the %d bytes asked for", limit)
			}
			if werr == nil {
				_, werr = w.Write(f.Payload)
			}
		case Result:
			r, err := decodeResult("read", f.Payload)
			switch {
			case errors.Is(err, ErrDenied) && n > 0:
				return n, 0, errcode.New(errcode.RuntimeError, "read: the sandbox's supervisor refused a file it had sent part of")
			case err != nil:
				return n, 0, err
			case werr != nil:
				return n, 0, werr
			case r.Size != n:
				return n, 0, errcode.New(errcode.RuntimeError, "read: the sandbox's supervisor sent %d bytes of a file of %d", n, r.Size)
			}
			return n, fs.FileMode(r.Mode).Perm(), nil
		}
	}
}

// WriteFrom writes a file of size bytes from src through the supervisor;
// when the sandbox's user may not, a *DeniedWrite (matching ErrDenied)
// carries the content to write another way.
func (c *Client) WriteFrom(ctx context.Context, p string, src io.Reader, size int64, mode fs.FileMode) error {
	_, err := c.WriteFromChanges(ctx, p, src, size, mode, false)
	return err
}

// WriteFromChanges is WriteFrom that, with changes, returns what the
// write changed as the supervisor reports it (nil from one too old to).
func (c *Client) WriteFromChanges(ctx context.Context, p string, src io.Reader, size int64, mode fs.FileMode, changes bool) (_ *commands.Changes, err error) {
	if _, err := runtime.Rel(c.root, p); err != nil {
		return nil, err
	}
	st, err := c.open(ctx, CallMsg{Op: OpWrite, Path: p, Size: size, Mode: uint32(mode.Perm()), Changes: changes})
	if err != nil {
		return nil, err
	}
	buf := make([]byte, min(int64(Chunk), max(size, 1)))
	var sent int64
	// head keeps what was sent while it fits in the window: a supervisor
	// refuses (ErrDenied) before it takes any data, so that much at most
	// is replayed to the Docker API
	// (and the chunk read but not sent when it answered) to the Docker API.
	var head bytes.Buffer
	var unsent []byte
	defer func() {
		if denied := errors.Is(err, ErrDenied); denied {
			err = &DeniedWrite{Replay: io.MultiReader(bytes.NewReader(head.Bytes()), bytes.NewReader(unsent), src)}
		}
	}()
	for sent < size {
		k, rerr := io.ReadFull(src, buf[:min(int64(len(buf)), size-sent)])
		if k > 0 {
			if err := st.Send(ctx, Data, buf[:k]); err != nil {
				if errors.Is(err, ErrFinished) {
					unsent = buf[:k]
					break // it answered early: its result says why
				}
				st.Abandon()
				return nil, supErr("write", err)
			}
			sent += int64(k)
			if sent <= Window {
				head.Write(buf[:k])
			}
		}
		if rerr != nil {
			st.Abandon()
			if ctx.Err() != nil {
				return nil, errcode.Wrap(errcode.Unavailable, ctx.Err(), "write")
			}
			return nil, errcode.Wrap(errcode.InvalidRequest, rerr, fmt.Sprintf("write: the content ended after %d of %d bytes", sent, size))
		}
	}
	if err := st.Send(ctx, EOF, nil); err != nil && !errors.Is(err, ErrFinished) {
		st.Abandon()
		return nil, supErr("write", err)
	}
	res, err := finishOp(ctx, st, "write")
	if errors.Is(err, ErrDenied) && sent > Window {
		return nil, errcode.New(errcode.RuntimeError, "write: the sandbox's supervisor refused a file it had taken data of")
	}
	return res.Changes, err
}

// DeniedWrite is a write the supervisor refused (ErrDenied), with the
// content to write another way (the Docker API) instead.
type DeniedWrite struct {
	// Replay reads the whole content: what the supervisor took, then
	// the rest of the source.
	Replay io.Reader
}

// Error says the write was refused, as ErrDenied does.
func (d *DeniedWrite) Error() string { return ErrDenied.Error() }

// Unwrap returns ErrDenied.
func (d *DeniedWrite) Unwrap() error { return ErrDenied }

// finishOp is finish with op's name in its errors.
func finishOp(ctx context.Context, st *Stream, op string) (ResultMsg, error) {
	for {
		f, err := st.Recv(ctx)
		if err != nil {
			st.Abandon()
			return ResultMsg{}, supErr(op, err)
		}
		if f.Type == Result {
			return decodeResult(op, f.Payload)
		}
	}
}

// List lists a directory (or a file's own entry) through the supervisor,
// sorted by name; ErrDenied when the sandbox's user may not.
func (c *Client) List(ctx context.Context, p string) ([]commands.Entry, error) {
	if _, err := runtime.Rel(c.root, p); err != nil {
		return nil, err
	}
	st, err := c.open(ctx, CallMsg{Op: OpList, Path: p})
	if err != nil {
		return nil, err
	}
	var body bytes.Buffer
	for {
		f, err := st.Recv(ctx)
		if err != nil {
			st.Abandon()
			return nil, supErr("ls", err)
		}
		switch f.Type {
		case Data:
			if body.Len()+len(f.Payload) > maxListOutput {
				st.Abandon()
				return nil, errcode.New(errcode.RuntimeError, "ls: the sandbox's supervisor sent a listing over %d bytes", maxListOutput)
			}
			body.Write(f.Payload)
		case Result:
			if _, err := decodeResult("ls", f.Payload); err != nil {
				return nil, err
			}
			var entries []commands.Entry
			if err := json.Unmarshal(body.Bytes(), &entries); err != nil {
				return nil, errcode.New(errcode.RuntimeError, "ls: the sandbox's supervisor sent a malformed listing")
			}
			for _, e := range entries {
				if e.Name == "" || e.Name == "." || e.Name == ".." || strings.ContainsAny(e.Name, "/\x00") || len(e.Name) > runtime.MaxNameBytes {
					return nil, errcode.New(errcode.RuntimeError, "ls: the sandbox's supervisor sent an entry named %.64q", e.Name)
				}
			}
			slices.SortFunc(entries, func(a, b commands.Entry) int { return strings.Compare(a.Name, b.Name) })
			return entries, nil
		}
	}
}

// Mkdir makes a directory (and with parents its missing parents) through
// the supervisor; ErrDenied when the sandbox's user may not.
func (c *Client) Mkdir(ctx context.Context, p string, parents bool) error {
	_, err := c.simple(ctx, CallMsg{Op: OpMkdir, Path: p, Parents: parents})
	return err
}

// MkdirChanges is Mkdir that returns the directories it made, as the
// supervisor reports them (nil from one too old to).
func (c *Client) MkdirChanges(ctx context.Context, p string, parents bool) (*commands.Changes, error) {
	res, err := c.simple(ctx, CallMsg{Op: OpMkdir, Path: p, Parents: parents, Changes: true})
	return res.Changes, err
}

// Remove removes a path (a whole tree when recursive) through the
// supervisor; ErrDenied when the sandbox's user may not.
func (c *Client) Remove(ctx context.Context, p string, recursive bool) error {
	_, err := c.simple(ctx, CallMsg{Op: OpRemove, Path: p, Recursive: recursive})
	return err
}

// RemoveChanges is Remove that returns the paths it removed, as the
// supervisor reports them (nil from one too old to).
func (c *Client) RemoveChanges(ctx context.Context, p string, recursive bool) (*commands.Changes, error) {
	res, err := c.simple(ctx, CallMsg{Op: OpRemove, Path: p, Recursive: recursive, Changes: true})
	return res.Changes, err
}

// simple runs a call whose answer is only its result (rm, mkdir).
func (c *Client) simple(ctx context.Context, call CallMsg) (ResultMsg, error) {
	rel, err := runtime.Rel(c.root, call.Path)
	if err != nil {
		return ResultMsg{}, err
	}
	if call.Op == OpRemove && rel == "." {
		return ResultMsg{}, errcode.New(errcode.InvalidPath, "rm: the workspace root cannot be removed")
	}
	st, err := c.open(ctx, call)
	if err != nil {
		return ResultMsg{}, err
	}
	return finishOp(ctx, st, call.Op)
}

// process is a process the supervisor runs. One goroutine (pump)
// moves its output from the stream into a bounded buffer that Read
// drains, and takes its exit from the Result.
type process struct {
	st   *Stream
	tty  bool
	out  runtime.OutPipe
	done chan struct{} // closed once the stream has ended
	code int           // exit code, once done
	// changes is what the process changed, once done (when it asked)
	changes *commands.Changes
	err     error // why the stream ended other than by a Result, once done
}

// StartProcess starts a process through the supervisor: it returns once
// the supervisor says it runs. The caller must Close the process.
func (c *Client) StartProcess(ctx context.Context, spec runtime.ProcessSpec) (runtime.Process, error) {
	if _, err := runtime.Rel(c.root, spec.Cwd); err != nil && spec.Cwd != "" {
		return nil, err
	}
	rows, cols := spec.Rows, spec.Cols
	if spec.TTY && (rows == 0 || cols == 0) {
		rows, cols = 24, 80
	}
	env := spec.Env
	if spec.TTY && env["TERM"] == "" {
		env = mapsWith(env, "TERM", "xterm")
	}
	st, err := c.open(ctx, CallMsg{
		Op: OpProcess, Argv: spec.Argv, Env: env, Cwd: spec.Cwd, TTY: spec.TTY, Rows: rows, Cols: cols,
		Changes: spec.Changes,
	})
	if err != nil {
		return nil, err
	}
	f, err := st.Recv(ctx)
	switch {
	case err != nil:
		st.Abandon()
		return nil, supErr("proc start", err)
	case f.Type == Result:
		_, err := decodeResult("proc start", f.Payload)
		if err == nil {
			err = errcode.New(errcode.RuntimeError, "proc start: the sandbox's supervisor ended the process before starting it")
		}
		return nil, err
	case f.Type != Ctl:
		st.Abandon()
		return nil, errcode.New(errcode.RuntimeError, "proc start: the sandbox's supervisor sent %s before saying the process started", f.Type)
	}
	p := &process{st: st, tty: spec.TTY, done: make(chan struct{})}
	p.out.Init(processOutputMax)
	go p.pump() // ends when the stream ends; Close abandons it
	return p, nil
}

// mapsWith returns a copy of m with k set to v.
func mapsWith(m map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for mk, mv := range m {
		out[mk] = mv
	}
	out[k] = v
	return out
}

func (p *process) pump() {
	defer close(p.done)
	for {
		f, err := p.st.Recv(context.Background()) // the stream's own end (Result, conn end, Close) ends this
		if err != nil {
			p.code, p.err = -1, supErr("proc", err)
			if errors.Is(err, ErrAbandoned) {
				p.err = runtime.ErrProcessClosed // Close ran
			}
			p.out.Finish(p.err)
			return
		}
		switch f.Type {
		case Data:
			if _, err := p.out.Write(f.Payload); err != nil {
				p.st.Abandon() // closed: nobody reads any more
			}
		case Result:
			r, err := decodeResult("proc", f.Payload)
			p.code, p.err, p.changes = r.ExitCode, err, r.Changes
			p.out.Finish(nil)
			return
		}
	}
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Read reads the process's output.
func (p *process) Read(b []byte) (int, error) { return p.out.Read(b) }

// Write writes to stdin; after the process has exited it is invalid_state.
func (p *process) Write(b []byte) (int, error) {
	if p.exited() {
		return 0, runtime.ExitedError("write")
	}
	n := 0
	for len(b) > 0 {
		k := min(len(b), Chunk)
		ctx, cancel := context.WithTimeout(context.Background(), stdinWait)
		err := p.st.Send(ctx, Data, b[:k])
		cancel()
		if err != nil {
			if p.exited() || errors.Is(err, ErrFinished) {
				return n, runtime.ExitedError("write")
			}
			return n, supErr("proc write", err)
		}
		n += k
		b = b[k:]
	}
	return n, nil
}

// CloseStdin ends stdin.
func (p *process) CloseStdin() error {
	if p.exited() {
		return nil
	}
	if err := p.st.Send(context.Background(), EOF, nil); err != nil && !errors.Is(err, ErrFinished) {
		return supErr("proc", err)
	}
	return nil
}

func (p *process) control(c ControlMsg) error {
	if p.exited() {
		if c.Signal == 0 {
			return runtime.ExitedError("resize")
		}
		return nil // signalling a process that has exited is not an error
	}
	b, _ := json.Marshal(c)
	if err := p.st.Send(context.Background(), Ctl, b); err != nil && !errors.Is(err, ErrFinished) {
		return supErr("proc", err)
	}
	return nil
}

// Resize sets the terminal's size; without a TTY it is invalid_request.
func (p *process) Resize(rows, cols uint16) error {
	if !p.tty {
		return errcode.New(errcode.InvalidRequest, "resize: the process has no terminal")
	}
	if rows == 0 || cols == 0 {
		return errcode.New(errcode.InvalidRequest, "resize: rows and cols must be positive")
	}
	return p.control(ControlMsg{Rows: rows, Cols: cols})
}

// Signal signals the process's group.
func (p *process) Signal(sig syscall.Signal) error {
	if sig <= 0 || sig > maxSignal {
		return errcode.New(errcode.InvalidRequest, "signal %d is not a signal", sig)
	}
	return p.control(ControlMsg{Signal: int(sig)})
}

// Wait waits for the exit code.
func (p *process) Wait(ctx context.Context) (int, error) {
	select {
	case <-p.done:
		return p.code, p.err
	case <-ctx.Done():
		return 0, errcode.Wrap(errcode.Unavailable, ctx.Err(), "proc wait")
	}
}

// Changes returns what the process changed in the workspace, once it has
// exited and its supervisor reported it; nil before, or when none was.
func (p *process) Changes() *commands.Changes {
	if !p.exited() {
		return nil
	}
	return p.changes
}

// Close kills what is left of the process and frees its buffer.
func (p *process) Close() error {
	p.out.Close() // first: a pending Read gets os.ErrClosed, not the stream's end
	p.st.Abandon()
	return nil
}
