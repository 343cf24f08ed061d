package supervisor

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	poll "github.com/paddock-dev/paddock/testenv/wait"
)

// wait bounds every wait of these tests on a condition; the conditions
// come within milliseconds when the code is right.
const wait = 10 * time.Second

// peer is the raw far end of a Conn: the test writes whatever frames it
// likes and sees every frame the Conn writes. Its reader is stopped and
// waited for when the test ends.
type peer struct {
	t  *testing.T
	nc net.Conn
	in chan Frame // what the Conn wrote; closed when reading fails
}

func newPeer(t *testing.T, nc net.Conn) *peer {
	t.Helper()
	p := &peer{t: t, nc: nc, in: make(chan Frame, 1<<16)}
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(p.in)
		var hdr [headerSize]byte
		for {
			f, err := readFrame(nc, &hdr)
			if err != nil {
				return
			}
			p.in <- f
		}
	})
	t.Cleanup(func() {
		nc.Close()
		wg.Wait()
	})
	return p
}

// send writes frames; after the Conn has hung up it returns the error.
func (p *peer) send(frames ...Frame) error {
	var b []byte
	for _, f := range frames {
		b = appendFrame(b, f)
	}
	return p.sendRaw(b)
}

func (p *peer) sendRaw(b []byte) error {
	_ = p.nc.SetWriteDeadline(time.Now().Add(wait))
	_, err := p.nc.Write(b)
	return err
}

// expect returns the next frame the Conn wrote other than a Ping, which
// must be of type typ.
func (p *peer) expect(typ Type) Frame {
	p.t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case f, ok := <-p.in:
			if !ok {
				p.t.Fatalf("the connection ended while the peer waited for a %s frame", typ)
			}
			if f.Type == Ping && typ != Ping {
				continue
			}
			if f.Type != typ {
				p.t.Fatalf("got a %s frame, want %s", f.Type, typ)
			}
			return f
		case <-deadline:
			p.t.Fatalf("no %s frame within %s", typ, wait)
		}
	}
}

// hungUp waits until the Conn has closed its end.
func (p *peer) hungUp() {
	p.t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case _, ok := <-p.in:
			if !ok {
				return
			}
		case <-deadline:
			p.t.Fatalf("the connection was not closed within %s", wait)
		}
	}
}

// quiet are options under which a node neither pings nor gives up within
// a test.
var quiet = Options{Node: true, PingEvery: time.Hour, Silence: time.Hour}

// nodeConn returns a node's Conn with opts over a pipe whose far end is a
// raw peer.
func nodeConn(t *testing.T, opts Options) (*Conn, *peer) {
	t.Helper()
	a, b := net.Pipe()
	opts.Node = true
	c := NewConn(a, opts)
	t.Cleanup(func() { c.Close() })
	return c, newPeer(t, b)
}

// open opens a stream on the node's c and takes its Call at the peer.
func open(t *testing.T, c *Conn, p *peer) *Stream {
	t.Helper()
	st, err := c.Open(t.Context(), []byte(`{"op":"exec"}`))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if f := p.expect(Call); f.Stream != st.id {
		t.Fatalf("the call went on stream %d, want %d", f.Stream, st.id)
	}
	return st
}

func waitDone(t *testing.T, c *Conn) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(wait):
		t.Fatalf("the connection did not end within %s", wait)
	}
}

// drain reads st until Recv fails and returns that error.
func drain(t *testing.T, st *Stream) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	for {
		if _, err := st.Recv(ctx); err != nil {
			if ctx.Err() != nil {
				t.Fatalf("Recv did not fail within %s", wait)
			}
			return err
		}
	}
}

func ackOf(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }

// TestConnNodeViolations: everything a supervisor may not do ends the
// node's connection with ErrProtocol, and the calls on it get the error.
func TestConnNodeViolations(t *testing.T) {
	chunk := make([]byte, Chunk)
	many := func(n int, f Frame) []Frame {
		out := make([]Frame, n)
		for i := range out {
			out[i] = f
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		frames func(id uint32) []Frame
		raw    func(id uint32) []byte // sent instead of frames
	}{
		{name: "data on a stream never opened", frames: func(id uint32) []Frame {
			return []Frame{{Type: Data, Stream: id + 100, Payload: []byte("x")}}
		}},
		{name: "data on stream 0", frames: func(uint32) []Frame { return []Frame{{Type: Data, Payload: []byte("x")}} }},
		{name: "a result for a stream never opened", frames: func(id uint32) []Frame {
			return []Frame{{Type: Result, Stream: id + 100, Payload: []byte(`{}`)}}
		}},
		{name: "an ack on a stream never opened", frames: func(id uint32) []Frame {
			return []Frame{{Type: Ack, Stream: id + 100, Payload: ackOf(1)}}
		}},
		{name: "a call to the node", frames: func(id uint32) []Frame {
			return []Frame{{Type: Call, Stream: id + 1, Payload: []byte(`{"op":"exec"}`)}}
		}},
		{name: "a ping to the node", frames: func(uint32) []Frame { return []Frame{{Type: Ping}} }},
		{name: "a second hello", frames: func(uint32) []Frame { return []Frame{{Type: Hello, Payload: []byte(`{"version":1}`)}} }},
		{name: "a cancel to the node", frames: func(id uint32) []Frame { return []Frame{{Type: Cancel, Stream: id}} }},
		{name: "data beyond the window in one frame", frames: func(id uint32) []Frame {
			return []Frame{{Type: Data, Stream: id, Payload: make([]byte, Window+1)}}
		}},
		{name: "data beyond the window over frames", frames: func(id uint32) []Frame {
			return append(many(Window/Chunk, Frame{Type: Data, Stream: id, Payload: chunk}), Frame{Type: Stderr, Stream: id, Payload: []byte("x")})
		}},
		{name: "an ack of 3 bytes", frames: func(id uint32) []Frame { return []Frame{{Type: Ack, Stream: id, Payload: []byte{0, 0, 1}}} }},
		{name: "an ack of 5 bytes", frames: func(id uint32) []Frame { return []Frame{{Type: Ack, Stream: id, Payload: []byte{0, 0, 0, 0, 1}}} }},
		{name: "an empty ack", frames: func(id uint32) []Frame { return []Frame{{Type: Ack, Stream: id}} }},
		{name: "an ack for data never sent", frames: func(id uint32) []Frame { return []Frame{{Type: Ack, Stream: id, Payload: ackOf(1)}} }},
		{name: "an ack of 4 GiB", frames: func(id uint32) []Frame { return []Frame{{Type: Ack, Stream: id, Payload: ackOf(1<<32 - 1)}} }},
		{name: "more than MaxQueued frames", frames: func(id uint32) []Frame { return many(MaxQueued+1, Frame{Type: Ctl, Stream: id}) }},
		{name: "a header claiming 2 GiB", raw: func(id uint32) []byte { return header(2<<30, Data, id) }},
		{name: "an unknown type", raw: func(id uint32) []byte { return header(0, 42, id) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, p := nodeConn(t, quiet)
			st := open(t, c, p)
			other := open(t, c, p)
			if tc.raw != nil {
				_ = p.sendRaw(tc.raw(st.id)) // fails once the node hangs up
			} else {
				_ = p.send(tc.frames(st.id)...)
			}
			waitDone(t, c)
			if err := c.Err(); !errors.Is(err, ErrProtocol) {
				t.Fatalf("the connection ended with %v, want ErrProtocol", err)
			}
			for _, s := range []*Stream{st, other} {
				if err := drain(t, s); !errors.Is(err, ErrProtocol) {
					t.Errorf("Recv on stream %d: got %v, want ErrProtocol", s.id, err)
				}
			}
			if _, err := c.Open(t.Context(), []byte(`{}`)); !errors.Is(err, ErrProtocol) {
				t.Errorf("Open after the violation: got %v, want ErrProtocol", err)
			}
			p.hungUp()
		})
	}
}

// TestConnViolationWakesCalls: calls blocked in Recv when the supervisor
// breaks the protocol return at once with the error.
func TestConnViolationWakesCalls(t *testing.T) {
	c, p := nodeConn(t, quiet)
	const n = 5
	errs := make(chan error, n)
	for range n {
		st := open(t, c, p)
		go func() {
			_, err := st.Recv(context.Background()) // the conn's end ends it
			errs <- err
		}()
	}
	_ = p.send(Frame{Type: Data, Stream: 999, Payload: []byte("x")})
	for range n {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrProtocol) {
				t.Errorf("Recv: got %v, want ErrProtocol", err)
			}
		case <-time.After(wait):
			t.Fatalf("a Recv did not return within %s", wait)
		}
	}
}

// TestConnSilent: a supervisor that answers no ping is given up with
// ErrSilent, and the calls on it get that error.
func TestConnSilent(t *testing.T) {
	c, p := nodeConn(t, Options{PingEvery: 5 * time.Millisecond, Silence: 50 * time.Millisecond})
	st := open(t, c, p)
	p.expect(Ping) // it asks, the peer never answers
	waitDone(t, c)
	if err := c.Err(); !errors.Is(err, ErrSilent) {
		t.Fatalf("the connection ended with %v, want ErrSilent", err)
	}
	if err := drain(t, st); !errors.Is(err, ErrSilent) {
		t.Errorf("Recv: got %v, want ErrSilent", err)
	}
	p.hungUp()
}

// TestConnPongKeepsAlive: a supervisor that answers pings is kept well
// past the silence bound.
func TestConnPongKeepsAlive(t *testing.T) {
	const every, silence = 10 * time.Millisecond, 500 * time.Millisecond
	c, p := nodeConn(t, Options{PingEvery: every, Silence: silence})
	start := time.Now()
	for pongs := 0; time.Since(start) < 3*silence; pongs++ {
		p.expect(Ping)
		if err := p.send(Frame{Type: Pong}); err != nil {
			t.Fatalf("after %d pongs in %s: %v (the conn: %v)", pongs, time.Since(start), err, c.Err())
		}
	}
	if err := c.Err(); err != nil {
		t.Fatalf("the connection ended: %v", err)
	}
}

// TestConnSupervisorEnd: the supervisor's end answers pings, drops late
// frames for streams it has finished, and refuses what only a supervisor
// sends.
func TestConnSupervisorEnd(t *testing.T) {
	start := func(t *testing.T) (*Conn, *peer) {
		a, b := net.Pipe()
		c := NewConn(a, Options{OnCall: func(s *Stream, _ []byte) { s.Finish([]byte(`{}`)) }})
		t.Cleanup(func() { c.Close() })
		return c, newPeer(t, b)
	}
	t.Run("serves", func(t *testing.T) {
		c, p := start(t)
		_ = p.send(Frame{Type: Ping})
		p.expect(Pong)
		_ = p.send(Frame{Type: Call, Stream: 1, Payload: []byte(`{}`)})
		if f := p.expect(Result); f.Stream != 1 {
			t.Errorf("the result went on stream %d, want 1", f.Stream)
		}
		_ = p.send(Frame{Type: Data, Stream: 1, Payload: []byte("late")}, Frame{Type: Cancel, Stream: 7}, Frame{Type: Ping})
		p.expect(Pong)
		if err := c.Err(); err != nil {
			t.Errorf("the connection ended: %v", err)
		}
	})
	for _, f := range []Frame{
		{Type: Result, Stream: 1}, {Type: Pong}, {Type: Stderr, Stream: 1}, {Type: Hello},
		{Type: Call, Stream: 0}, // stream 0 is the connection's
	} {
		t.Run(f.Type.String(), func(t *testing.T) {
			c, p := start(t)
			_ = p.send(f)
			waitDone(t, c)
			if err := c.Err(); !errors.Is(err, ErrProtocol) {
				t.Errorf("got %v, want ErrProtocol", err)
			}
		})
	}
	t.Run("a call that reopens a stream", func(t *testing.T) {
		a, b := net.Pipe()
		release := make(chan struct{})
		c := NewConn(a, Options{OnCall: func(s *Stream, _ []byte) { <-release; s.Finish(nil) }})
		t.Cleanup(func() { close(release); c.Close() })
		p := newPeer(t, b)
		_ = p.send(Frame{Type: Call, Stream: 3}, Frame{Type: Call, Stream: 3})
		waitDone(t, c)
		if err := c.Err(); !errors.Is(err, ErrProtocol) {
			t.Errorf("got %v, want ErrProtocol", err)
		}
	})
}

// pair returns a node's Conn and a supervisor's Conn serving calls with
// onCall, over a pipe.
func pair(t *testing.T, onCall func(s *Stream, call []byte)) (node, sup *Conn) {
	t.Helper()
	a, b := net.Pipe()
	node = NewConn(a, quiet)
	sup = NewConn(b, Options{OnCall: onCall})
	t.Cleanup(func() {
		node.Close()
		sup.Close()
	})
	return node, sup
}

// TestConnEcho: a megabyte goes to the supervisor and back through the
// windows, and the stream ends with its Result and is forgotten.
func TestConnEcho(t *testing.T) {
	node, _ := pair(t, func(s *Stream, _ []byte) {
		ctx := context.Background() // the stream's end (Cancelled) ends the copy
		n, err := io.Copy(s.Writer(ctx, Data), &streamReader{s: s, ctx: ctx})
		if err != nil {
			s.Finish([]byte(`{"code":"runtime_error"}`))
			return
		}
		s.Finish([]byte(`{"size":` + strconv.FormatInt(n, 10) + `}`))
	})
	st, err := node.Open(t.Context(), []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 1<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	sent := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_, err := st.Writer(ctx, Data).Write(want)
		if err == nil {
			err = st.Send(ctx, EOF, nil)
		}
		sent <- err
	}()
	var got bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	for {
		f, err := st.Recv(ctx)
		if err != nil {
			t.Fatalf("Recv after %d bytes: %v", got.Len(), err)
		}
		if f.Type == Result {
			if string(f.Payload) != `{"size":1048576}` {
				t.Errorf("result: got %s", f.Payload)
			}
			break
		}
		got.Write(f.Payload)
	}
	if err := <-sent; err != nil {
		t.Errorf("send: %v", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("got %d bytes back, not the %d sent", got.Len(), len(want))
	}
	if _, err := st.Recv(ctx); err != io.EOF {
		t.Errorf("Recv after the result: got %v, want io.EOF", err)
	}
	if err := st.Send(ctx, Data, []byte("x")); !errors.Is(err, ErrFinished) {
		t.Errorf("Send after the result: got %v, want ErrFinished", err)
	}
	if n := openStreams(node); n != 0 {
		t.Errorf("%d streams left open", n)
	}
}

func openStreams(c *Conn) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.streams)
}

// TestConnFlowControl: a sender of data blocks once it has a window
// unacknowledged and goes on when the receiver has taken it.
func TestConnFlowControl(t *testing.T) {
	chunk := make([]byte, Chunk)
	// blocked checks that one more chunk does not go within a short bound:
	// the receiver has taken nothing, so the sender has no credit at all.
	blocked := func(s *Stream) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		return s.Send(ctx, Data, chunk)
	}
	t.Run("supervisor to node", func(t *testing.T) {
		got := make(chan error, 2)
		node, _ := pair(t, func(s *Stream, _ []byte) {
			defer s.Finish([]byte(`{}`))
			for range Window / Chunk {
				if err := s.Send(context.Background(), Data, chunk); err != nil {
					got <- err
					return
				}
			}
			got <- blocked(s)
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			got <- s.Send(ctx, Data, chunk) // once the node takes data
		})
		st, err := node.Open(t.Context(), []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		if err := <-got; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a chunk past the window: got %v, want it blocked", err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		defer cancel()
		n := 0
		for {
			f, err := st.Recv(ctx)
			if err != nil {
				t.Fatalf("Recv: %v", err)
			}
			if f.Type == Result {
				break
			}
			n += len(f.Payload)
		}
		if err := <-got; err != nil {
			t.Errorf("the chunk after the acks: %v", err)
		}
		if n != Window+Chunk {
			t.Errorf("got %d bytes, want %d", n, Window+Chunk)
		}
	})
	t.Run("node to supervisor", func(t *testing.T) {
		take := make(chan struct{})
		var took int
		done := make(chan struct{})
		node, _ := pair(t, func(s *Stream, _ []byte) {
			defer close(done)
			<-take
			n, _ := io.Copy(io.Discard, &streamReader{s: s, ctx: context.Background()})
			took = int(n)
			s.Finish([]byte(`{}`))
		})
		var once sync.Once
		release := func() { once.Do(func() { close(take) }) }
		t.Cleanup(release) // before the conns close: the handler must end for Close to return
		st, err := node.Open(t.Context(), []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		for range Window / Chunk {
			if err := st.Send(t.Context(), Data, chunk); err != nil {
				t.Fatal(err)
			}
		}
		if err := blocked(st); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a chunk past the window: got %v, want it blocked", err)
		}
		release()
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		defer cancel()
		if err := st.Send(ctx, Data, chunk); err != nil {
			t.Fatalf("the chunk after the acks: %v", err)
		}
		if err := st.Send(ctx, EOF, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("the supervisor did not finish")
		}
		if took != Window+Chunk {
			t.Errorf("the supervisor took %d bytes, want %d", took, Window+Chunk)
		}
	})
}

// TestConnAbandon: an abandoned call cancels the supervisor's work, what
// the supervisor still sends on it is dropped without a violation, and the
// node forgets the stream once its Result comes.
func TestConnAbandon(t *testing.T) {
	node, _ := pair(t, func(s *Stream, call []byte) {
		if string(call) == "abandon me" {
			<-s.Cancelled()
			_ = s.Send(context.Background(), Data, []byte("late")) // dropped
		}
		s.Finish([]byte(`{}`))
	})
	st, err := node.Open(t.Context(), []byte("abandon me"))
	if err != nil {
		t.Fatal(err)
	}
	st.Abandon()
	st.Abandon() // idempotent
	if _, err := st.Recv(t.Context()); !errors.Is(err, ErrAbandoned) {
		t.Errorf("Recv after Abandon: got %v, want ErrAbandoned", err)
	}
	eventually(t, func() bool { return openStreams(node) == 0 })
	if err := node.Err(); err != nil {
		t.Fatalf("the connection ended: %v", err)
	}
	next, err := node.Open(t.Context(), []byte("answer"))
	if err != nil {
		t.Fatal(err)
	}
	if f, err := next.Recv(t.Context()); err != nil || f.Type != Result {
		t.Errorf("the next call: got %s, %v, want its result", f.Type, err)
	}
}

// TestConnAbandonAfterResult: abandoning a call whose Result has come but
// was not taken (a reader that stops at a bound, as the node's read does
// when a supervisor sends more than asked) forgets the stream: the
// connection keeps nothing for calls the node has given up.
func TestConnAbandonAfterResult(t *testing.T) {
	c, p := nodeConn(t, quiet)
	st := open(t, c, p)
	_ = p.send(Frame{Type: Data, Stream: st.id, Payload: make([]byte, Chunk)}, Frame{Type: Result, Stream: st.id, Payload: []byte(`{}`)})
	eventually(t, func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.finished
	})
	st.Abandon()
	if n := openStreams(c); n != 0 {
		t.Errorf("%d streams left open after Abandon", n)
	}
	if err := c.Err(); err != nil {
		t.Errorf("the connection ended: %v", err)
	}
	// Its holder may still take what came.
	for _, want := range []Type{Data, Result} {
		if f, err := st.Recv(t.Context()); err != nil || f.Type != want {
			t.Errorf("Recv after Abandon: got %s, %v, want %s", f.Type, err, want)
		}
	}
}

// TestConnClose: Close is idempotent, ends pending calls with ErrClosed
// and refuses new ones.
func TestConnClose(t *testing.T) {
	c, p := nodeConn(t, quiet)
	st := open(t, c, p)
	c.Close()
	c.Close()
	if err := drain(t, st); !errors.Is(err, ErrClosed) {
		t.Errorf("Recv: got %v, want ErrClosed", err)
	}
	if _, err := c.Open(t.Context(), nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Open: got %v, want ErrClosed", err)
	}
	p.hungUp()
}

// TestConnPeerHangsUp: a supervisor that goes away ends the connection
// with ErrClosed, not a violation.
func TestConnPeerHangsUp(t *testing.T) {
	c, p := nodeConn(t, quiet)
	st := open(t, c, p)
	p.nc.Close()
	waitDone(t, c)
	if err := c.Err(); !errors.Is(err, ErrClosed) || errors.Is(err, ErrProtocol) {
		t.Errorf("got %v, want ErrClosed", err)
	}
	if err := drain(t, st); !errors.Is(err, ErrClosed) {
		t.Errorf("Recv: got %v, want ErrClosed", err)
	}
}

// eventually waits for cond, polling, up to wait (testenv/wait's
// Eventually: this package's tests cannot import testenv, which imports
// the node and so this package).
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	poll.Eventually(t, wait, func() error {
		if !cond() {
			return errors.New("not yet")
		}
		return nil
	})
}

// FuzzNodeConn: whatever a supervisor sends after a call, the node's
// Conn never panics, and once the supervisor hangs up the connection has
// ended and the call's Recv returns.
func FuzzNodeConn(f *testing.F) {
	f.Add(appendFrame(nil, Frame{Type: Result, Stream: 1, Payload: []byte(`{}`)}))
	f.Add(appendFrame(appendFrame(nil, Frame{Type: Data, Stream: 1, Payload: []byte("out")}), Frame{Type: Ack, Stream: 1, Payload: ackOf(0)}))
	f.Add(appendFrame(nil, Frame{Type: Pong}))
	f.Add(appendFrame(nil, Frame{Type: Ack, Stream: 1, Payload: ackOf(7)}))
	f.Add(header(2<<30, Data, 1))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, in []byte) {
		a, b := net.Pipe()
		c := NewConn(a, quiet)
		defer c.Close()
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() { _, _ = io.Copy(io.Discard, b) })
		st, err := c.Open(context.Background(), []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		_ = b.SetWriteDeadline(time.Now().Add(wait))
		_, _ = b.Write(in)
		b.Close()
		select {
		case <-c.Done():
		case <-time.After(wait):
			t.Fatal("the connection did not end after the peer hung up")
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		for {
			if _, err := st.Recv(ctx); err != nil {
				if ctx.Err() != nil {
					t.Fatal("Recv did not return after the connection ended")
				}
				break
			}
		}
	})
}
