package runtime

import (
	"bytes"
	"io"
	"os"
	"sync"

	"github.com/paddock-dev/paddock/errcode"
)

// ExitedError is the error of an operation on a process that has exited
// (invalid_state).
func ExitedError(op string) error {
	return errcode.New(errcode.InvalidState, "process: %s: the process has exited", op)
}

// OutPipe carries a process's output from the goroutine that copies its
// stream to the process's Read: a pipe that holds up to max bytes, so that the copying
// waits for the reader only past them.
type OutPipe struct {
	mu     sync.Mutex
	cond   sync.Cond // on mu: signalled when any field below changes
	buf    bytes.Buffer
	max    int
	end    error // io.EOF, or why the stream broke, once the copying ended
	closed bool  // Close ran
}

// Init readies an OutPipe that holds up to limit bytes; call it once,
// before any other method.
func (o *OutPipe) Init(limit int) {
	o.max = limit
	o.cond.L = &o.mu
}

// ErrProcessClosed is what Read and Write return after Close
// (invalid_state, wrapping os.ErrClosed).
var ErrProcessClosed = errcode.Wrap(errcode.InvalidState, os.ErrClosed, "process: closed")

// Write adds p, waiting while the buffer is full; after close it fails.
func (o *OutPipe) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for len(p) > 0 {
		for o.buf.Len() >= o.max && !o.closed {
			o.cond.Wait()
		}
		if o.closed {
			return n, ErrProcessClosed
		}
		k := min(len(p), o.max-o.buf.Len())
		o.buf.Write(p[:k])
		p, n = p[k:], n+k
		o.cond.Broadcast()
	}
	return n, nil
}

// Read takes what is buffered, waiting until there is some, the output
// ended (end, once the buffer is drained) or Close ran (ErrProcessClosed).
func (o *OutPipe) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for o.buf.Len() == 0 && o.end == nil && !o.closed {
		o.cond.Wait()
	}
	switch {
	case o.closed:
		return 0, ErrProcessClosed
	case o.buf.Len() == 0:
		return 0, o.end
	}
	n, _ := o.buf.Read(p)
	o.cond.Broadcast()
	return n, nil
}

// Finish marks the end of the output: io.EOF for a nil err.
func (o *OutPipe) Finish(err error) {
	if err == nil {
		err = io.EOF
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.end = err
	o.cond.Broadcast()
}

// Close makes Read and Write fail from now on and drops what is buffered.
func (o *OutPipe) Close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	o.buf = bytes.Buffer{}
	o.cond.Broadcast()
}

// Peek returns a copy of what is buffered.
func (o *OutPipe) Peek() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return bytes.Clone(o.buf.Bytes())
}
