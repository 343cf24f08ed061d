package docker

import (
	"bytes"
	"io"
	"slices"
)

// pidHeader takes the wrapper's first line of stdout (its pid) off the
// stream and passes the rest on. A stream that does not start with a pid
// line is passed on whole (the wrapper did not run). The line may end in
// "\r\n", as a terminal writes it.
//
// Write and end are called by one goroutine (the one that copies the
// stream); pid and known may be used from any. dst may block (a process's
// output waits for its reader): nothing is locked while it does.
type pidHeader struct {
	dst   io.Writer
	known chan struct{} // closed once the header is read or known absent

	// Owned by the writing goroutine.
	buf  []byte
	done bool
	n    int // set before known is closed
}

func newPidHeader(dst io.Writer) *pidHeader {
	return &pidHeader{dst: dst, known: make(chan struct{})}
}

// maxPidLine bounds the header line.
const maxPidLine = 24

// Write implements io.Writer for stdcopy.
func (h *pidHeader) Write(p []byte) (int, error) {
	if h.done {
		return h.dst.Write(p)
	}
	i := slices.Index(p, '\n')
	if i < 0 && len(h.buf)+len(p) <= maxPidLine {
		h.buf = append(h.buf, p...)
		return len(p), nil
	}
	if i >= 0 {
		line := bytes.TrimSuffix(append(h.buf, p[:i]...), []byte{'\r'})
		if n, ok := parsePid(line); ok {
			h.n = n
			h.finish()
			if _, err := h.dst.Write(p[i+1:]); err != nil {
				return 0, err
			}
			return len(p), nil
		}
	}
	// Not a pid line: the stream is the engine's or the program's own.
	held := h.buf
	h.finish()
	if _, err := h.dst.Write(held); err != nil {
		return 0, err
	}
	return h.dst.Write(p)
}

// end marks the stream's end: a header still incomplete is passed on.
func (h *pidHeader) end() {
	if !h.done {
		held := h.buf
		h.finish()
		_, _ = h.dst.Write(held)
	}
}

// finish marks the header known.
func (h *pidHeader) finish() {
	h.done, h.buf = true, nil
	close(h.known)
}

// pid returns the wrapper's pid, or 0 if it is not (yet) known.
func (h *pidHeader) pid() int {
	select {
	case <-h.known:
		return h.n
	default:
		return 0
	}
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
