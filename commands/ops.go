package commands

// Op names a session operation; it is the last token of a session subject.
type Op string

// The session operations. OpCreate travels on the tenant's create subject
// (and, forwarded by the scheduler, on the chosen node's subject); every
// other op travels on the session's own subject.
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
)

// SessionOps lists the ops served on a session subject.
var SessionOps = []Op{OpStart, OpExec, OpRead, OpWrite, OpLs, OpRm, OpMkdir, OpRunning, OpStop, OpShutdown, OpDelete, OpPersist, OpHydrate, OpResume}

// Known reports whether op is served on a session subject.
func (op Op) Known() bool {
	for _, o := range SessionOps {
		if o == op {
			return true
		}
	}
	return false
}
