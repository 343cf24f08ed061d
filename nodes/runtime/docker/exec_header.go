package docker

import (
	"slices"
	"sync"

	"github.com/paddock-dev/paddock/nodes/runtime"
)

// pidHeader takes the wrapper's first line of stdout (its pid) off the
// stream and passes the rest on. A stream that does not start with a pid
// line is passed on whole (the wrapper did not run).
type pidHeader struct {
	dst   *runtime.CappedBuffer
	known chan struct{} // closed once the header is read or known absent

	mu   sync.Mutex // guards the fields below
	buf  []byte
	done bool
	n    int
}

func newPidHeader(dst *runtime.CappedBuffer) *pidHeader {
	return &pidHeader{dst: dst, known: make(chan struct{})}
}

// maxPidLine bounds the header line.
const maxPidLine = 24

// Write implements io.Writer for stdcopy.
func (h *pidHeader) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return h.dst.Write(p)
	}
	i := slices.Index(p, '\n')
	if i < 0 && len(h.buf)+len(p) <= maxPidLine {
		h.buf = append(h.buf, p...)
		return len(p), nil
	}
	if i >= 0 {
		line := append(h.buf, p[:i]...)
		if n, ok := parsePid(line); ok {
			h.n = n
			h.finish()
			_, _ = h.dst.Write(p[i+1:])
			return len(p), nil
		}
	}
	// Not a pid line: the stream is the engine's or the program's own.
	_, _ = h.dst.Write(h.buf)
	h.finish()
	return h.dst.Write(p)
}

// end marks the stream's end: a header still incomplete is passed on.
func (h *pidHeader) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.done {
		_, _ = h.dst.Write(h.buf)
		h.finish()
	}
}

// finish marks the header known. h.mu must be held.
func (h *pidHeader) finish() {
	h.done, h.buf = true, nil
	close(h.known)
}

// pid returns the wrapper's pid, or 0 if it is not (yet) known.
func (h *pidHeader) pid() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

func parsePid(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 10 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n > 0
}
