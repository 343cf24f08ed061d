package docker

import (
	"context"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// ListByExec lists p with the exec only; ok is false when List would
// have fallen back to the archive.
func (s *Sandbox) ListByExec(ctx context.Context, p string) (entries []commands.Entry, ok bool, err error) {
	r, err := s.resolve(ctx, p, false)
	if err != nil {
		return nil, false, err
	}
	return s.listExec(ctx, r)
}

// ParseListing exposes parseListing to the fuzz test.
var ParseListing = parseListing

// SplitPidHeader writes chunks through a pid header into a buffer and
// returns the pid and what passed.
func SplitPidHeader(chunks [][]byte) (int, []byte) {
	buf := &runtime.CappedBuffer{Max: 1 << 20}
	h := newPidHeader(buf)
	for _, c := range chunks {
		_, _ = h.Write(c)
	}
	h.end()
	<-h.known
	return h.pid(), buf.Bytes()
}

// ProcessPid returns the wrapper's pid (the session id) of a process that
// StartProcess returned through the Docker API; -1 for one through the
// supervisor, which has no wrapper.
func ProcessPid(p runtime.Process) int {
	if dp, ok := p.(*process); ok {
		return dp.hdr.pid()
	}
	return -1
}

// SetStaleAge sets the age past which the reaper removes a pool container
// no pool holds, and returns the undo.
func SetStaleAge(d time.Duration) func() {
	old := staleAge
	staleAge = d
	return func() { staleAge = old }
}

// SetReown turns the reown of a failed hydrate commit on or off, and
// returns the undo.
func SetReown(on bool) func() {
	old := reownOn
	reownOn = on
	return func() { reownOn = old }
}
