package nodes_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/testenv"
)

func ms(v int64) *int64 { return &v }

// procDriver drives one session's processes through the client.
type procDriver struct {
	t   *testing.T
	ctx context.Context
	c   *client.Client
	id  string
	// first holds the output each start's reply carried, until reads it;
	// done the reply of a start that told the exit already.
	first map[int64]string
	done  map[int64]commands.ProcResult
}

// output decodes a result's output.
func output(t *testing.T, r commands.ProcResult) string {
	t.Helper()
	if r.OutputEncoding == "base64" {
		b, err := base64.StdEncoding.DecodeString(r.Output)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	return r.Output
}

// until reads process pid until its accumulated output contains want (or,
// with want empty, until it has exited), and returns the output and the
// last result.
func (d procDriver) until(pid int64, want string) (string, commands.ProcResult) {
	d.t.Helper()
	var all strings.Builder
	all.WriteString(d.first[pid])
	delete(d.first, pid)
	if r, ok := d.done[pid]; ok {
		delete(d.done, pid)
		return all.String(), r
	}
	if want != "" && strings.Contains(all.String(), want) {
		return all.String(), commands.ProcResult{ProcessID: pid, Running: true}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := d.c.ProcRead(d.ctx, d.id, commands.ProcArgs{ProcessID: pid, YieldMS: ms(2000), ReturnOnOutput: true})
		if err != nil {
			d.t.Fatalf("proc_read %d: %v (output so far %q)", pid, err, all.String())
		}
		all.WriteString(output(d.t, r))
		if (want != "" && strings.Contains(all.String(), want)) || (want == "" && !r.Running) {
			return all.String(), r
		}
		if !r.Running {
			d.t.Fatalf("process %d exited (%v) before %q appeared in %q", pid, *r.ExitCode, want, all.String())
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%q did not appear in 30s; output %q", want, all.String())
		}
	}
}

func (d procDriver) write(pid int64, in string) commands.ProcResult {
	d.t.Helper()
	// no_output: the output stays for until, which reads it all.
	r, err := d.c.ProcWrite(d.ctx, d.id, commands.ProcArgs{ProcessID: pid, Input: []byte(in), NoOutput: true})
	if err != nil {
		d.t.Fatalf("proc_write %d: %v", pid, err)
	}
	return r
}

func (d procDriver) start(args commands.ProcStartArgs) commands.ProcResult {
	d.t.Helper()
	if args.YieldMS == nil {
		args.YieldMS = ms(0)
	}
	r, err := d.c.ProcStart(d.ctx, d.id, args)
	if err != nil {
		d.t.Fatalf("proc_start %v: %v", args.Argv, err)
	}
	if r.ProcessID <= 0 {
		d.t.Fatalf("proc_start returned process id %d", r.ProcessID)
	}
	d.first[r.ProcessID] = output(d.t, r)
	if !r.Running { // its exit is told: the process is forgotten
		d.done[r.ProcessID] = r
	}
	return r
}

// TestProcesses runs the process ops against the local runtime through a
// real node: an interactive shell on a terminal, a program waiting for
// input, one that outlives its window and is signalled, a flood past the
// buffer, a resize seen by stty, background children, secrets split
// across reads, bad input, and the events that record it all.
func TestProcesses(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Node: nodes.Config{ProcBufferBytes: 64 << 10, MaxProcesses: 4}})
	ctx := testenv.Context(t, 2*time.Minute)
	cr, err := st.Client.Create(ctx, commands.CreateArgs{SecretEnv: map[string]string{"TOKEN": "hunter22"}})
	if err != nil {
		t.Fatal(err)
	}
	testProcesses(t, ctx, st, cr.SessionID, "node-1")
}

// testProcesses is the body of TestProcesses and of its Docker twin.
func testProcesses(t *testing.T, ctx context.Context, st *testenv.Stack, id, node string) {
	d := procDriver{t: t, ctx: ctx, c: st.Client, id: id, first: map[int64]string{}, done: map[int64]commands.ProcResult{}}

	t.Run("interactive shell", func(t *testing.T) {
		d := d
		d.t = t
		sh := d.start(commands.ProcStartArgs{Argv: []string{"sh"}, TTY: true})
		d.write(sh.ProcessID, "echo hel''lo\n")
		d.until(sh.ProcessID, "hello")
		d.write(sh.ProcessID, "exit 3\n")
		_, r := d.until(sh.ProcessID, "")
		if r.ExitCode == nil || *r.ExitCode != 3 || r.Reason != nodes.ProcExited {
			t.Fatalf("exit: %+v, want code 3, reason exited", r)
		}
		// Its exit has been read: the process is forgotten.
		if _, err := st.Client.ProcRead(ctx, id, commands.ProcArgs{ProcessID: sh.ProcessID}); !errors.Is(err, errcode.ErrNotFound) {
			t.Fatalf("read of a forgotten process: %v, want not_found", err)
		}
	})

	t.Run("waits for input", func(t *testing.T) {
		d := d
		d.t = t
		p := d.start(commands.ProcStartArgs{Shell: "read x; echo got-$x", YieldMS: ms(300)})
		if !p.Running || p.Output != "" {
			t.Fatalf("a program waiting for input: %+v, want running and silent", p)
		}
		d.write(p.ProcessID, "abc\n")
		out, r := d.until(p.ProcessID, "")
		if !strings.Contains(out, "got-abc") || *r.ExitCode != 0 {
			t.Fatalf("output %q, exit %v", out, *r.ExitCode)
		}
	})

	t.Run("signals", func(t *testing.T) {
		d := d
		d.t = t
		p := d.start(commands.ProcStartArgs{Argv: []string{"sleep", "300"}, YieldMS: ms(200)})
		if !p.Running || p.ExitCode != nil {
			t.Fatalf("sleep after its window: %+v, want running", p)
		}
		list, err := st.Client.ProcList(ctx, id)
		if err != nil || len(list.Processes) != 1 || !list.Processes[0].Running || list.Processes[0].Argv[0] != "sleep" {
			t.Fatalf("proc_list: %+v, %v", list, err)
		}
		if err := st.Client.ProcSignal(ctx, id, commands.ProcSignalArgs{ProcessID: p.ProcessID, Signal: "TERM"}); err != nil {
			t.Fatal(err)
		}
		_, r := d.until(p.ProcessID, "")
		if *r.ExitCode != 143 || r.Reason != nodes.ProcKilled {
			t.Fatalf("after TERM: %+v, want 143, killed", r)
		}
		// A terminal's ^C reaches a trap.
		sh := d.start(commands.ProcStartArgs{Shell: `trap "echo got-int" INT; echo ready; while :; do sleep 0.05; done`, TTY: true})
		d.until(sh.ProcessID, "ready")
		if err := st.Client.ProcSignal(ctx, id, commands.ProcSignalArgs{ProcessID: sh.ProcessID, Signal: "INT"}); err != nil {
			t.Fatal(err)
		}
		d.until(sh.ProcessID, "got-int")
		if err := st.Client.ProcSignal(ctx, id, commands.ProcSignalArgs{ProcessID: sh.ProcessID, Signal: "KILL"}); err != nil {
			t.Fatal(err)
		}
		if _, r := d.until(sh.ProcessID, ""); *r.ExitCode != 137 {
			t.Fatalf("after KILL: exit %d, want 137", *r.ExitCode)
		}
	})

	t.Run("flood", func(t *testing.T) {
		d := d
		d.t = t
		const n = 1_000_000
		p := d.start(commands.ProcStartArgs{Shell: fmt.Sprintf("head -c %d /dev/zero | tr '\\000' a", n)})
		// The buffer holds 64 KiB: most of it is dropped, and said so.
		got, dropped := int64(len(d.first[p.ProcessID])), p.DroppedBytes
		delete(d.first, p.ProcessID)
		for {
			r, err := st.Client.ProcRead(ctx, id, commands.ProcArgs{ProcessID: p.ProcessID, YieldMS: ms(5000), MaxOutputBytes: 16 << 10})
			if err != nil {
				t.Fatal(err)
			}
			got += int64(len(output(t, r)))
			dropped += r.DroppedBytes
			if len(output(t, r)) > 16<<10 {
				t.Fatalf("a read returned %d bytes over its cap", len(output(t, r)))
			}
			if !r.Running && r.PendingBytes == 0 {
				break
			}
		}
		if got+dropped != n || dropped == 0 {
			t.Fatalf("read %d and dropped %d of %d bytes", got, dropped, n)
		}
	})

	t.Run("resize", func(t *testing.T) {
		d := d
		d.t = t
		sh := d.start(commands.ProcStartArgs{Argv: []string{"sh"}, TTY: true, Rows: 30, Cols: 90})
		d.write(sh.ProcessID, "stty size\n")
		d.until(sh.ProcessID, "30 90")
		if err := st.Client.ProcResize(ctx, id, commands.ProcResizeArgs{ProcessID: sh.ProcessID, Rows: 40, Cols: 100}); err != nil {
			t.Fatal(err)
		}
		d.write(sh.ProcessID, "stty size\n")
		d.until(sh.ProcessID, "40 100")
		d.write(sh.ProcessID, "exit\n")
		d.until(sh.ProcessID, "")
	})

	t.Run("background children die with the process", func(t *testing.T) {
		d := d
		d.t = t
		p := d.start(commands.ProcStartArgs{Shell: "sleep 300 & echo bg=$!; exit 0"})
		out, r := d.until(p.ProcessID, "")
		if *r.ExitCode != 0 {
			t.Fatalf("exit %d", *r.ExitCode)
		}
		var pid int
		if _, err := fmt.Sscanf(out[strings.Index(out, "bg="):], "bg=%d", &pid); err != nil {
			t.Fatalf("no pid in %q", out)
		}
		check := fmt.Sprintf("kill -0 %d 2>/dev/null && echo alive || echo gone", pid)
		testenv.Eventually(t, 10*time.Second, func() error {
			res, err := st.Client.Exec(ctx, id, commands.ExecArgs{Shell: check})
			if err != nil {
				return err
			}
			if strings.TrimSpace(res.Stdout) != "gone" {
				return fmt.Errorf("background sleep %d is %s", pid, res.Stdout)
			}
			return nil
		})
	})

	t.Run("secrets", func(t *testing.T) {
		d := d
		d.t = t
		// The secret arrives in two parts, a window apart: the part that
		// may begin it is held back, then redacted whole.
		p := d.start(commands.ProcStartArgs{Shell: `printf 'a-%s' "$(printf %.3s "$TOKEN")"; read x; printf '%s-z\n' "${TOKEN#???}"`})
		first, _ := d.until(p.ProcessID, "a-")
		if strings.Contains(first, "hun") {
			t.Fatalf("the beginning of the secret went out: %q", first)
		}
		d.write(p.ProcessID, "\n")
		rest, _ := d.until(p.ProcessID, "")
		if all := first + rest; all != "a-[REDACTED]-z\n" {
			t.Fatalf("output %q, want the secret redacted whole", all)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		if _, err := st.Client.ProcWrite(ctx, id, commands.ProcArgs{ProcessID: 999999, Input: []byte("x")}); !errors.Is(err, errcode.ErrNotFound) {
			t.Fatalf("write to an unknown process: %v, want not_found", err)
		}
		if _, err := st.Client.ProcRead(ctx, id, commands.ProcArgs{ProcessID: 1, YieldMS: ms(40_000)}); !errors.Is(err, errcode.ErrInvalidRequest) {
			t.Fatalf("a 40 s window: %v, want invalid_request", err)
		}
		if _, err := st.Client.ProcStart(ctx, id, commands.ProcStartArgs{Argv: []string{"sh"}, Rows: 10, Cols: 10}); !errors.Is(err, errcode.ErrInvalidRequest) {
			t.Fatalf("rows without tty: %v, want invalid_request", err)
		}
		if err := st.Client.ProcSignal(ctx, id, commands.ProcSignalArgs{ProcessID: 1, Signal: "SEGV"}); !errors.Is(err, errcode.ErrInvalidRequest) {
			t.Fatalf("signal SEGV: %v, want invalid_request", err)
		}
		p := d.start(commands.ProcStartArgs{Shell: "read x; echo left; exit 0", YieldMS: ms(0)})
		if err := st.Client.ProcResize(ctx, id, commands.ProcResizeArgs{ProcessID: p.ProcessID, Rows: 5, Cols: 5}); !errors.Is(err, errcode.ErrInvalidRequest) {
			t.Fatalf("resize without a tty: %v, want invalid_request", err)
		}
		d.write(p.ProcessID, "\n")
		// Exited, output unread: the process is still there, its stdin closed.
		testenv.Eventually(t, 10*time.Second, func() error {
			l, err := st.Client.ProcList(ctx, id)
			if err != nil {
				return err
			}
			for _, i := range l.Processes {
				if i.ProcessID == p.ProcessID && !i.Running {
					return nil
				}
			}
			return fmt.Errorf("process %d still runs: %+v", p.ProcessID, l)
		})
		if _, err := st.Client.ProcWrite(ctx, id, commands.ProcArgs{ProcessID: p.ProcessID, Input: []byte("x")}); !errors.Is(err, errcode.ErrInvalidState) {
			t.Fatalf("write to an exited process: %v, want invalid_state", err)
		}
		if out, _ := d.until(p.ProcessID, ""); out != "left\n" {
			t.Fatalf("output of the exited process: %q", out)
		}
		if _, err := st.Client.ProcStart(ctx, id, commands.ProcStartArgs{Argv: []string{"no-such-program"}}); err != nil {
			t.Fatalf("a program that is not there starts and exits 127: %v", err)
		}
	})

	t.Run("limit", func(t *testing.T) {
		// MaxProcesses 4: a fifth pushes out the least recently used.
		var ids []int64
		for range 5 {
			ids = append(ids, d.start(commands.ProcStartArgs{Argv: []string{"sleep", "300"}}).ProcessID)
		}
		testenv.Eventually(t, 10*time.Second, func() error {
			l, err := st.Client.ProcList(ctx, id)
			if err != nil {
				return err
			}
			if len(l.Processes) > 4 {
				return fmt.Errorf("%d processes held", len(l.Processes))
			}
			return nil
		})
	})

	t.Run("stop ends processes; events record them", func(t *testing.T) {
		l, err := st.Client.ProcList(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Client.Persist(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := st.Client.Stop(ctx, id); err != nil {
			t.Fatal(err)
		}
		evs, err := st.Log.Session(ctx, "default", id)
		if err != nil {
			t.Fatal(err)
		}
		reasons := map[int64]string{}
		var wrote bool
		for _, ev := range evs {
			if ev.Op == string(commands.OpProcExit) && ev.Phase == events.PhaseFinish {
				f, err := events.DecodeData[events.ProcExitFinish](ev)
				if err != nil {
					t.Fatal(err)
				}
				reasons[f.ProcessID] = f.Reason
				if ev.Actor != "node:"+node {
					t.Fatalf("proc_exit by %q", ev.Actor)
				}
			}
			if ev.Op == string(commands.OpProcWrite) && ev.Phase == events.PhaseStart {
				r, err := events.DecodeData[events.ProcRef](ev)
				if err != nil || r.InputBytes == 0 {
					t.Fatalf("proc_write start %+v (%v): want input counted", r, err)
				}
				if strings.Contains(string(ev.Data), "abc") {
					t.Fatalf("stdin recorded: %s", ev.Data)
				}
				wrote = true
			}
		}
		if !wrote {
			t.Fatal("no proc_write recorded")
		}
		for _, p := range l.Processes {
			if p.Running && reasons[p.ProcessID] != nodes.ProcStopped && reasons[p.ProcessID] != nodes.ProcReaped {
				t.Errorf("process %d running at the stop ended as %q", p.ProcessID, reasons[p.ProcessID])
			}
		}
		if _, err := st.Client.ProcStart(ctx, id, commands.ProcStartArgs{Argv: []string{"true"}}); !errors.Is(err, errcode.ErrInvalidState) {
			t.Fatalf("proc_start on a stopped session: %v, want invalid_state", err)
		}
	})
}

// TestDockerProcesses is TestProcesses, then TestStreamingExec, on the
// Docker runtime.
func TestDockerProcesses(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	node := "procs-" + uuid.NewString()[:8]
	rt := dockerRuntime(t, node)
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	startAgent(t, st, nodes.Config{ID: node, ProcBufferBytes: 64 << 10, MaxProcesses: 4,
		StreamBufferBytes: 64 << 10, StreamIdleTimeout: 2 * time.Second}, rt)
	ctx := testenv.Context(t, 3*time.Minute)
	cr, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image, SecretEnv: map[string]string{"TOKEN": "hunter22"}})
	if err != nil {
		t.Fatal(err)
	}
	testProcesses(t, ctx, st, cr.SessionID, node)
	if err := st.Client.Start(ctx, cr.SessionID); err != nil {
		t.Fatal(err)
	}
	testStreamingExec(t, ctx, st, cr.SessionID)
	if err := st.Client.Delete(ctx, cr.SessionID); err != nil {
		t.Fatal(err)
	}
}

// TestProcessLostWithNode: a node that stops ends its processes and
// records them lost; a process whose node died without a word is recorded
// lost by the node that takes the session up.
func TestProcessLostWithNode(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, time.Minute)
	cr, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.Client.ProcStart(ctx, cr.SessionID, commands.ProcStartArgs{Argv: []string{"sleep", "300"}, YieldMS: ms(0)})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Agent.Close(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := st.Log.Session(ctx, "default", cr.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	f, err := events.DecodeData[events.ProcExitFinish](last)
	if last.Op != string(commands.OpProcExit) || err != nil || f.ProcessID != p.ProcessID || f.Reason != nodes.ProcLost {
		t.Fatalf("last event %s %s %+v (%v), want proc_exit lost of %d", last.Op, last.Phase, f, err, p.ProcessID)
	}
}

// TestProcessIdleReaped: a process nobody reads, writes or signals for
// ProcIdleTimeout is ended by the node, recorded as reaped.
func TestProcessIdleReaped(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Node: nodes.Config{ProcIdleTimeout: 300 * time.Millisecond, ExpiryInterval: 20 * time.Millisecond}})
	ctx := testenv.Context(t, time.Minute)
	cr, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.Client.ProcStart(ctx, cr.SessionID, commands.ProcStartArgs{Argv: []string{"sleep", "300"}, YieldMS: ms(0)})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		evs, err := st.Log.Session(ctx, "default", cr.SessionID)
		if err != nil {
			return err
		}
		last := evs[len(evs)-1]
		f, err := events.DecodeData[events.ProcExitFinish](last)
		if last.Op != string(commands.OpProcExit) || last.Phase != events.PhaseFinish || err != nil {
			return fmt.Errorf("last event %s %s", last.Op, last.Phase)
		}
		if f.ProcessID != p.ProcessID || f.Reason != nodes.ProcReaped {
			return fmt.Errorf("proc_exit %+v, want %d reaped", f, p.ProcessID)
		}
		return nil
	})
}
