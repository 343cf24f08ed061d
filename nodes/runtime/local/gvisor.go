package local

import (
	"os"
	"path"
	"path/filepath"
	"sync"

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
