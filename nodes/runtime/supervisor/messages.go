package supervisor

import "github.com/paddock-dev/paddock/commands"

// The JSON messages of the protocol. Field names are short and stable:
// they are the protocol.

// Ops a Call names.
const (
	OpExec      = "exec"
	OpRead      = "read"
	OpWrite     = "write"
	OpList      = "ls"
	OpRemove    = "rm"
	OpMkdir     = "mkdir"
	OpProcess   = "proc"
	OpConfigure = "configure"
	// OpDial, OpListen and OpAccept tunnel TCP between the node and the
	// sandbox's loopback (see tunnel.go): a dial to a port the sandbox
	// listens on, a listener the sandbox connects to, and one connection
	// accepted on it.
	OpDial   = "dial"
	OpListen = "listen"
	OpAccept = "accept"
)

// CallMsg opens a stream: one operation and its arguments.
type CallMsg struct {
	Op string `json:"op"`
	// exec and proc
	Argv      []string          `json:"argv,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	TimeoutMS int64             `json:"timeout_ms,omitempty"`
	TTY       bool              `json:"tty,omitempty"`
	Rows      uint16            `json:"rows,omitempty"`
	Cols      uint16            `json:"cols,omitempty"`
	// files
	Path      string `json:"path,omitempty"`
	Limit     int64  `json:"limit,omitempty"`
	Size      int64  `json:"size,omitempty"`
	Mode      uint32 `json:"mode,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
	Parents   bool   `json:"parents,omitempty"`
	// dial, listen and accept: a TCP port on the sandbox's loopback
	Port int `json:"port,omitempty"`
	// Changes (exec, proc, write, rm, mkdir) asks for what the call
	// changed in the workspace, in its Result; an older supervisor
	// ignores it.
	Changes bool `json:"changes,omitempty"`
}

// ResultMsg ends a stream. Code is empty on success, else an error code
// of package errcode with Message.
type ResultMsg struct {
	Code     string `json:"code,omitempty"`
	Message  string `json:"message,omitempty"`
	ExitCode int    `json:"exit_code,omitempty"`
	Size     int64  `json:"size,omitempty"`
	Mode     uint32 `json:"mode,omitempty"`
	// Denied says the sandbox's user may not do it (the file system said
	// EACCES or EPERM): the node does a file operation through the Docker
	// API instead, as it always has.
	Denied bool `json:"denied,omitempty"`
	// Changes is what a call that asked for it changed in the workspace:
	// an exec or process as the supervisor's watch saw it, a file
	// operation exactly. An older node ignores it.
	Changes *commands.Changes `json:"changes,omitempty"`
}

// ControlMsg is a Ctl frame's JSON: from the node, a resize (Rows and
// Cols) or a signal; from the supervisor, Started once a process runs.
type ControlMsg struct {
	Rows    uint16 `json:"rows,omitempty"`
	Cols    uint16 `json:"cols,omitempty"`
	Signal  int    `json:"signal,omitempty"`
	Started bool   `json:"started,omitempty"`
}
