package docker_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// procWait bounds each condition of the process tests.
const procWait = 30 * time.Second

// output collects what a process prints, read by one goroutine that ends
// when Read fails (at the end of the output or after Close).
type output struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	err  error // what ended the reading
	done chan struct{}
}

// startProcess starts spec in sb and reads its output; the test's end
// closes the process and waits for the reading to end.
func startProcess(t *testing.T, sb *docker.Sandbox, spec runtime.ProcessSpec) (runtime.Process, *output) {
	t.Helper()
	p, err := sb.StartProcess(t.Context(), spec)
	if err != nil {
		t.Fatalf("StartProcess %q: %v", spec.Argv, err)
	}
	out := &output{done: make(chan struct{})}
	go func() {
		defer close(out.done)
		b := make([]byte, 32<<10)
		for {
			n, err := p.Read(b)
			out.mu.Lock()
			out.buf.Write(b[:n])
			if err != nil {
				out.err = err
				out.mu.Unlock()
				return
			}
			out.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		<-out.done
	})
	return p, out
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// waitFor waits until the output contains s.
func (o *output) waitFor(t *testing.T, s string) {
	t.Helper()
	testenv.Eventually(t, procWait, func() error {
		if got := o.String(); !strings.Contains(got, s) {
			return errors.New("output " + strconv.Quote(got) + " does not contain " + strconv.Quote(s))
		}
		return nil
	})
}

// waitEnd waits until the output has ended and returns why it did.
func (o *output) waitEnd(t *testing.T) error {
	t.Helper()
	select {
	case <-o.done:
	case <-time.After(procWait):
		t.Fatalf("output did not end; so far %q", o.String())
	}
	return o.err
}

func write(t *testing.T, p runtime.Process, s string) {
	t.Helper()
	if _, err := p.Write([]byte(s)); err != nil {
		t.Fatalf("Write %q: %v", s, err)
	}
}

func wait(t *testing.T, p runtime.Process, want int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), procWait)
	defer cancel()
	code, err := p.Wait(ctx)
	if err != nil || code != want {
		t.Errorf("Wait: got %d, %v; want %d", code, err, want)
	}
}

// testProcessTTY: an interactive shell on a terminal runs what is typed,
// exits with the code it is told, and the wrapper's pid line never shows.
func testProcessTTY(t *testing.T, sb *docker.Sandbox) {
	p, out := startProcess(t, sb, runtime.ProcessSpec{Argv: []string{"sh"}, TTY: true})
	write(t, p, "echo hel''lo\n")
	out.waitFor(t, "hello")
	write(t, p, "echo $TERM\n")
	out.waitFor(t, "\nxterm")
	write(t, p, "exit 3\n")
	wait(t, p, 3)
	wait(t, p, 3) // kept
	if err := out.waitEnd(t); err != io.EOF {
		t.Errorf("Read at the end: got %v, want io.EOF", err)
	}
	if n := docker.ProcessPid(p); n > 0 {
		pid := strconv.Itoa(n)
		if got := out.String(); strings.HasPrefix(got, pid+"\r\n") || strings.Contains(got, "\n"+pid+"\r\n") {
			t.Errorf("output %q has the wrapper's pid line %s", got, pid)
		}
	}
}

// testProcessResize: Resize reaches the terminal, as does the initial size.
func testProcessResize(t *testing.T, sb *docker.Sandbox) {
	p, out := startProcess(t, sb, runtime.ProcessSpec{Argv: []string{"sh"}, TTY: true, Rows: 30, Cols: 90})
	write(t, p, "stty size\n")
	out.waitFor(t, "\n30 90\r\n")
	if err := p.Resize(40, 100); err != nil {
		t.Fatalf("Resize: %v", err)
	}
	write(t, p, "stty size\n")
	out.waitFor(t, "\n40 100\r\n")
	wantCode(t, "Resize to 0 rows", p.Resize(0, 100), errcode.InvalidRequest)
	write(t, p, "exit\n")
	wait(t, p, 0)
	wantCode(t, "Resize after exit", p.Resize(50, 120), errcode.InvalidState)
}

// testProcessPipes: without a TTY, stdout and stderr come merged, stdin is
// a pipe that CloseStdin ends.
func testProcessPipes(t *testing.T, sb *docker.Sandbox) {
	p, out := startProcess(t, sb, runtime.ProcessSpec{Argv: []string{"sh", "-c", "echo out; echo err >&2; cat"}})
	out.waitFor(t, "out\n")
	out.waitFor(t, "err\n")
	write(t, p, "ping\n")
	out.waitFor(t, "ping\n")
	if err := p.CloseStdin(); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	wait(t, p, 0)
	if err := out.waitEnd(t); err != io.EOF {
		t.Errorf("Read at the end: got %v, want io.EOF", err)
	}
	if got := out.String(); len(got) != len("out\nerr\nping\n") {
		t.Errorf("output: got %q, want out, err and ping lines", got)
	}
	wantCode(t, "Resize without a TTY", p.Resize(40, 100), errcode.InvalidRequest)
	_, err := p.Write([]byte("late\n"))
	wantCode(t, "Write after exit", err, errcode.InvalidState)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Errorf("Signal after exit: got %v, want nil", err)
	}
}

// testProcessEnvAndCwd: the process gets its env and cwd; a TERM of the
// caller's wins over the default one.
func testProcessEnvAndCwd(t *testing.T, sb *docker.Sandbox) {
	sh(t, sb, "mkdir sub")
	p, out := startProcess(t, sb, runtime.ProcessSpec{
		Argv: []string{"sh", "-c", `echo "$A:$TERM:$(pwd)"`}, Env: map[string]string{"A": "x y", "TERM": "dumb"}, Cwd: "sub", TTY: true,
	})
	wait(t, p, 0)
	out.waitEnd(t)
	if got := out.String(); got != "x y:dumb:/workspace/sub\r\n" {
		t.Errorf("output: got %q, want %q", got, "x y:dumb:/workspace/sub\r\n")
	}
}

// testProcessSignal: a signal reaches the program (not the wrapper, which
// reports how the program ended), and SIGKILL ends a program that traps
// the others.
func testProcessSignal(t *testing.T, sb *docker.Sandbox) {
	p, _ := startProcess(t, sb, runtime.ProcessSpec{Argv: []string{"sleep", "100009"}})
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("Signal TERM: %v", err)
	}
	wait(t, p, 143)

	p, out := startProcess(t, sb, runtime.ProcessSpec{
		Argv: []string{"sh", "-c", `trap "echo got-int" INT; echo ready; while :; do sleep 0.1; done`}, TTY: true,
	})
	out.waitFor(t, "ready")
	if err := p.Signal(syscall.SIGINT); err != nil {
		t.Fatalf("Signal INT: %v", err)
	}
	out.waitFor(t, "got-int")
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("Signal KILL: %v", err)
	}
	wait(t, p, 137)
	wantCode(t, "signal 0", p.Signal(0), errcode.InvalidRequest)
	wantCode(t, "signal 65", p.Signal(65), errcode.InvalidRequest)
}

// testProcessInterruptKey: ^C typed on the terminal interrupts the
// program; the wrapper lives on to report it (and to empty the session).
func testProcessInterruptKey(t *testing.T, sb *docker.Sandbox) {
	p, out := startProcess(t, sb, runtime.ProcessSpec{Argv: []string{"sh", "-c", "sleep 100010 & echo ready; sleep 100011"}, TTY: true})
	out.waitFor(t, "ready")
	write(t, p, "\x03")
	wait(t, p, 130)
	noProcess(t, sb, "sleep 10001[01]")
}

// testProcessLeftovers: what a process leaves in its session dies when it
// exits.
func testProcessLeftovers(t *testing.T, sb *docker.Sandbox) {
	p, out := startProcess(t, sb, runtime.ProcessSpec{Argv: []string{"sh", "-c", "sleep 100012 & echo started; exit 0"}})
	wait(t, p, 0)
	if err := out.waitEnd(t); err != io.EOF || out.String() != "started\n" {
		t.Errorf("output: got %q, %v; want started, io.EOF", out.String(), err)
	}
	noProcess(t, sb, "sleep 100012")
}

// testProcessClose: Close kills the session, ends Read and a pending Wait,
// and is idempotent.
func testProcessClose(t *testing.T, sb *docker.Sandbox) {
	p, out := startProcess(t, sb, runtime.ProcessSpec{Argv: []string{"sh", "-c", "sleep 100013 & echo ready; sleep 100014"}})
	out.waitFor(t, "ready")
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := p.Wait(cancelled)
	wantCode(t, "Wait with a cancelled ctx", err, errcode.Unavailable)
	waited := make(chan error, 1)
	go func() {
		_, err := p.Wait(t.Context())
		waited <- err
	}()
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// The kill may end the output before Close closes it.
	if err := out.waitEnd(t); err != io.EOF && !errors.Is(err, os.ErrClosed) {
		t.Errorf("pending Read: got %v, want io.EOF or os.ErrClosed", err)
	}
	if _, err := p.Read(make([]byte, 10)); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Read after Close: got %v, want os.ErrClosed", err)
	}
	select {
	case <-waited:
	case <-time.After(procWait):
		t.Fatal("Wait did not return after Close")
	}
	_, err = p.Write([]byte("x"))
	wantCode(t, "Write after Close", err, errcode.InvalidState)
	noProcess(t, sb, "sleep 10001[34]")
}

// testProcessNotRunnable: a program that is not found exits 127; an unknown
// user, a bad argv and a stopped sandbox are errors of StartProcess.
func testProcessNotRunnable(t *testing.T, sb *docker.Sandbox) {
	p, out := startProcess(t, sb, runtime.ProcessSpec{Argv: []string{"no-such-prog"}})
	wait(t, p, 127)
	out.waitEnd(t)
	if got := out.String(); !strings.Contains(got, "not found") {
		t.Errorf("output: got %q, want the shell's not found", got)
	}
	ctx := t.Context()
	_, err := sb.StartProcess(ctx, runtime.ProcessSpec{})
	wantCode(t, "empty argv", err, errcode.InvalidRequest)
	_, err = sb.StartProcess(ctx, runtime.ProcessSpec{Argv: []string{"true"}, Env: map[string]string{"A=secret": "v"}})
	wantCode(t, "bad env name", err, errcode.InvalidRequest)
	if err != nil && strings.Contains(err.Error(), "secret") {
		t.Errorf("bad env name: error %q names the value", err)
	}
	for _, tty := range []bool{false, true} {
		_, err = sb.StartProcess(ctx, runtime.ProcessSpec{Argv: []string{"id"}, User: "nosuchuser", TTY: tty})
		wantCode(t, "unknown user, tty "+strconv.FormatBool(tty), err, errcode.InvalidRequest)
	}
	_, err = sb.StartProcess(ctx, runtime.ProcessSpec{Argv: []string{"true"}, Cwd: "../x"})
	wantCode(t, "cwd outside", err, errcode.InvalidPath)
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = sb.StartProcess(ctx, runtime.ProcessSpec{Argv: []string{"true"}})
	wantCode(t, "stopped sandbox", err, errcode.InvalidState)
}

// testProcessFlood: a flood of output arrives whole, then io.EOF.
func testProcessFlood(t *testing.T, sb *docker.Sandbox) {
	p, err := sb.StartProcess(t.Context(), runtime.ProcessSpec{Argv: []string{"sh", "-c", "yes | head -c 5000000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	got, err := io.ReadAll(p)
	if err != nil || len(got) != 5000000 || !bytes.Equal(got, bytes.Repeat([]byte("y\n"), 2500000)) {
		t.Fatalf("ReadAll: got %d bytes (%.20q...), %v; want 5000000 bytes of y lines", len(got), got, err)
	}
	if n, err := p.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Errorf("Read after the end: got %d, %v; want 0, io.EOF", n, err)
	}
	wait(t, p, 0)
}

// testProcessUnreadOutput: a process whose output nobody reads can still
// exit and be waited for, up to the buffer.
func testProcessUnreadOutput(t *testing.T, sb *docker.Sandbox) {
	p, err := sb.StartProcess(t.Context(), runtime.ProcessSpec{Argv: []string{"head", "-c", "100000", "/dev/zero"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	wait(t, p, 0)
	got, err := io.ReadAll(p)
	if err != nil || len(got) != 100000 {
		t.Errorf("ReadAll after Wait: got %d bytes, %v; want 100000", len(got), err)
	}
}

// processTests run on both paths: the Docker API's exec (TestProcesses)
// and the in-sandbox supervisor's (TestProcessesSupervised).
var processTests = []struct {
	name string
	fn   func(t *testing.T, sb *docker.Sandbox)
}{
	{"TTY", testProcessTTY},
	{"Resize", testProcessResize},
	{"Pipes", testProcessPipes},
	{"EnvAndCwd", testProcessEnvAndCwd},
	{"Signal", testProcessSignal},
	{"InterruptKey", testProcessInterruptKey},
	{"Leftovers", testProcessLeftovers},
	{"Close", testProcessClose},
	{"NotRunnable", testProcessNotRunnable},
	{"Flood", testProcessFlood},
	{"UnreadOutput", testProcessUnreadOutput},
}

func TestProcesses(t *testing.T) {
	for _, tc := range processTests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, sandbox(t)) })
	}
}

func TestProcessesSupervised(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	rt := supervisedRuntime(t)
	for _, tc := range processTests {
		t.Run(tc.name, func(t *testing.T) {
			sb := create(t, rt, spec(rt, image))
			if !sb.Supervisor().Connected {
				t.Fatal("the supervisor is not connected")
			}
			tc.fn(t, sb)
		})
	}
}
