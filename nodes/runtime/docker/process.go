package docker

import (
	"context"
	"io"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/versions"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// A process is an exec with stdin attached that outlives the call that
// starts it. It runs through the exec wrapper (see wrapper.go), so it has
// a session of its own whose id is the wrapper's pid, and what it leaves
// in that session dies with it:
//
//	StartProcess ─► pid known ─► running ──program exits──► wrapper kills the session ─► output ends ─► Wait: exit code
//	                                 │
//	                                 └──Close / SIGKILL──► killScript kills the session ─► output ends
//
// One goroutine per process copies the attached stream (raw with a TTY,
// else demultiplexed into one merged stream) into a bounded buffer that
// Read drains; it ends when the stream ends or Close closes the stream.

const (
	// procOutMax bounds the output a process holds for its reader; past
	// it the copying waits, and so (through the engine) does the program.
	// Up to it a program can exit with its output unread and Wait return.
	procOutMax = 1 << 20
	// resizeWait bounds a Resize, which has no ctx of its own.
	resizeWait = 10 * time.Second
	// maxSignal is the highest signal number Linux has (SIGRTMAX).
	maxSignal = 64
)

var _ runtime.Processes = (*Sandbox)(nil)

// StartProcess starts spec.Argv in the container with stdin attached, as
// an exec through the wrapper: in a session of its own (and so its own
// process group), as spec.User or the sandbox's user, in spec.Cwd or the
// workspace root. With spec.TTY it gets a terminal of spec.Rows×spec.Cols
// (24×80 for zeros) and TERM=xterm unless spec.Env sets TERM; without, its
// stdout and stderr are merged into one output. It returns once the
// wrapper has reported its pid, so nothing written to the process is
// echoed before it runs (on engines before API 1.42, which ignore a size
// given at create, the size is set by a resize just after the start: a
// program that reads it at once may see the engine's default). The caller
// must Close the process.
//
// A program that is not found exits 127, one that cannot be executed 126
// (the shell's message in the output). Errors: invalid_request for an
// empty argv or a bad env name, invalid_path for a cwd outside the
// workspace, not_found for a missing cwd, invalid_request for a cwd that is
// not a directory or a user the image does not know, invalid_state unless
// the container runs, unavailable (wrapping ctx's error) when ctx ended
// before the process was under way, runtime_error when the engine fails.
func (s *Sandbox) StartProcess(ctx context.Context, spec runtime.ProcessSpec) (runtime.Process, error) {
	if len(spec.Argv) == 0 {
		return nil, errcode.New(errcode.InvalidRequest, "process: empty argv")
	}
	if err := checkEnv(spec.Env); err != nil {
		return nil, err
	}
	if err := s.checkNotGone("process"); err != nil {
		return nil, err
	}
	return s.ops(spec.User).startProcess(ctx, spec)
}

// apiStartProcess is StartProcess through the Docker API.
func (s *Sandbox) apiStartProcess(ctx context.Context, spec runtime.ProcessSpec) (runtime.Process, error) {
	cwd, err := s.cwd(ctx, spec.Cwd)
	if err != nil {
		return nil, err
	}
	env := s.execEnv(spec.Env)
	user := spec.User
	if user == "" {
		user = s.user
	}
	opts := container.ExecOptions{
		User: user, Tty: spec.TTY, AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Env: env, WorkingDir: cwd,
		Cmd: append([]string{"/bin/sh", "-c", processWrapperScript, "paddock-exec"}, spec.Argv...),
	}
	var size *[2]uint
	if spec.TTY {
		if _, ok := spec.Env["TERM"]; !ok {
			opts.Env = append(opts.Env, "TERM=xterm")
		}
		rows, cols := spec.Rows, spec.Cols
		if rows == 0 {
			rows = 24
		}
		if cols == 0 {
			cols = 80
		}
		size = &[2]uint{uint(rows), uint(cols)}
		opts.ConsoleSize = size
	}
	s.life.RLock()
	created, err := s.r.cli.ContainerExecCreate(ctx, s.id, opts)
	var att types.HijackedResponse
	if err == nil {
		att, err = s.r.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{Tty: spec.TTY, ConsoleSize: size}) // starts it
	}
	s.life.RUnlock()
	if err != nil {
		return nil, s.execErr(err)
	}

	p := &process{s: s, execID: created.ID, user: user, tty: spec.TTY, att: att, done: make(chan struct{})}
	p.out.Init(procOutMax)
	p.hdr = newPidHeader(&p.out)
	go p.copyOut() // ends when the stream ends or Close closes it

	resized := make(chan struct{})
	rctx, stopResize := context.WithCancel(ctx)
	defer func() { stopResize(); <-resized }()
	if spec.TTY && versions.LessThan(s.r.cli.ClientVersion(), "1.42") {
		// Engines before API 1.42 ignore ConsoleSize: size the terminal
		// while the wrapper starts. The engine holds the call until the
		// exec has started (up to 10s, for an exec that never does: hence
		// a goroutine, which this function ends and waits for). A failure
		// leaves the engine's default size, not worth failing the start.
		go func() {
			defer close(resized)
			_ = p.resize(rctx, size[0], size[1])
		}()
	} else {
		close(resized)
	}
	select {
	case <-p.hdr.known:
	case <-ctx.Done():
		_ = p.Close()
		return nil, errcode.Wrap(errcode.Unavailable, ctx.Err(), "process: start cancelled")
	}
	if p.hdr.pid() != 0 {
		<-resized // the terminal has its size before the caller talks to it
		return p, nil
	}
	// The wrapper did not run: the stream is the engine's message and
	// ends with it.
	select {
	case <-p.done:
	case <-ctx.Done():
	}
	msg := p.out.Peek()
	_ = p.Close()
	return nil, s.notStarted(ctx, spec.User, runtime.ExecResult{Stdout: msg})
}

// process is a running StartProcess. Its methods are safe for concurrent
// use (Read from one goroutine at a time).
type process struct {
	s      *Sandbox
	execID string
	user   string
	tty    bool
	att    types.HijackedResponse
	hdr    *pidHeader      // takes the wrapper's pid line off the output
	out    runtime.OutPipe // the output, for Read
	done   chan struct{}

	writeMu sync.Mutex // serialises writes to att.Conn

	closeOnce sync.Once
	closeErr  error

	waitMu sync.Mutex // guards the fields below; held across the inspect
	waited bool
	code   int
	err    error
}

// copyOut copies the attached stream into p.out (stdout and stderr merged
// in the order their frames arrive) until it ends or Close closes it (or
// p.out), then ends the output and closes p.done.
func (p *process) copyOut() {
	defer close(p.done)
	var err error
	if p.tty {
		_, err = io.Copy(p.hdr, p.att.Reader)
	} else {
		// The pid line is stdout's first. The engine copies stdout and
		// stderr apart, so stderr (the shell's "not found") may come
		// first: it bypasses the header.
		_, err = stdcopy.StdCopy(p.hdr, &p.out, p.att.Reader)
	}
	p.hdr.end()
	if err != nil {
		err = errcode.Wrap(errcode.Unavailable, err, "process: the output stream broke")
	}
	p.out.Finish(err)
}

// exited reports whether the output has ended: the wrapper exited (or
// Close ran).
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Read reads the process's output (see runtime.Process). It returns io.EOF
// once the output has ended and all of it was read, and an invalid_state
// error wrapping os.ErrClosed after Close.
func (p *process) Read(b []byte) (int, error) { return p.out.Read(b) }

// Write writes to the process's stdin. It fails with invalid_state once
// the process has exited or is closed, and with unavailable when the
// connection to the engine fails.
func (p *process) Write(b []byte) (int, error) {
	if p.exited() {
		return 0, runtime.ExitedError("write")
	}
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	n, err := p.att.Conn.Write(b)
	if err != nil {
		if p.exited() {
			return n, runtime.ExitedError("write")
		}
		return n, errcode.Wrap(errcode.Unavailable, err, "process: write stdin")
	}
	return n, nil
}

// CloseStdin ends the process's stdin: it closes the writing side of the
// connection, or with a TTY writes an end-of-file character (^D). Errors:
// as Write's.
func (p *process) CloseStdin() error {
	if p.tty {
		_, err := p.Write([]byte{0x04})
		return err
	}
	if p.exited() {
		return runtime.ExitedError("close stdin")
	}
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	if err := p.att.CloseWrite(); err != nil {
		if p.exited() {
			return runtime.ExitedError("close stdin")
		}
		return errcode.Wrap(errcode.Unavailable, err, "process: close stdin")
	}
	return nil
}

// Resize sets the terminal's size. Errors: invalid_request without a TTY
// or for a zero size, invalid_state once the process has exited,
// runtime_error (unavailable when the engine does not answer within 10s)
// when the engine fails.
func (p *process) Resize(rows, cols uint16) error {
	if !p.tty {
		return errcode.New(errcode.InvalidRequest, "process: resize needs a TTY")
	}
	if rows == 0 || cols == 0 {
		return errcode.New(errcode.InvalidRequest, "process: resize to %dx%d: rows and cols must be positive", rows, cols)
	}
	// Resize has no ctx of its own: the call is bounded here.
	ctx, cancel := context.WithTimeout(context.Background(), resizeWait)
	defer cancel()
	return p.resize(ctx, uint(rows), uint(cols))
}

func (p *process) resize(ctx context.Context, rows, cols uint) error {
	if p.exited() {
		return runtime.ExitedError("resize")
	}
	err := p.s.r.cli.ContainerExecResize(ctx, p.execID, container.ResizeOptions{Height: rows, Width: cols})
	if err != nil {
		if p.exited() {
			return runtime.ExitedError("resize")
		}
		return p.s.r.wrap(err, "resize terminal")
	}
	return nil
}

// Signal sends sig to every process of the process's session (a second
// exec as the same user, see signalScript); the wrapper itself gets only
// SIGCONT. SIGKILL kills the session as Close does, forks included. A
// process that has exited (or is closed) is not an error. Errors:
// invalid_request for a signal number out of 1..64, runtime_error when the
// signal could not be sent.
func (p *process) Signal(sig syscall.Signal) error {
	if sig < 1 || sig > maxSignal {
		return errcode.New(errcode.InvalidRequest, "process: no signal %d", int(sig))
	}
	if p.exited() {
		return nil
	}
	if sig == syscall.SIGKILL {
		if err := p.s.stopTree(p.user, p.hdr); err != nil && !p.exited() {
			return errcode.Wrap(errcode.RuntimeError, err, "process: its processes could not all be killed")
		}
		return nil
	}
	// Signal has no ctx of its own: the exec is bounded here.
	ctx, cancel := context.WithTimeout(context.Background(), killWait)
	defer cancel()
	if err := p.s.signalSession(ctx, p.user, p.hdr.pid(), sig); err != nil && !p.exited() {
		return errcode.Wrap(errcode.RuntimeError, err, "process: signal "+strconv.Itoa(int(sig))+" could not be sent")
	}
	return nil
}

// Wait waits until the output has ended (the process exited and its
// session was emptied, or Close ran) and returns the exit code: 128+n for
// a signal n, 137 after Close killed it. The result is kept: later calls
// return it again. Output that nobody reads holds the process up past a
// buffer of 1 MiB, as a pipe would. Errors: unavailable (wrapping ctx's
// error) when ctx ends first, invalid_state when the sandbox stopped or
// was removed while the process ran, runtime_error when the engine fails.
func (p *process) Wait(ctx context.Context) (int, error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		return 0, errcode.Wrap(errcode.Unavailable, ctx.Err(), "process: wait cancelled")
	}
	p.waitMu.Lock()
	defer p.waitMu.Unlock()
	if p.waited {
		return p.code, p.err
	}
	code, err := p.s.exitCode(ctx, p.execID)
	if err == nil && code != 0 && !p.s.runningNow(ctx) {
		err = errcode.New(errcode.InvalidState, "process: the sandbox stopped while the process ran")
	}
	if err != nil && ctx.Err() != nil {
		// Not the process's result: a later Wait asks again.
		return 0, errcode.Wrap(errcode.Unavailable, ctx.Err(), "process: wait cancelled")
	}
	p.waited, p.code, p.err = true, code, err
	return code, err
}

// Close kills whatever is left of the process's session (unless it has
// exited), closes the connection and waits for the output's copying to
// end; Read then fails. It is idempotent and safe to call concurrently
// with the other methods. It returns runtime_error when the session could
// not be killed (within 20s), the same error on every call.
func (p *process) Close() error {
	p.closeOnce.Do(func() {
		if !p.exited() {
			if err := p.s.stopTree(p.user, p.hdr); err != nil {
				p.closeErr = errcode.Wrap(errcode.RuntimeError, err, "process: its processes could not all be killed")
			}
		}
		p.out.Close()
		p.att.Close()
		<-p.done
	})
	return p.closeErr
}

// signalSession runs signalScript for the session of pid in the
// container; the wrapper (pid) gets only SIGCONT.
func (s *Sandbox) signalSession(ctx context.Context, user string, pid int, sig syscall.Signal) error {
	if pid == 0 {
		return nil // the wrapper never started: nothing to signal
	}
	all := "0"
	if sig == syscall.SIGCONT {
		all = "1"
	}
	return s.runHelper(ctx, user, "signalled", signalScript, "paddock-signal", strconv.Itoa(pid), strconv.Itoa(int(sig)), all)
}
