package runtime

import (
	"context"
	"syscall"

	"github.com/paddock-dev/paddock/commands"
)

// ProcessSpec is an interactive or background process to start.
type ProcessSpec struct {
	// Argv is the program and its arguments; Argv[0] is looked up in PATH.
	Argv []string
	// Env is added to the sandbox's environment for this process only.
	Env map[string]string
	// Cwd is a workspace path; empty means the workspace root.
	Cwd string
	// User runs the process as another user than the sandbox's (runtimes
	// that cannot switch users refuse it with invalid_request).
	User string
	// TTY gives the process a pseudo-terminal of Rows×Cols as its stdin,
	// stdout and stderr (and its controlling terminal). Without it stdin
	// is a pipe and stdout and stderr are merged into one output stream.
	TTY        bool
	Rows, Cols uint16
	// Changes asks the runtime to watch what the process changes in the
	// workspace until it exits (ProcessChanges).
	Changes bool
}

// ProcessChanges is a Process that can say what it changed in the
// workspace (ProcessSpec.Changes). Changes returns nil until the process
// has exited, and nil when nothing was watched.
type ProcessChanges interface {
	Changes() *commands.Changes
}

// Processes is implemented by sandboxes that run processes which outlive
// the call that starts them.
type Processes interface {
	// StartProcess starts a process in its own session (and so its own
	// process group). A program that is not found or cannot be run is not
	// an error: the process exits 127 or 126 with the reason in its output,
	// as a shell reports it. Errors: as Exec's.
	StartProcess(ctx context.Context, spec ProcessSpec) (Process, error)
}

// Process is a running process. Read, Write and the other methods may be
// called from different goroutines; Read from one goroutine at a time.
type Process interface {
	// Read reads output: the terminal's with a TTY, else stdout and stderr
	// merged. It returns io.EOF once the output has ended (the process and
	// everything that held its output open are gone).
	Read(p []byte) (int, error)
	// Write writes to the process's stdin. After the process has exited it
	// fails.
	Write(p []byte) (int, error)
	// CloseStdin ends stdin (a TTY gets an end-of-file character instead,
	// as a person typing ^D at the start of a line).
	CloseStdin() error
	// Resize sets a TTY's size; without a TTY it is invalid_request.
	Resize(rows, cols uint16) error
	// Signal sends sig to the process's whole process group. Signalling a
	// process that has exited is not an error.
	Signal(sig syscall.Signal) error
	// Wait waits for the process to exit and returns its exit code (128+n
	// when signal n killed it). Everything left in its session is killed
	// when it exits, as after an exec. It may be called more than once.
	Wait(ctx context.Context) (int, error)
	// Close kills whatever is left of the process's session and frees what
	// the process holds. It is idempotent.
	Close() error
}
