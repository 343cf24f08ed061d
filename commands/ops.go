package commands

// Op names an operation; it is the last token of its subject.
type Op string

// The operations. OpCreate travels on the tenant's create subject (and,
// forwarded by the scheduler, on the chosen node's subject); OpLookup only
// on the tenant's subject; OpResume and OpDelete on the session's subject
// and, when no node serves the session, on the tenant's; every other op on
// the session's own subject.
const (
	OpCreate   Op = "create"
	OpStart    Op = "start"
	OpExec     Op = "exec"
	OpRead     Op = "read"
	OpWrite    Op = "write"
	OpLs       Op = "ls"
	OpRm       Op = "rm"
	OpMkdir    Op = "mkdir"
	OpRunning  Op = "running"
	OpStop     Op = "stop"
	OpShutdown Op = "shutdown"
	OpDelete   Op = "delete"
	OpPersist  Op = "persist"
	OpHydrate  Op = "hydrate"
	OpResume   Op = "resume"
	OpLookup   Op = "lookup"
	// OpCheckpoint (issue 27) writes the sandbox's processes and memory,
	// with its workspace, into a snapshot that resume brings back running.
	OpCheckpoint Op = "checkpoint"
	// OpNodeLost is recorded by the engine, never sent: the session's node
	// missed its heartbeats past the engine's node TTL, so the session is
	// lost until a resume brings it back on a node that is up.
	OpNodeLost Op = "node_lost"
)

// SessionOps lists the ops served on a session subject.
var SessionOps = []Op{OpStart, OpExec, OpRead, OpWrite, OpLs, OpRm, OpMkdir, OpRunning, OpStop, OpShutdown, OpDelete, OpPersist, OpHydrate, OpResume,
	OpProcStart, OpProcWrite, OpProcRead, OpProcResize, OpProcSignal, OpProcList, OpExecRead, OpPort, OpFork, OpCheckpoint}

// RecordedOps are the ops that appear in sessions' histories but are
// never sent: the node records proc_exit, the engine node_lost.
var RecordedOps = []Op{OpProcExit, OpNodeLost, OpEgress}

// Known reports whether op is served on a session subject.
func (op Op) Known() bool {
	for _, o := range SessionOps {
		if o == op {
			return true
		}
	}
	return false
}

// Where an op travels.
const (
	OnSession = "session" // <prefix>.cmd.<tenant>.<session>.<op>, served by the owning node
	OnTenant  = "tenant"  // <prefix>.cmd.<tenant>.<op>, served by the engine's scheduler
)

// Spec describes one op as the contract has it: where it travels, the
// types of its args and result (nil: none, sent as {} or omitted), and
// what it does. docs/architecture.md's op table is checked against Specs.
type Spec struct {
	Op      Op
	Subject string
	Args    any
	Result  any
	Doc     string
}

// Specs returns every op of the contract, tenant ops first.
func Specs() []Spec {
	return []Spec{
		{OpCreate, OnTenant, CreateArgs{}, CreateResult{}, "create and start a session on a node the scheduler picks"},
		{OpLookup, OnTenant, LookupArgs{}, LookupResult{}, "why a session does not answer: its status and node, or session_not_found"},
		{OpDiff, OnTenant, DiffRequest{}, DiffResult{}, "the paths created, modified and removed between two recorded snapshots of a session"},
		{OpResume, OnTenant, ResumeRequest{}, ResumeResult{}, "resume a session no node serves, on a node the scheduler picks"},
		{OpDelete, OnTenant, DeleteRequest{}, StatusResult{}, "delete a session no node serves (lost, or shut down on a node that is gone); the engine records it"},
		{OpFork, OnTenant, ForkRequest{}, ForkResult{}, "fork a running or stopped session into n children with its workspace at a recorded point"},
		{OpExec, OnSession, ExecArgs{}, ExecResult{}, "run a command to completion"},
		{OpRead, OnSession, ReadArgs{}, ReadResult{}, "read a whole file"},
		{OpWrite, OnSession, WriteArgs{}, WriteResult{}, "write a whole file, making missing parents"},
		{OpLs, OnSession, LsArgs{}, LsResult{}, "list a directory, a page at a time"},
		{OpRm, OnSession, RmArgs{}, nil, "remove a file or a tree"},
		{OpMkdir, OnSession, MkdirArgs{}, nil, "make a directory"},
		{OpRunning, OnSession, nil, RunningResult{}, "whether the sandbox runs"},
		{OpStart, OnSession, nil, StatusResult{}, "start a stopped session"},
		{OpStop, OnSession, nil, SnapshotResult{}, "persist the workspace, then stop the sandbox"},
		{OpShutdown, OnSession, nil, StatusResult{}, "remove the sandbox; snapshots stay"},
		{OpDelete, OnSession, nil, StatusResult{}, "shut down if needed and forget the session"},
		{OpPersist, OnSession, nil, SnapshotResult{}, "snapshot the workspace into the object store"},
		{OpHydrate, OnSession, HydrateArgs{}, HydrateResult{}, "replace the workspace with a snapshot or an uploaded tar"},
		{OpResume, OnSession, ResumeArgs{}, ResumeResult{}, "bring a stopped, shut-down or lost session back"},
		{OpProcStart, OnSession, ProcStartArgs{}, ProcResult{}, "start a process that outlives the call (a terminal, stdin); output within the yield window"},
		{OpProcWrite, OnSession, ProcArgs{}, ProcResult{}, "write to a process's stdin; output within the yield window"},
		{OpProcRead, OnSession, ProcArgs{}, ProcResult{}, "output of a process within the yield window, and whether it runs"},
		{OpProcResize, OnSession, ProcResizeArgs{}, nil, "resize a process's terminal"},
		{OpProcSignal, OnSession, ProcSignalArgs{}, nil, "signal a process (its whole session)"},
		{OpProcList, OnSession, nil, ProcListResult{}, "the session's processes, running and exited"},
		{OpExecRead, OnSession, ExecReadArgs{}, ExecReadResult{}, "the output of a streaming exec while it runs"},
		{OpPort, OnSession, PortArgs{}, PortResult{}, "an address on the node that reaches an exposed port of the running sandbox"},
		{OpCheckpoint, OnSession, CheckpointArgs{}, SnapshotResult{}, "snapshot the sandbox's processes and memory with its workspace (runsc runtime); without leave_running the session stops"},
		{OpFork, OnSession, ForkArgs{}, ForkPoint{}, "record a fork of the session (sent by the scheduler only): the snapshot its children start from, persisted first unless named"},
	}
}
