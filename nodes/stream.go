package nodes

import (
	"context"
	"sync"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
)

// A streaming exec (ExecArgs.Stream) keeps its output, as it comes and
// redacted, in an outStream under the exec's command id until exec_read
// has taken it. The stream holds at most Config.StreamBufferBytes that
// nobody has acknowledged: past that the runtime's copy of the output
// waits, so the command waits on its pipe (a slow reader slows the
// command down, it never grows the node). A stream nobody reads for
// Config.StreamIdleTimeout is dropped: the command goes on, its output
// only in its reply.

// streams are a session's streaming execs, by command id.
type streams struct {
	mu  sync.Mutex
	all map[string]*outStream
}

func (ss *streams) add(id string, o *outStream) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.all == nil {
		ss.all = map[string]*outStream{}
	}
	ss.all[id] = o
}

func (ss *streams) get(id string) *outStream {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.all[id]
}

func (ss *streams) drop(id string, o *outStream) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.all[id] == o {
		delete(ss.all, id)
	}
}

// outStream is the output of one streaming exec.
type outStream struct {
	max  int
	idle time.Duration
	r    redactor

	mu        sync.Mutex
	chunks    []commands.OutputChunk // not yet acknowledged
	held      int                    // their bytes
	seq       int64
	pending   [2][]byte // per stream: a tail that may begin a secret
	done      bool
	abandoned bool
	lastRead  time.Time
	changed   chan struct{}
}

func newOutStream(max int, idle time.Duration, r redactor) *outStream {
	return &outStream{max: max, idle: idle, r: r, lastRead: time.Now(), changed: make(chan struct{})}
}

func (o *outStream) notify() {
	close(o.changed)
	o.changed = make(chan struct{})
}

// write takes output of the command (the runtime's Output hook). It
// blocks while the buffer is full, until a reader makes room or the
// stream is abandoned.
func (o *outStream) write(stderr bool, p []byte) {
	i := 0
	if stderr {
		i = 1
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for !o.abandoned && o.held >= o.max {
		changed := o.changed
		wait := o.idle - time.Since(o.lastRead)
		if wait <= 0 {
			o.abandon()
			break
		}
		o.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-changed:
		case <-t.C:
		}
		t.Stop()
		o.mu.Lock()
	}
	if o.abandoned {
		return
	}
	buf := append(o.pending[i], p...)
	keep := o.r.partial(buf)
	o.pending[i] = append([]byte(nil), buf[len(buf)-keep:]...)
	o.emit(i, buf[:len(buf)-keep])
}

// emit appends a chunk of stream i (o.mu held).
func (o *outStream) emit(i int, b []byte) {
	if len(b) == 0 {
		return
	}
	b = o.r.bytes(b)
	name := "stdout"
	if i == 1 {
		name = "stderr"
	}
	for len(b) > 0 { // no chunk larger than one read returns
		n := min(len(b), commands.MaxStreamReadBytes)
		o.seq++
		o.chunks = append(o.chunks, commands.OutputChunk{Seq: o.seq, Stream: name, Data: append([]byte(nil), b[:n]...)})
		o.held += n
		b = b[n:]
	}
	o.notify()
}

// abandon drops what is held and stops keeping output (o.mu held).
func (o *outStream) abandon() {
	o.abandoned = true
	o.chunks, o.held = nil, 0
	o.notify()
}

// finish marks the command ended, giving out what was held back.
func (o *outStream) finish() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.abandoned {
		for i := range o.pending {
			o.emit(i, o.pending[i])
			o.pending[i] = nil
		}
	}
	o.done = true
	o.notify()
}

// read acknowledges the chunks up to after and returns those past it, up
// to MaxStreamReadBytes, waiting up to wait for one.
func (o *outStream) read(ctx context.Context, after int64, wait time.Duration) commands.ExecReadResult {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lastRead = time.Now()
	n := 0
	for n < len(o.chunks) && o.chunks[n].Seq <= after {
		o.held -= len(o.chunks[n].Data)
		n++
	}
	if n > 0 {
		o.chunks = append(o.chunks[:0], o.chunks[n:]...)
		o.notify() // room for the writer
	}
	for len(o.chunks) == 0 && !o.done && !o.abandoned {
		changed := o.changed
		o.mu.Unlock()
		expired := false
		select {
		case <-changed:
		case <-deadline.C:
			expired = true
		case <-ctx.Done():
			expired = true
		}
		o.mu.Lock()
		if expired {
			break
		}
	}
	o.lastRead = time.Now()
	res := commands.ExecReadResult{Chunks: []commands.OutputChunk{}}
	size := 0
	for _, c := range o.chunks {
		if size+len(c.Data) > commands.MaxStreamReadBytes {
			break
		}
		res.Chunks = append(res.Chunks, c)
		size += len(c.Data)
	}
	res.Done = (o.done || o.abandoned) && len(res.Chunks) == len(o.chunks)
	return res
}

func execReadStart(_ *Agent, _ *session, args *commands.ExecReadArgs) any {
	return events.ExecReadStart{ExecCommandID: args.ExecCommandID, After: args.After}
}

func runExecRead(ctx context.Context, _ *Agent, s *session, args *commands.ExecReadArgs) (outcome, error) {
	wait := int64(1000)
	if args.WaitMS != nil {
		wait = *args.WaitMS
	}
	o := s.streams.get(args.ExecCommandID)
	if o == nil {
		res := commands.ExecReadResult{Chunks: []commands.OutputChunk{}, Unknown: true}
		return outcome{result: res, data: events.ExecReadFinish{Unknown: true}}, nil
	}
	res := o.read(ctx, args.After, time.Duration(wait)*time.Millisecond)
	if res.Done {
		s.streams.drop(args.ExecCommandID, o)
	}
	var n int64
	for _, c := range res.Chunks {
		n += int64(len(c.Data))
	}
	return outcome{result: res, data: events.ExecReadFinish{Chunks: len(res.Chunks), Bytes: n, Done: res.Done}}, nil
}

// startStream registers the output stream of a streaming exec, or says
// why it cannot be one.
func (a *Agent) startStream(s *session, commandID string) (*outStream, error) {
	if commandID == "" {
		return nil, errcode.New(errcode.InvalidRequest, "a streaming exec needs a command id: exec_read names it by it")
	}
	o := newOutStream(a.cfg.StreamBufferBytes, a.cfg.StreamIdleTimeout, s.redactor())
	s.streams.add(commandID, o)
	return o, nil
}

// endStream marks a streaming exec ended; its stream stays until a reader
// has taken everything, or it has been unread for StreamIdleTimeout.
func (a *Agent) endStream(s *session, commandID string, o *outStream) {
	o.finish()
	time.AfterFunc(a.cfg.StreamIdleTimeout, func() { s.streams.drop(commandID, o) })
}
