package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/creack/pty"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

var (
	_ runtime.Processes      = (*Sandbox)(nil)
	_ runtime.ProcessChanges = (*process)(nil)
)

// StartProcess starts a process in the workspace in a session of its own,
// with the environment an exec gets. With a TTY (a real pseudo-terminal,
// github.com/creack/pty) the terminal is its controlling terminal; without
// one its stdin is a pipe and its stdout and stderr share one pipe. When
// the process exits, whatever is left in its session is killed; Stop and
// Shutdown kill it with the sandbox's other processes. Errors: as Exec's.
func (s *Sandbox) StartProcess(ctx context.Context, spec runtime.ProcessSpec) (runtime.Process, error) {
	if len(spec.Argv) == 0 {
		return nil, errcode.New(errcode.InvalidRequest, "process: empty argv")
	}
	if spec.User != "" {
		return nil, errcode.New(errcode.InvalidRequest, "the local runtime runs processes as the node's user; it cannot run as %q", spec.User)
	}
	if err := s.checkRunning(); err != nil {
		return nil, err
	}
	cwd, err := s.cwd(spec.Cwd)
	if err != nil {
		return nil, err
	}
	extra := spec.Env
	if spec.TTY {
		extra = map[string]string{"TERM": "xterm"}
		for k, v := range spec.Env {
			extra[k] = v
		}
	}
	env := s.environ(extra, cwd)
	prog, ok := lookPath(spec.Argv[0], env)
	if !ok {
		return exited(spec.Argv[0], 127, "command not found"), nil
	}
	cmd := exec.Command(prog, spec.Argv[1:]...)
	cmd.Args[0] = spec.Argv[0]
	cmd.Err = nil // exec looked in the node's PATH; lookPath used the sandbox's
	cmd.Dir = cwd
	cmd.Env = env

	p := &process{tty: spec.TTY, exited: make(chan struct{})}
	var child []*os.File // the ends the child holds, closed once it has them
	if spec.TTY {
		master, slave, err := pty.Open()
		if err != nil {
			return nil, errcode.Wrap(errcode.RuntimeError, err, "process: open a pty")
		}
		rows, cols := spec.Rows, spec.Cols
		if rows == 0 || cols == 0 {
			rows, cols = 24, 80
		}
		if err := pty.Setsize(master, &pty.Winsize{Rows: rows, Cols: cols}); err != nil {
			master.Close()
			slave.Close()
			return nil, errcode.Wrap(errcode.RuntimeError, err, "process: size the pty")
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		p.out, p.in = master, master
		child = []*os.File{slave}
	} else {
		inR, inW, err := os.Pipe()
		if err != nil {
			return nil, errcode.Wrap(errcode.RuntimeError, err, "process: pipe")
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			inR.Close()
			inW.Close()
			return nil, errcode.Wrap(errcode.RuntimeError, err, "process: pipe")
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, outW
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		p.out, p.in = outR, inW
		child = []*os.File{inR, outW}
	}
	endChanges := s.beginChanges(spec.Changes)
	tracked, err := s.start(cmd)
	for _, f := range child {
		f.Close()
	}
	if err != nil {
		endChanges(ctx)
		p.out.Close()
		if p.in != p.out {
			p.in.Close()
		}
		var se *errcode.Error
		if errors.As(err, &se) {
			return nil, err
		}
		if errors.Is(err, os.ErrNotExist) {
			return exited(spec.Argv[0], 127, "command not found"), nil
		}
		return exited(spec.Argv[0], 126, err.Error()), nil
	}
	p.pid = cmd.Process.Pid
	go p.reap(s, cmd, tracked, endChanges) // ends when the process exits (Close kills it)
	return p, nil
}

// process is a local runtime.Process.
type process struct {
	tty bool
	pid int      // also its session and process group id
	out *os.File // the pty master, or the output pipe's read end
	in  *os.File // the pty master, or the stdin pipe's write end

	exited  chan struct{} // closed once reaped; code and changes are set then
	code    int
	changes *commands.Changes

	closeOnce sync.Once
}

// reap waits for the process, kills what it left in its session, and
// records its exit code.
func (p *process) reap(s *Sandbox, cmd *exec.Cmd, tracked *proc, endChanges func(context.Context) *commands.Changes) {
	_ = cmd.Wait()
	p.code = exitCode(cmd.ProcessState)
	killSession(p.pid, syscall.SIGKILL)
	s.finish(tracked)
	// The window's fence is bounded by the watcher's FenceWait.
	p.changes = endChanges(context.Background())
	close(p.exited)
}

// Changes returns what the process changed in the workspace once it has
// exited (ProcessSpec.Changes); nil before, or when nothing was watched.
func (p *process) Changes() *commands.Changes {
	select {
	case <-p.exited:
		return p.changes
	default:
		return nil
	}
}

// Read reads the process's output; the end of it (a pty master reads EIO
// once every holder of the terminal is gone; on gVisor, see readTerminal)
// is io.EOF.
func (p *process) Read(b []byte) (int, error) {
	if p.tty && OnGVisor() {
		return p.readTerminal(b)
	}
	n, err := p.out.Read(b)
	if err != nil && (errors.Is(err, syscall.EIO) || errors.Is(err, os.ErrClosed)) {
		err = io.EOF
	}
	return n, err
}

// Write writes to stdin.
func (p *process) Write(b []byte) (int, error) {
	select {
	case <-p.exited:
		return 0, errcode.New(errcode.InvalidState, "process: it has exited")
	default:
	}
	n, err := p.in.Write(b)
	if err != nil {
		return n, errcode.Wrap(errcode.InvalidState, err, "process: stdin is closed")
	}
	return n, nil
}

// CloseStdin ends stdin: the pipe is closed, a terminal gets ^D.
func (p *process) CloseStdin() error {
	if p.tty {
		_, err := p.Write([]byte{4})
		return err
	}
	if err := p.in.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return errcode.Wrap(errcode.RuntimeError, err, "process: close stdin")
	}
	return nil
}

// Resize sets the terminal's size.
func (p *process) Resize(rows, cols uint16) error {
	if !p.tty {
		return errcode.New(errcode.InvalidRequest, "process: it has no terminal to resize")
	}
	if rows == 0 || cols == 0 {
		return errcode.New(errcode.InvalidRequest, "process: a terminal of %dx%d", rows, cols)
	}
	if err := pty.Setsize(p.out, &pty.Winsize{Rows: rows, Cols: cols}); err != nil {
		return errcode.Wrap(errcode.InvalidState, err, "process: resize")
	}
	return nil
}

// Signal sends sig to every process of the process's session.
func (p *process) Signal(sig syscall.Signal) error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	killSession(p.pid, sig)
	return nil
}

// Wait waits for the exit.
func (p *process) Wait(ctx context.Context) (int, error) {
	select {
	case <-p.exited:
		return p.code, nil
	case <-ctx.Done():
		return 0, errcode.Wrap(errcode.Unavailable, ctx.Err(), "process: wait cancelled")
	}
}

// Close kills the session and closes the process's ends.
func (p *process) Close() error {
	p.closeOnce.Do(func() {
		select {
		case <-p.exited:
		default:
			killSession(p.pid, syscall.SIGKILL)
			<-p.exited // SIGKILL cannot be caught: the reap follows
		}
		p.out.Close()
		if p.in != p.out {
			p.in.Close()
		}
	})
	return nil
}

// killSession sends sig to the process group sid and to every process in
// session sid (a shell with job control puts its jobs in groups of their
// own).
func killSession(sid int, sig syscall.Signal) {
	_ = syscall.Kill(-sid, sig)
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == sid {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp session ...: comm may hold anything,
		// so the fields are counted from its closing parenthesis.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 3 && f[3] == strconv.Itoa(sid) {
			_ = syscall.Kill(pid, sig)
		}
	}
	if sig != syscall.SIGKILL {
		_ = syscall.Kill(sid, sig) // the leader may have left its group
	}
}

// exited is a process that could not start: it has exited with code and
// the reason as its output, as a shell reports it.
func exited(name string, code int, why string) runtime.Process {
	e := &notStarted{out: bytes.NewReader([]byte(fmt.Sprintf("%s: %s\n", name, why))), code: code}
	return e
}

// notStarted is the process exited returns.
type notStarted struct {
	mu   sync.Mutex
	out  *bytes.Reader
	code int
}

func (e *notStarted) Read(b []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.out.Read(b)
}
func (e *notStarted) Write([]byte) (int, error) {
	return 0, errcode.New(errcode.InvalidState, "process: it has exited")
}
func (e *notStarted) CloseStdin() error { return nil }
func (e *notStarted) Resize(uint16, uint16) error {
	return errcode.New(errcode.InvalidRequest, "process: it has no terminal to resize")
}
func (e *notStarted) Signal(syscall.Signal) error       { return nil }
func (e *notStarted) Wait(context.Context) (int, error) { return e.code, nil }
func (e *notStarted) Close() error                      { return nil }
