package local

import (
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paddock-dev/paddock/errcode"
)

// The local runtime also serves the in-sandbox supervisor of the Docker
// runtime, which may run under gVisor (the gvisor runtime). gVisor's
// kernel (release 2022-12-19) differs from Linux in a way this package
// depends on; the helpers below make up for it and do nothing on Linux.

// nofollowDirFollows reports whether this kernel follows a symlink that
// openat is asked to open with O_NOFOLLOW|O_DIRECTORY (gVisor does; Linux
// refuses with ENOTDIR or ELOOP). os.Root opens every directory on a path
// that way, so on such a kernel it would follow an absolute or escaping
// symlink in the middle of a path. Probed once; when the probe cannot run,
// it assumes the worst.
var nofollowDirFollows = sync.OnceValue(func() bool {
	dir, err := os.MkdirTemp("", "paddock-nofollow-")
	if err != nil {
		return true
	}
	defer os.RemoveAll(dir)
	link := filepath.Join(dir, "l")
	if err := os.Symlink(".", link); err != nil {
		return true
	}
	fd, err := unix.Open(link, unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
})

// checkParents refuses rel when a symlink among its parent directories
// leads outside the workspace, on a kernel where os.Root cannot see it
// (nofollowDirFollows); the last component is os.Root's to handle. A
// sandbox's process that swaps a directory for a symlink between this
// check and the operation acts with its own rights (the supervisor runs as
// the sandbox's user), inside its own kernel.
func (s *Sandbox) checkParents(rel string) error {
	if !nofollowDirFollows() {
		return nil
	}
	if parent := path.Dir(rel); parent != "." && s.walk(parent) == walkEscapes {
		return errcode.New(errcode.InvalidPath, "%s leads outside the workspace", rel)
	}
	return nil
}

// gvisorVersion is the version (uname -v) gVisor's kernel reports.
const gvisorVersion = "#1 SMP Sun Jan 10 15:06:54 PST 2016"

// OnGVisor reports whether this process runs on gVisor's kernel (release
// 4.4.0 with gVisor's version string), whose terminals differ from
// Linux's: a pty master never reads EIO once its process is gone, and ^C
// typed on it does not interrupt the foreground. Checked once.
var OnGVisor = sync.OnceValue(func() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	return unix.ByteSliceToString(u.Release[:]) == "4.4.0" && unix.ByteSliceToString(u.Version[:]) == gvisorVersion
})

// readTerminal reads a pty master on gVisor (see OnGVisor): it polls the
// master, and once the process has been reaped (which kills what was left
// in its session, so nothing holds the terminal any more) a poll that
// finds nothing to read is the end of the output, as EIO is on Linux.
func (p *process) readTerminal(b []byte) (int, error) {
	sc, err := p.out.SyscallConn()
	if err != nil {
		return 0, io.EOF // closed
	}
	for {
		reaped := false
		select {
		case <-p.exited:
			reaped = true
		default:
		}
		var n int
		var ready bool
		var rerr error
		cerr := sc.Control(func(fd uintptr) {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if _, err := unix.Poll(fds, int(terminalPoll/time.Millisecond)); err != nil {
				return // EINTR: poll again
			}
			if fds[0].Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR) != 0 {
				ready = true
				n, rerr = unix.Read(int(fd), b)
			}
		})
		switch {
		case cerr != nil: // the master was closed
			return 0, io.EOF
		case ready && n > 0:
			return n, nil
		case ready && errors.Is(rerr, unix.EAGAIN):
			continue
		case ready: // EIO, or the end
			return 0, io.EOF
		case reaped:
			return 0, io.EOF
		}
	}
}

// terminalPoll is how long readTerminal waits in one poll.
const terminalPoll = 100 * time.Millisecond
