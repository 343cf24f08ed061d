package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
)

// Server is the supervisor's end: it serves the node's calls on the
// workspace it runs in, through the local runtime (os.Root confinement,
// process groups, ptys), inside the container that is the boundary.
type Server struct {
	cfg local.OpenConfig

	mu sync.Mutex // guards sb
	sb *local.Sandbox

	tunnels tunnels // the loopback listeners the node asked for
}

// NewServer opens the workspace cfg names. Errors: as local.Open's.
func NewServer(cfg local.OpenConfig) (*Server, error) {
	sb, err := local.Open(cfg)
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, sb: sb}, nil
}

func (srv *Server) sandbox() *local.Sandbox {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.sb
}

// Serve serves one connection to the node (after SendHello) until it ends,
// and then ends whatever its calls still run.
func (srv *Server) Serve(nc net.Conn) error {
	c := NewConn(nc, Options{OnCall: srv.handle})
	<-c.Done()
	err := c.Err()
	c.Close() // waits for the handlers, whose streams have ended
	return err
}

// ErrRunning is what Run returns at once when another supervisor serves
// the same socket.
var ErrRunning = errors.New("another supervisor serves this socket")

// Run dials the node's socket, says hello and serves, again and again
// (a node that restarts listens anew), until ctx ends. Waits between
// tries grow from 10 ms to 500 ms.
//
// One Run serves a socket at a time: it holds a lock on the socket's
// directory, and a second one returns ErrRunning at once. (The node takes
// the newest connection; two supervisors that each redial when displaced
// would displace each other for ever. A restart that the node asks for
// while the first one is still redialling is such a second one.)
func (srv *Server) Run(ctx context.Context, socket string) error {
	unlock, err := lockDir(filepath.Dir(socket))
	if err != nil {
		return err
	}
	defer unlock()
	wait := 10 * time.Millisecond
	for ctx.Err() == nil {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "unix", socket)
		if err == nil {
			if err = SendHello(nc, syscall.Getpid()); err == nil {
				wait = 10 * time.Millisecond
				stop := context.AfterFunc(ctx, func() { nc.Close() })
				_ = srv.Serve(nc)
				stop()
				continue
			}
			nc.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
	return ctx.Err()
}

// lockDir takes an exclusive lock on dir (flock on a close-on-exec
// descriptor: it goes with the process however it ends, and the commands
// the supervisor runs do not inherit it) and returns its release; a lock
// held elsewhere is ErrRunning. Where locks do not work it goes on
// unlocked.
func lockDir(dir string) (func(), error) {
	f, err := os.Open(dir)
	if err != nil {
		return func() {}, nil
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrRunning
		}
		return func() {}, nil
	}
	return func() { f.Close() }, nil
}

// handle serves one call.
func (srv *Server) handle(s *Stream, payload []byte) {
	ctx, cancel := context.WithCancel(context.Background()) // the stream's life, ended by Cancel below
	defer cancel()
	go func() { // ends with the call
		select {
		case <-s.Cancelled():
			cancel()
		case <-ctx.Done():
		}
	}()
	var call CallMsg
	if err := json.Unmarshal(payload, &call); err != nil {
		s.Finish(result(ResultMsg{}, errcode.New(errcode.InvalidRequest, "supervisor: malformed call: %v", err)))
		return
	}
	sb := srv.sandbox()
	var res ResultMsg
	var err error
	switch call.Op {
	case OpExec:
		res, err = srv.exec(ctx, sb, s, call)
	case OpRead:
		var n int64
		var mode fs.FileMode
		n, mode, err = sb.ReadFileTo(ctx, call.Path, s.Writer(ctx, Data), call.Limit)
		res.Size, res.Mode = n, uint32(mode)
	case OpWrite:
		src := &streamReader{s: s, ctx: ctx}
		if call.Changes {
			res.Changes, err = sb.WriteFileChanges(ctx, call.Path, src, call.Size, fs.FileMode(call.Mode))
		} else {
			err = sb.WriteFileFrom(ctx, call.Path, src, call.Size, fs.FileMode(call.Mode))
		}
	case OpList:
		var entries []byte
		list, lerr := sb.List(ctx, call.Path)
		err = lerr
		if err == nil {
			entries, err = json.Marshal(list)
		}
		if err == nil {
			_, err = s.Writer(ctx, Data).Write(entries)
		}
	case OpRemove:
		if call.Changes {
			res.Changes, err = sb.RemoveChanges(ctx, call.Path, call.Recursive)
		} else {
			err = sb.Remove(ctx, call.Path, call.Recursive)
		}
	case OpMkdir:
		if call.Changes {
			res.Changes, err = sb.MkdirChanges(ctx, call.Path, call.Parents)
		} else {
			err = sb.Mkdir(ctx, call.Path, call.Parents)
		}
	case OpProcess:
		res, err = srv.process(ctx, sb, s, call)
	case OpConfigure:
		err = srv.configure(call.Env)
	case OpDial, OpListen, OpAccept:
		err = srv.tunnel(ctx, s, call)
	default:
		err = errcode.New(errcode.UnknownOp, "supervisor: unknown op %q", call.Op)
	}
	s.Finish(result(res, err))
}

// result encodes res with err's code and message.
func result(res ResultMsg, err error) []byte {
	if err != nil {
		res.Code = string(errcode.Of(err))
		res.Message = strings.TrimPrefix(err.Error(), res.Code+": ")
		res.Denied = errors.Is(err, fs.ErrPermission)
	}
	b, _ := json.Marshal(res)
	return b
}

// configure adds env to every later command's environment: a pooled
// sandbox learns its session's variables when it is claimed.
func (srv *Server) configure(env map[string]string) error {
	cfg := srv.cfg
	cfg.Env = maps.Clone(cfg.Env)
	if cfg.Env == nil {
		cfg.Env = map[string]string{}
	}
	maps.Copy(cfg.Env, env)
	sb, err := local.Open(cfg)
	if err != nil {
		return err
	}
	srv.mu.Lock()
	old := srv.sb
	srv.sb, srv.cfg = sb, cfg
	srv.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // bounds the old one's end
	defer cancel()
	_ = old.Shutdown(ctx)
	return nil
}

func (srv *Server) exec(ctx context.Context, sb *local.Sandbox, s *Stream, call CallMsg) (ResultMsg, error) {
	out, errw := s.Writer(ctx, Data), s.Writer(ctx, Stderr)
	res, err := sb.Exec(ctx, runtime.ExecSpec{
		Argv: call.Argv, Env: call.Env, Cwd: call.Cwd, Timeout: time.Duration(call.TimeoutMS) * time.Millisecond,
		Changes:   call.Changes,
		MaxOutput: 1, // the node keeps the output; this end only streams it
		Output: func(stderr bool, p []byte) {
			if stderr {
				_, _ = errw.Write(p)
			} else {
				_, _ = out.Write(p)
			}
		},
	})
	return ResultMsg{ExitCode: res.ExitCode, Changes: res.Changes}, err
}

// process starts a process, says Started, then pumps its output out and
// the node's input, resizes and signals in until it has exited and its
// output is drained.
func (srv *Server) process(ctx context.Context, sb *local.Sandbox, s *Stream, call CallMsg) (ResultMsg, error) {
	p, err := sb.StartProcess(ctx, runtime.ProcessSpec{
		Argv: call.Argv, Env: call.Env, Cwd: call.Cwd, TTY: call.TTY, Rows: call.Rows, Cols: call.Cols,
		Changes: call.Changes,
	})
	if err != nil {
		return ResultMsg{}, err
	}
	defer p.Close()
	// Cancel (the node's Close) or the connection's end kills the process,
	// which also ends the Read below.
	stop := context.AfterFunc(ctx, func() { p.Close() })
	defer stop()
	started, _ := json.Marshal(ControlMsg{Started: true})
	if err := s.Send(ctx, Ctl, started); err != nil {
		return ResultMsg{}, err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	inCtx, stopIn := context.WithCancel(ctx)
	defer stopIn()
	term := call.TTY && local.OnGVisor() // see terminal.go
	wg.Go(func() { pumpIn(inCtx, s, p, term) })
	if _, err := io.Copy(s.Writer(ctx, Data), p); err != nil {
		return ResultMsg{}, err
	}
	code, err := p.Wait(ctx)
	res := ResultMsg{ExitCode: code}
	if pc, ok := p.(runtime.ProcessChanges); ok {
		res.Changes = pc.Changes()
	}
	return res, err
}

// pumpIn applies what the node sends to a process until ctx ends; term
// says the supervisor makes up for gVisor's terminal (terminal.go).
func pumpIn(ctx context.Context, s *Stream, p runtime.Process, term bool) {
	for {
		f, err := s.Recv(ctx)
		if err != nil {
			return
		}
		switch f.Type {
		case Data:
			if term {
				writeTerminal(p, f.Payload)
				continue
			}
			_, _ = p.Write(f.Payload)
		case EOF:
			_ = p.CloseStdin()
		case Ctl:
			var c ControlMsg
			if json.Unmarshal(f.Payload, &c) != nil {
				continue
			}
			if c.Signal > 0 {
				_ = p.Signal(syscall.Signal(c.Signal))
			}
			if c.Rows > 0 && c.Cols > 0 {
				_ = p.Resize(c.Rows, c.Cols)
			}
		}
	}
}

// streamReader reads a stream's Data frames until its EOF.
type streamReader struct {
	s   *Stream
	ctx context.Context
	buf []byte
	eof bool
}

func (r *streamReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.eof {
			return 0, io.EOF
		}
		f, err := r.s.Recv(r.ctx)
		if err != nil {
			return 0, err
		}
		switch f.Type {
		case Data:
			r.buf = f.Payload
		case EOF:
			r.eof = true
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}
