package commands

import "github.com/paddock-dev/paddock/errcode"

// OpExecRead pulls the output of a streaming exec (ExecArgs.Stream) while
// it runs. The exec's own reply still ends it, with its exit code.
const OpExecRead Op = "exec_read"

// MaxStreamReadBytes caps the output one exec_read returns.
const MaxStreamReadBytes = 512 << 10

// ExecReadArgs names a streaming exec by the command id of its request
// and acknowledges the chunks up to After (their bytes leave the node's
// buffer, which makes room for the command's next output).
type ExecReadArgs struct {
	ExecCommandID string `json:"exec_command_id"`
	// After is the seq of the last chunk the caller has (0: none).
	After int64 `json:"after,omitempty"`
	// WaitMS is how long to wait for a chunk past After (0..MaxYieldMS,
	// default 1000).
	WaitMS *int64 `json:"wait_ms,omitempty"`
}

// Validate checks the args.
func (a *ExecReadArgs) Validate() error {
	if err := CheckToken("exec_command_id", a.ExecCommandID); err != nil {
		return err
	}
	if a.After < 0 {
		return errcode.New(errcode.InvalidRequest, "after must not be negative")
	}
	if a.WaitMS != nil && (*a.WaitMS < 0 || *a.WaitMS > MaxYieldMS) {
		return errcode.New(errcode.InvalidRequest, "wait_ms %d is outside 0..%d", *a.WaitMS, MaxYieldMS)
	}
	return nil
}

// OutputChunk is a piece of a streaming exec's output, secret values
// redacted. Data is base64 in JSON, whatever it holds.
type OutputChunk struct {
	Seq    int64  `json:"seq"`
	Stream string `json:"stream"` // stdout or stderr
	Data   []byte `json:"data"`
}

// ExecReadResult answers exec_read: the chunks after After, in order.
// Done says the command has ended and every chunk has been returned;
// Unknown says no streaming exec of that command id runs on the session
// (not yet started, or long over).
type ExecReadResult struct {
	Chunks  []OutputChunk `json:"chunks"`
	Done    bool          `json:"done,omitempty"`
	Unknown bool          `json:"unknown,omitempty"`
}
