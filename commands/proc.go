package commands

import (
	"github.com/paddock-dev/paddock/errcode"
)

// Process ops: a process started with proc_start outlives the call and is
// talked to by its process id (the seq of its proc_start's start event:
// unique in the session for ever, so an id never names another process).
// Every call that returns output waits up to its yield window for it; the
// window ends early when the process has exited and its output is all
// read, or, with return_on_output, as soon as there is output to return.
const (
	OpProcStart  Op = "proc_start"
	OpProcWrite  Op = "proc_write"
	OpProcRead   Op = "proc_read"
	OpProcResize Op = "proc_resize"
	OpProcSignal Op = "proc_signal"
	OpProcList   Op = "proc_list"
	// OpProcExit is recorded by the node, never sent: a process ended
	// (its finish data says how: exited, killed, stopped, reaped, lost).
	OpProcExit Op = "proc_exit"
)

// Process limits.
const (
	// MaxYieldMS is the longest yield window (the SDK's PTY maximum).
	MaxYieldMS = 30_000
	// DefaultStartYieldMS and DefaultYieldMS are the windows of a
	// proc_start and of the other calls that name none (the SDK's).
	DefaultStartYieldMS = 10_000
	DefaultYieldMS      = 250
	// MaxProcOutputBytes caps one reply's output (and the default cap).
	MaxProcOutputBytes = 256 << 10
	// MaxStdinBytes caps one proc_write's input.
	MaxStdinBytes = 256 << 10
	// MaxProcesses bounds CreateArgs.MaxProcesses (the SDK's PTY maximum).
	MaxProcesses = 64
)

// ProcStartArgs starts a process (op proc_start). Exactly one of Argv and
// Shell is set; Shell runs through /bin/sh -c.
type ProcStartArgs struct {
	Argv  []string          `json:"argv,omitempty"`
	Shell string            `json:"shell,omitempty"`
	Env   map[string]string `json:"env,omitempty"`
	// Cwd is a workspace path (default: the workspace root).
	Cwd string `json:"cwd,omitempty"`
	// User runs the process as another user (docker runtime only).
	User string `json:"user,omitempty"`
	// TTY gives the process a terminal of Rows×Cols (default 24×80);
	// without one stdout and stderr are merged into one output.
	TTY  bool   `json:"tty,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	// YieldMS, MaxOutputBytes and ReturnOnOutput shape the reply as a
	// proc_read's do (the default window here is DefaultStartYieldMS).
	YieldMS        *int64 `json:"yield_ms,omitempty"`
	MaxOutputBytes int    `json:"max_output_bytes,omitempty"`
	ReturnOnOutput bool   `json:"return_on_output,omitempty"`
}

// Validate checks the args.
func (a *ProcStartArgs) Validate() error {
	e := ExecArgs{Argv: a.Argv, Shell: a.Shell, Env: a.Env, Cwd: a.Cwd, User: a.User}
	if err := e.Validate(); err != nil {
		return err
	}
	if (a.Rows == 0) != (a.Cols == 0) {
		return errcode.New(errcode.InvalidRequest, "rows and cols are given together")
	}
	if !a.TTY && a.Rows != 0 {
		return errcode.New(errcode.InvalidRequest, "rows and cols need tty")
	}
	return checkYield(a.YieldMS, a.MaxOutputBytes)
}

// ProcArgs names a process and shapes the reply (ops proc_read,
// proc_write).
type ProcArgs struct {
	ProcessID int64 `json:"process_id"`
	// Input is written to the process's stdin (proc_write only; base64 in
	// JSON). It is counted in events, never recorded.
	Input []byte `json:"input,omitempty"`
	// CloseStdin ends stdin after Input (a terminal gets ^D).
	CloseStdin bool `json:"close_stdin,omitempty"`
	// YieldMS is how long to wait for output, 0..MaxYieldMS (default
	// DefaultYieldMS).
	YieldMS *int64 `json:"yield_ms,omitempty"`
	// MaxOutputBytes caps the output returned (default and most:
	// MaxProcOutputBytes); the rest stays buffered for the next call.
	MaxOutputBytes int `json:"max_output_bytes,omitempty"`
	// ReturnOnOutput ends the window as soon as there is output.
	ReturnOnOutput bool `json:"return_on_output,omitempty"`
	// NoOutput (proc_write only) answers at once and leaves the output
	// for a reader elsewhere (a terminal whose keys and screen are two
	// loops: output taken by a write would be out of order or lost).
	NoOutput bool `json:"no_output,omitempty"`
}

// Validate checks the args.
func (a *ProcArgs) Validate() error {
	if a.ProcessID <= 0 {
		return errcode.New(errcode.InvalidRequest, "process_id must be positive")
	}
	if a.NoOutput && (a.YieldMS != nil && *a.YieldMS != 0 || a.ReturnOnOutput || a.MaxOutputBytes != 0) {
		return errcode.New(errcode.InvalidRequest, "no_output takes no yield_ms, return_on_output or max_output_bytes")
	}
	if len(a.Input) > MaxStdinBytes {
		return errcode.New(errcode.PayloadTooLarge, "input of %d bytes exceeds %d", len(a.Input), MaxStdinBytes)
	}
	return checkYield(a.YieldMS, a.MaxOutputBytes)
}

func checkYield(yield *int64, maxOut int) error {
	if yield != nil && (*yield < 0 || *yield > MaxYieldMS) {
		return errcode.New(errcode.InvalidRequest, "yield_ms %d is outside 0..%d", *yield, MaxYieldMS)
	}
	if maxOut < 0 || maxOut > MaxProcOutputBytes {
		return errcode.New(errcode.InvalidRequest, "max_output_bytes %d is outside 0..%d", maxOut, MaxProcOutputBytes)
	}
	return nil
}

// ProcResult is the state of a process and the output it produced since
// the last call that returned output (ops proc_start, proc_read,
// proc_write).
type ProcResult struct {
	ProcessID int64 `json:"process_id"`
	// Output is text when valid UTF-8, else base64 with OutputEncoding
	// "base64". Secret values are redacted.
	Output         string `json:"output"`
	OutputEncoding string `json:"output_encoding,omitempty"`
	// DroppedBytes counts output lost since the last call because the
	// process's buffer was full (the oldest bytes go first).
	DroppedBytes int64 `json:"dropped_bytes,omitempty"`
	// PendingBytes is output still buffered beyond MaxOutputBytes.
	PendingBytes int64 `json:"pending_bytes,omitempty"`
	// Running is false once the process has exited; ExitCode is then set
	// (128+n when signal n killed it) and Reason says why it ended.
	Running  bool   `json:"running"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// ProcResizeArgs resizes a process's terminal (op proc_resize).
type ProcResizeArgs struct {
	ProcessID int64  `json:"process_id"`
	Rows      uint16 `json:"rows"`
	Cols      uint16 `json:"cols"`
}

// Validate checks the args.
func (a *ProcResizeArgs) Validate() error {
	if a.ProcessID <= 0 {
		return errcode.New(errcode.InvalidRequest, "process_id must be positive")
	}
	if a.Rows == 0 || a.Cols == 0 {
		return errcode.New(errcode.InvalidRequest, "rows and cols must be positive")
	}
	return nil
}

// Signals a process may be sent.
var Signals = map[string]int{
	"HUP": 1, "INT": 2, "QUIT": 3, "KILL": 9, "USR1": 10, "USR2": 12,
	"TERM": 15, "CONT": 18, "STOP": 19, "WINCH": 28,
}

// ProcSignalArgs signals every process of a process's session (op
// proc_signal).
type ProcSignalArgs struct {
	ProcessID int64 `json:"process_id"`
	// Signal is a name of Signals (TERM, KILL, INT, ...).
	Signal string `json:"signal"`
}

// Validate checks the args.
func (a *ProcSignalArgs) Validate() error {
	if a.ProcessID <= 0 {
		return errcode.New(errcode.InvalidRequest, "process_id must be positive")
	}
	if _, ok := Signals[a.Signal]; !ok {
		return errcode.New(errcode.InvalidRequest, "signal %q is not one of HUP INT QUIT KILL USR1 USR2 TERM CONT STOP WINCH", clip(a.Signal, 16))
	}
	return nil
}

// ProcInfo describes one process (op proc_list).
type ProcInfo struct {
	ProcessID int64 `json:"process_id"`
	// Argv is as recorded: secret values redacted.
	Argv      []string `json:"argv"`
	TTY       bool     `json:"tty"`
	StartedAt string   `json:"started_at"`
	Running   bool     `json:"running"`
	ExitCode  *int     `json:"exit_code,omitempty"`
	Reason    string   `json:"reason,omitempty"`
	// PendingBytes is output not read yet.
	PendingBytes int64 `json:"pending_bytes"`
}

// ProcListResult answers proc_list.
type ProcListResult struct {
	Processes []ProcInfo `json:"processes"`
}
