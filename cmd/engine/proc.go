package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
)

// sandboxProc runs `engine sandbox proc SUB ...`.
func sandboxProc(ctx context.Context, base globals, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageErr("sandbox proc needs one of start, write, read, list, kill, resize (see engine help)")
	}
	sub, args := args[0], args[1:]
	var g globals
	fs := newFlagSet("sandbox proc "+sub, stderr)
	g.register(fs, base)
	var (
		jsonOut    bool
		env        = kvFlag{}
		cwd        string
		tty        bool
		rows, cols uint
		yield      time.Duration
		follow     bool
		closeIn    bool
		sig        string
	)
	want := [2]int{}
	fs.BoolVar(&jsonOut, "json", false, "print the result as JSON (read --follow: JSON lines)")
	switch sub {
	case "start":
		fs.BoolVar(&tty, "tty", false, "give the process a terminal")
		fs.UintVar(&rows, "rows", 0, "terminal rows (with --tty; default 24)")
		fs.UintVar(&cols, "cols", 0, "terminal columns (with --tty; default 80)")
		fs.Var(env, "env", "environment variable K=V for this process (repeatable)")
		fs.StringVar(&cwd, "cwd", "", "working directory, a workspace path")
		fs.DurationVar(&yield, "yield", 0, "wait this long for output (printed with --json)")
		want = [2]int{1, 1}
	case "write":
		fs.DurationVar(&yield, "yield", 250*time.Millisecond, "then wait this long for output")
		fs.BoolVar(&closeIn, "close", false, "end stdin after the input (a terminal gets ^D)")
		want = [2]int{2, 3}
	case "read":
		fs.DurationVar(&yield, "yield", time.Second, "wait this long for output")
		fs.BoolVar(&follow, "follow", false, "print output as it comes until the process exits, and exit with its code")
		want = [2]int{2, 2}
	case "list":
		want = [2]int{1, 1}
	case "kill":
		fs.StringVar(&sig, "signal", "TERM", "signal: "+signalNames())
		want = [2]int{2, 2}
	case "resize":
		want = [2]int{4, 4}
	default:
		return usageErr("unknown sandbox proc command %q (see engine help)", sub)
	}
	pos, rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < want[0] || len(pos) > want[1] {
		return usageErr("sandbox proc %s takes %d to %d arguments, got %d (see engine help)", sub, want[0], want[1], len(pos))
	}
	if rest != nil && sub != "start" {
		return usageErr("sandbox proc %s takes no command after --", sub)
	}
	if sub == "start" && len(rest) == 0 {
		return usageErr("sandbox proc start needs a command after --")
	}
	var pid int64
	if len(pos) > 1 {
		if pid, err = strconv.ParseInt(pos[1], 10, 64); err != nil || pid <= 0 {
			return usageErr("process id %q is not a positive number", pos[1])
		}
	}
	nc, c, err := dial(&g)
	if err != nil {
		return err
	}
	defer nc.Close()
	id := pos[0]
	window := yield.Milliseconds()

	switch sub {
	case "start":
		res, err := c.ProcStart(ctx, id, commands.ProcStartArgs{
			Argv: rest, Env: env, Cwd: cwd, TTY: tty, Rows: uint16(rows), Cols: uint16(cols), YieldMS: &window,
		})
		if err != nil {
			return err
		}
		if jsonOut {
			return printJSON(stdout, res)
		}
		fmt.Fprintln(stdout, res.ProcessID)
		return nil
	case "write":
		var in []byte
		switch {
		case len(pos) == 2:
		case pos[2] == "-":
			if in, err = io.ReadAll(io.LimitReader(stdin, commands.MaxStdinBytes+1)); err != nil {
				return err
			}
		default:
			in = unescape(pos[2])
		}
		res, err := c.ProcWrite(ctx, id, commands.ProcArgs{ProcessID: pid, Input: in, CloseStdin: closeIn, YieldMS: &window})
		if err != nil {
			return err
		}
		if jsonOut {
			return printResultJSON(stdout, res, printJSON)
		}
		return printUpdate(stdout, stderr, res, false)
	case "read":
		for {
			res, err := c.ProcRead(ctx, id, commands.ProcArgs{ProcessID: pid, YieldMS: &window, ReturnOnOutput: follow})
			if err != nil {
				return err
			}
			print := func() error { return printUpdate(stdout, stderr, res, follow) }
			if jsonOut {
				enc := printJSON
				if follow {
					enc = printJSONLine
				}
				print = func() error { return printResultJSON(stdout, res, enc) }
			}
			if err := print(); err != nil || !follow || !res.Running && res.PendingBytes == 0 {
				return err
			}
		}
	case "list":
		res, err := c.ProcList(ctx, id)
		if err != nil {
			return err
		}
		if jsonOut {
			return printJSON(stdout, res)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PROCESS\tSTATE\tTTY\tPENDING\tSTARTED\tCOMMAND")
		for _, p := range res.Processes {
			state := "running"
			if !p.Running {
				state = fmt.Sprintf("%s %d", p.Reason, *p.ExitCode)
			}
			fmt.Fprintf(tw, "%d\t%s\t%v\t%d\t%s\t%s\n", p.ProcessID, state, p.TTY, p.PendingBytes, formatTimeText(p.StartedAt), strings.Join(p.Argv, " "))
		}
		return tw.Flush()
	case "kill":
		signal := strings.TrimPrefix(strings.ToUpper(sig), "SIG")
		if err := c.ProcSignal(ctx, id, commands.ProcSignalArgs{ProcessID: pid, Signal: signal}); err != nil || !jsonOut {
			return err
		}
		return printJSON(stdout, struct {
			Session string `json:"session_id"`
			PID     int64  `json:"process_id"`
			Signal  string `json:"signal"`
		}{id, pid, signal})
	case "resize":
		r, err1 := strconv.ParseUint(pos[2], 10, 16)
		cl, err2 := strconv.ParseUint(pos[3], 10, 16)
		if err1 != nil || err2 != nil {
			return usageErr("rows and cols must be numbers up to 65535")
		}
		if err := c.ProcResize(ctx, id, commands.ProcResizeArgs{ProcessID: pid, Rows: uint16(r), Cols: uint16(cl)}); err != nil || !jsonOut {
			return err
		}
		return printJSON(stdout, commands.ProcResizeArgs{ProcessID: pid, Rows: uint16(r), Cols: uint16(cl)})
	}
	return nil
}

// printUpdate writes a process's output to stdout and, once it has
// exited, says so on stderr (quiet: not when following, where the exit
// code says it) and returns its exit code as the command's.
func printUpdate(stdout, stderr io.Writer, res commands.ProcResult, quiet bool) error {
	out, err := procOutput(res)
	if err != nil {
		return err
	}
	_, _ = stdout.Write(out)
	if res.DroppedBytes > 0 {
		fmt.Fprintf(stderr, "paddock: %d bytes of output were dropped (the process's buffer was full)\n", res.DroppedBytes)
	}
	if res.Running || res.ExitCode == nil {
		return nil
	}
	if !quiet {
		fmt.Fprintf(stderr, "paddock: process %d %s with code %d\n", res.ProcessID, res.Reason, *res.ExitCode)
	}
	if *res.ExitCode != 0 {
		return exitError{*res.ExitCode}
	}
	return nil
}

// procOutput decodes a result's output.
func procOutput(res commands.ProcResult) ([]byte, error) {
	if res.OutputEncoding == "base64" {
		b, err := base64.StdEncoding.DecodeString(res.Output)
		if err != nil {
			return nil, errcode.Wrap(errcode.Internal, err, "decode output")
		}
		return b, nil
	}
	return []byte(res.Output), nil
}

// unescape turns the escapes \n \r \t \\ \e and \xNN of s into bytes, as
// printf(1) does, so that `proc write ID PID 'ls\n'` sends a line.
func unescape(s string) []byte {
	var out []byte
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			out = append(out, s[i])
			continue
		}
		i++
		switch s[i] {
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'e':
			out = append(out, 0x1b)
		case '\\':
			out = append(out, '\\')
		case 'x':
			if i+2 < len(s) {
				if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
					out = append(out, byte(v))
					i += 2
					continue
				}
			}
			out = append(out, '\\', 'x')
		default:
			out = append(out, '\\', s[i])
		}
	}
	return out
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func signalNames() string {
	return "HUP INT QUIT KILL USR1 USR2 TERM CONT STOP WINCH"
}

// sandboxShell runs `engine sandbox shell ID [-- CMD...]`: a terminal in
// the sandbox. With a terminal on stdin it goes raw (every key goes to
// the sandbox, ^C included) and follows the window's size; the command's
// exit code is the shell's.
func sandboxShell(ctx context.Context, base globals, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var g globals
	fs := newFlagSet("sandbox shell", stderr)
	g.register(fs, base)
	env := kvFlag{}
	var cwd string
	jsonOut := fs.Bool("json", false, "the output as JSON lines, as proc read --follow --json (no terminal of yours)")
	fs.Var(env, "env", "environment variable K=V (repeatable)")
	fs.StringVar(&cwd, "cwd", "", "working directory, a workspace path")
	pos, rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("sandbox shell takes a session id, got %d arguments", len(pos))
	}
	if len(rest) == 0 {
		rest = []string{"/bin/sh"}
	}
	nc, c, err := dial(&g)
	if err != nil {
		return err
	}
	defer nc.Close()
	id := pos[0]

	in, isTerm := stdin.(*os.File)
	isTerm = isTerm && term.IsTerminal(int(in.Fd())) && !*jsonOut
	rows, cols := uint16(24), uint16(80)
	if out, ok := stdout.(*os.File); ok && term.IsTerminal(int(out.Fd())) {
		if w, h, err := term.GetSize(int(out.Fd())); err == nil && w > 0 && h > 0 {
			rows, cols = uint16(h), uint16(w)
		}
	}
	zero := int64(0)
	res, err := c.ProcStart(ctx, id, commands.ProcStartArgs{Argv: rest, Env: env, Cwd: cwd, TTY: true, Rows: rows, Cols: cols, YieldMS: &zero})
	if err != nil {
		return err
	}
	pid := res.ProcessID
	if *jsonOut {
		_ = printResultJSON(stdout, res, printJSONLine)
	} else if first, err := procOutput(res); err == nil {
		_, _ = stdout.Write(first) // what the start's reply took (the prompt, often)
	}
	if isTerm {
		old, err := term.MakeRaw(int(in.Fd()))
		if err != nil {
			return fmt.Errorf("raw mode: %w", err)
		}
		defer func() { _ = term.Restore(int(in.Fd()), old) }()
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()

	// Keys → stdin of the process. The read of stdin cannot be cancelled;
	// the goroutine ends at the next key or EOF after the shell ends.
	keys := make(chan []byte)
	go func() {
		defer close(keys)
		b := make([]byte, 4096)
		for {
			n, err := stdin.Read(b)
			if n > 0 {
				select {
				case keys <- append([]byte(nil), b[:n]...):
				case <-sctx.Done():
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	wg.Go(func() { // sends keys until the shell ends
		for {
			select {
			case <-sctx.Done():
				return
			case k, ok := <-keys:
				// The screen loop takes the output: a write must leave it.
				args := commands.ProcArgs{ProcessID: pid, Input: k, NoOutput: true}
				if !ok {
					args.Input, args.CloseStdin = nil, true
				}
				if _, err := c.ProcWrite(sctx, id, args); err != nil && sctx.Err() == nil {
					fmt.Fprintf(stderr, "\r\npaddock: write: %v\r\n", err)
				}
				if !ok {
					<-sctx.Done()
					return
				}
			}
		}
	})
	if isTerm {
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		fd := int(in.Fd())
		if out, ok := stdout.(*os.File); ok {
			fd = int(out.Fd())
		}
		wg.Go(func() { // follows the window's size until the shell ends
			for {
				select {
				case <-sctx.Done():
					return
				case <-winch:
					if w, h, err := term.GetSize(fd); err == nil && w > 0 && h > 0 {
						_ = c.ProcResize(sctx, id, commands.ProcResizeArgs{ProcessID: pid, Rows: uint16(h), Cols: uint16(w)})
					}
				}
			}
		})
	}
	return shellOutput(sctx, c, id, pid, stdout, *jsonOut)
}

// shellOutput copies a process's output to stdout until it exits, and
// returns its exit code as the command's.
func shellOutput(ctx context.Context, c *client.Client, id string, pid int64, stdout io.Writer, jsonOut bool) error {
	window := int64(5000)
	for {
		res, err := c.ProcRead(ctx, id, commands.ProcArgs{ProcessID: pid, YieldMS: &window, ReturnOnOutput: true})
		if err != nil {
			return err
		}
		if jsonOut {
			if err := printResultJSON(stdout, res, printJSONLine); err != nil {
				return err
			}
		} else {
			out, err := procOutput(res)
			if err != nil {
				return err
			}
			_, _ = stdout.Write(out)
		}
		if !res.Running && res.PendingBytes == 0 {
			if *res.ExitCode != 0 {
				return exitError{*res.ExitCode}
			}
			return nil
		}
	}
}

// printResultJSON prints a process's result with enc (one object, or a
// JSON line when following) and, once it has exited, returns its exit
// code as the command's, as printUpdate does.
func printResultJSON(stdout io.Writer, res commands.ProcResult, enc func(io.Writer, any) error) error {
	if err := enc(stdout, res); err != nil {
		return err
	}
	if !res.Running && res.ExitCode != nil && *res.ExitCode != 0 {
		return exitError{*res.ExitCode}
	}
	return nil
}
