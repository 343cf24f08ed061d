package supervisor

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Errors a Conn ends with besides a protocol violation.
var (
	// ErrClosed is the error of a Conn that was closed by its own end.
	ErrClosed = errors.New("supervisor connection closed")
	// ErrSilent is the error of a node's Conn whose supervisor sent
	// nothing, not even a Pong, for Options.Silence.
	ErrSilent = errors.New("the supervisor stopped answering")
	// ErrFinished is what sending on a stream returns once its Result has
	// arrived (the supervisor answered before taking all the data).
	ErrFinished = errors.New("the supervisor has answered this call")
	// ErrAbandoned is what a stream's Recv returns after Abandon.
	ErrAbandoned = errors.New("the call was abandoned")
)

// Options configure a Conn. Zero durations take the defaults.
type Options struct {
	// Node says this is the node's end: it opens streams, pings, and
	// treats anything unexpected from the supervisor as a violation.
	Node bool
	// OnCall (supervisor's end) serves a stream the node opened with
	// call, in a goroutine of its own; it must end the stream with
	// Stream.Finish.
	OnCall func(s *Stream, call []byte)
	// PingEvery is how often the node pings (default 1s).
	PingEvery time.Duration
	// Silence is how long the node waits for any frame before it gives
	// the supervisor up (default 5s).
	Silence time.Duration
	// WriteTimeout bounds writing one frame (default 10s): a peer that
	// stops reading cannot hold a writer for longer.
	WriteTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.PingEvery == 0 {
		o.PingEvery = time.Second
	}
	if o.Silence == 0 {
		o.Silence = 5 * time.Second
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = 10 * time.Second
	}
	return o
}

// Conn is one connection between a node and a supervisor, carrying many
// streams at once. Its methods are safe for concurrent use. It owns two
// goroutines (the reader and, at the node's end, the pinger); Close stops
// them and waits for them.
type Conn struct {
	nc   net.Conn
	opts Options

	wmu  sync.Mutex // serialises frame writes; guards wbuf
	wbuf []byte

	mu      sync.Mutex // guards the fields below
	streams map[uint32]*Stream
	nextID  uint32
	err     error // why the conn ended; nil while it runs

	done     chan struct{} // closed once err is set
	lastRead atomic.Int64  // unix nanoseconds of the last frame read
	wg       sync.WaitGroup
}

// NewConn starts serving nc. The handshake (Hello) is the caller's: see
// Dial and Accept.
func NewConn(nc net.Conn, opts Options) *Conn {
	c := &Conn{nc: nc, opts: opts.withDefaults(), streams: map[uint32]*Stream{}, done: make(chan struct{})}
	c.lastRead.Store(time.Now().UnixNano())
	c.wg.Go(c.readLoop)
	if c.opts.Node {
		c.wg.Go(c.pingLoop)
	}
	return c
}

// Done is closed when the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended, or nil while it runs.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the connection and every stream on it (their calls get
// ErrClosed) and waits for its goroutines. It is idempotent.
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	c.wg.Wait()
	return nil
}

// fail ends the connection with err (the first error wins).
func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	streams := c.streams
	c.streams = map[uint32]*Stream{}
	close(c.done)
	c.mu.Unlock()
	_ = c.nc.Close()
	for _, s := range streams {
		s.end(err)
	}
}

// Open opens a stream with call (node's end) and returns it.
func (c *Conn) Open(ctx context.Context, call []byte) (*Stream, error) {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.nextID++
	s := newStream(c, c.nextID)
	c.streams[s.id] = s
	c.mu.Unlock()
	if err := c.write(Frame{Type: Call, Stream: s.id, Payload: call}); err != nil {
		return nil, err
	}
	return s, nil
}

// write writes one frame within WriteTimeout; a failure ends the conn.
func (c *Conn) write(f Frame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.Err(); err != nil {
		return err
	}
	c.wbuf = appendFrame(c.wbuf[:0], f)
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout))
	if _, err := c.nc.Write(c.wbuf); err != nil {
		err = fmt.Errorf("write a %s frame: %w", f.Type, err)
		c.fail(err)
		return err
	}
	if cap(c.wbuf) > 4*Chunk {
		c.wbuf = nil // keep no large buffer between frames
	}
	return nil
}

func (c *Conn) pingLoop() {
	t := time.NewTicker(c.opts.PingEvery)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		if time.Since(time.Unix(0, c.lastRead.Load())) > c.opts.Silence {
			c.fail(ErrSilent)
			return
		}
		_ = c.write(Frame{Type: Ping})
	}
}

func (c *Conn) readLoop() {
	br := bufio.NewReaderSize(c.nc, 64<<10)
	var hdr [headerSize]byte
	for {
		f, err := readFrame(br, &hdr)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				err = fmt.Errorf("%w: %w", ErrClosed, err)
			}
			c.fail(err)
			return
		}
		c.lastRead.Store(time.Now().UnixNano())
		if err := c.dispatch(f); err != nil {
			c.fail(err)
			return
		}
	}
}

// allowed says which frame types each end may receive.
func (c *Conn) allowed(t Type) bool {
	if c.opts.Node {
		switch t {
		case Pong, Data, Stderr, EOF, Ctl, Result, Ack:
			return true
		}
		return false
	}
	switch t {
	case Ping, Call, Data, EOF, Ctl, Cancel, Ack:
		return true
	}
	return false
}

func (c *Conn) dispatch(f Frame) error {
	if !c.allowed(f.Type) {
		return fmt.Errorf("%w: a %s frame is not allowed here", ErrProtocol, f.Type)
	}
	switch f.Type {
	case Ping:
		return c.write(Frame{Type: Pong})
	case Pong:
		return nil
	case Call:
		c.mu.Lock()
		if _, dup := c.streams[f.Stream]; dup || f.Stream == 0 {
			c.mu.Unlock()
			return fmt.Errorf("%w: a call reopens stream %d", ErrProtocol, f.Stream)
		}
		s := newStream(c, f.Stream)
		c.streams[f.Stream] = s
		c.mu.Unlock()
		if c.opts.OnCall == nil {
			s.Finish([]byte(`{"code":"unknown_op"}`))
			return nil
		}
		c.wg.Go(func() { c.opts.OnCall(s, f.Payload) })
		return nil
	}
	c.mu.Lock()
	s := c.streams[f.Stream]
	c.mu.Unlock()
	if s == nil {
		if c.opts.Node {
			return fmt.Errorf("%w: a %s frame on stream %d, which is not open", ErrProtocol, f.Type, f.Stream)
		}
		return nil // a late frame for a stream that has finished
	}
	return s.receive(f)
}

// forget removes a stream from the connection.
func (c *Conn) forget(s *Stream) {
	c.mu.Lock()
	if c.streams[s.id] == s {
		delete(c.streams, s.id)
	}
	c.mu.Unlock()
}

// Stream is one call and what flows on it. Recv is for one goroutine at a
// time; Send and the rest may be called from any.
type Stream struct {
	c  *Conn
	id uint32

	mu        sync.Mutex // guards the fields below
	q         []Frame    // received, not yet taken
	qBytes    int        // data bytes in q (or, abandoned, discarded)
	unacked   int        // data bytes taken, not yet acknowledged
	credit    int        // data bytes this end may still send
	err       error      // set when the stream has ended
	abandoned bool       // node's end: Cancel sent; frames are dropped
	finished  bool       // node's end: the Result has arrived
	signal    chan struct{}

	cancelled chan struct{} // supervisor's end: closed by Cancel or the conn's end
	cancelOne sync.Once
}

func newStream(c *Conn, id uint32) *Stream {
	return &Stream{c: c, id: id, credit: Window, signal: make(chan struct{}, 1), cancelled: make(chan struct{})}
}

func (s *Stream) notify() {
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// end ends the stream with err.
func (s *Stream) end(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.cancelOne.Do(func() { close(s.cancelled) })
	s.notify()
}

// Cancelled is closed when the node abandoned the stream or the
// connection ended (supervisor's end).
func (s *Stream) Cancelled() <-chan struct{} { return s.cancelled }

// receive queues f; called by the reader only.
func (s *Stream) receive(f Frame) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch f.Type {
	case Ack:
		if len(f.Payload) != 4 {
			return fmt.Errorf("%w: an ack of %d bytes", ErrProtocol, len(f.Payload))
		}
		n := int(binary.BigEndian.Uint32(f.Payload))
		if n > Window || s.credit+n > Window {
			return fmt.Errorf("%w: an ack for more than was sent", ErrProtocol)
		}
		s.credit += n
		s.notify()
		return nil
	case Cancel:
		s.cancelOne.Do(func() { close(s.cancelled) })
		s.notify()
		return nil
	}
	if f.Type == Data || f.Type == Stderr {
		s.qBytes += len(f.Payload)
		if s.qBytes+s.unacked > Window {
			return fmt.Errorf("%w: %d bytes unacknowledged on stream %d (the window is %d)", ErrProtocol, s.qBytes, s.id, Window)
		}
	}
	if s.abandoned {
		if f.Type == Result {
			go s.c.forget(s)
		}
		return nil
	}
	if f.Type == Result {
		s.finished = true
	}
	if len(s.q) >= MaxQueued {
		return fmt.Errorf("%w: over %d frames queued on stream %d", ErrProtocol, MaxQueued, s.id)
	}
	s.q = append(s.q, f)
	s.notify()
	return nil
}

// Recv returns the next frame on the stream: Data, Stderr, EOF, Ctl or
// (at the node's end) Result, which ends the stream. Once the stream has
// ended and its frames are taken it returns the stream's error; when ctx
// ends first, ctx's error.
func (s *Stream) Recv(ctx context.Context) (Frame, error) {
	for {
		s.mu.Lock()
		if len(s.q) > 0 {
			f := s.q[0]
			s.q[0] = Frame{}
			s.q = s.q[1:]
			var ack int
			if f.Type == Data || f.Type == Stderr {
				s.qBytes -= len(f.Payload)
				s.unacked += len(f.Payload)
				if s.unacked >= Window/2 || len(s.q) == 0 {
					ack, s.unacked = s.unacked, 0
				}
			}
			if f.Type == Result {
				s.err = io.EOF
			}
			s.mu.Unlock()
			if f.Type == Result {
				s.c.forget(s)
			}
			if ack > 0 {
				_ = s.c.write(Frame{Type: Ack, Stream: s.id, Payload: binary.BigEndian.AppendUint32(nil, uint32(ack))})
			}
			return f, nil
		}
		err := s.err
		s.mu.Unlock()
		if err != nil {
			return Frame{}, err
		}
		select {
		case <-s.signal:
		case <-ctx.Done():
			return Frame{}, ctx.Err()
		}
	}
}

// Send sends a frame on the stream. Data and Stderr wait for window
// credit (and must not exceed Chunk); ctx bounds the wait.
func (s *Stream) Send(ctx context.Context, t Type, payload []byte) error {
	if t == Data || t == Stderr {
		if len(payload) > Chunk {
			return fmt.Errorf("supervisor: a data frame of %d bytes (over %d)", len(payload), Chunk)
		}
		for {
			s.mu.Lock()
			if s.err != nil && s.err != io.EOF {
				err := s.err
				s.mu.Unlock()
				return err
			}
			if s.finished || s.err == io.EOF {
				s.mu.Unlock()
				return ErrFinished
			}
			if s.credit >= len(payload) {
				s.credit -= len(payload)
				s.mu.Unlock()
				break
			}
			s.mu.Unlock()
			select {
			case <-s.signal:
			case <-s.cancelled:
				if !s.c.opts.Node {
					return context.Canceled
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return s.c.write(Frame{Type: t, Stream: s.id, Payload: payload})
}

// Writer returns an io.Writer that sends what it is given as frames of
// type t (Data or Stderr) in chunks, within ctx.
func (s *Stream) Writer(ctx context.Context, t Type) io.Writer {
	return &streamWriter{s: s, ctx: ctx, t: t}
}

type streamWriter struct {
	s   *Stream
	ctx context.Context
	t   Type
}

func (w *streamWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		c := min(len(p), Chunk)
		if err := w.s.Send(w.ctx, w.t, p[:c]); err != nil {
			return n, err
		}
		n += c
		p = p[c:]
	}
	return n, nil
}

// Abandon (node's end) cancels the stream: the supervisor ends what runs
// for it; what it still sends is dropped. A stream whose Result has come
// is only forgotten by the connection (its holder may still take what it
// queued).
func (s *Stream) Abandon() {
	s.mu.Lock()
	if s.finished {
		s.mu.Unlock()
		s.c.forget(s) // nothing more comes on it; the conn keeps nothing of it
		return
	}
	if s.err != nil || s.abandoned {
		s.mu.Unlock()
		return
	}
	s.abandoned = true
	s.err = ErrAbandoned
	s.q = nil
	s.mu.Unlock()
	s.notify()
	_ = s.c.write(Frame{Type: Cancel, Stream: s.id})
}

// Finish (supervisor's end) sends the stream's Result and forgets it.
func (s *Stream) Finish(result []byte) {
	_ = s.c.write(Frame{Type: Result, Stream: s.id, Payload: result})
	s.end(io.EOF)
	s.c.forget(s)
}
