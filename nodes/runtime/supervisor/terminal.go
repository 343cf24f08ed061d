package supervisor

import (
	"bytes"
	"syscall"

	"github.com/paddock-dev/paddock/nodes/runtime"
)

// Terminals under gVisor. gVisor's terminal (release 2022-12-19) passes
// ^C typed on it on as a byte instead of interrupting the foreground (and
// never reads EIO once its process is gone, which the local runtime makes
// up for: local.OnGVisor). Under gVisor the supervisor turns ^C from the
// node into SIGINT to the process's session: the foreground group is not
// known through runtime.Process, but an interactive shell ignores SIGINT
// and a non-interactive one's background jobs ignore it too. On Linux it
// does not: the kernel's terminal does.

// writeTerminal writes what the node typed to p's terminal, turning each
// ^C into SIGINT to p.
func writeTerminal(p runtime.Process, b []byte) {
	for {
		i := bytes.IndexByte(b, 3)
		if i < 0 {
			if len(b) > 0 {
				_, _ = p.Write(b)
			}
			return
		}
		if i > 0 {
			_, _ = p.Write(b[:i])
		}
		_ = p.Signal(syscall.SIGINT)
		b = b[i+1:]
	}
}
