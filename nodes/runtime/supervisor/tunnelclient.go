package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/paddock-dev/paddock/errcode"
)

// Tunnels (the node's end; see tunnel.go for the supervisor's). A tunnel
// connection is a real socket to its caller: one end of a socket pair,
// whose other end two goroutines pump to and from the stream. So it has
// deadlines and half-closes as a TCP connection has, and everything read
// from the stream is the sandbox's bytes, bounded by the stream's window.

// startTunnel opens call on c and waits for the supervisor to say it
// started; ctx bounds the wait.
func startTunnel(ctx context.Context, c *Conn, call CallMsg) (*Stream, error) {
	b, _ := json.Marshal(call)
	st, err := c.Open(ctx, b)
	if err != nil {
		return nil, supErr(call.Op, err)
	}
	f, err := st.Recv(ctx)
	switch {
	case err != nil:
		st.Abandon()
		return nil, supErr(call.Op, err)
	case f.Type == Result:
		_, err := decodeResult(call.Op, f.Payload)
		if err == nil || errors.Is(err, ErrDenied) {
			err = errcode.New(errcode.RuntimeError, "%s: the sandbox's supervisor ended the tunnel before starting it", call.Op)
		}
		return nil, err
	case f.Type != Ctl:
		st.Abandon()
		return nil, errcode.New(errcode.RuntimeError, "%s: the sandbox's supervisor sent %s before saying the tunnel started", call.Op, f.Type)
	}
	return st, nil
}

// DialTunnel opens a TCP connection to port on the sandbox's loopback
// through the supervisor on c: invalid_request for a port that is not
// one, invalid_state when nothing answers there.
func DialTunnel(ctx context.Context, c *Conn, port int) (net.Conn, error) {
	if err := validPort(OpDial, port); err != nil {
		return nil, err
	}
	st, err := startTunnel(ctx, c, CallMsg{Op: OpDial, Port: port})
	if err != nil {
		return nil, err
	}
	return newTunnelConn(st, port)
}

// TunnelListener is a listener on the sandbox's loopback that the
// supervisor holds for the node: each Accept is a connection a process of
// the sandbox made to it. It lives until Close or the end of the
// supervisor's connection (Done).
type TunnelListener struct {
	c      *Conn
	port   int
	listen *Stream
	ctx    context.Context // ends with Close
	cancel context.CancelFunc
	done   chan struct{} // closed when the listen stream has ended
}

// ListenTunnel has the supervisor on c listen on 127.0.0.1:port inside its
// sandbox: invalid_request for a port that is not one, already_exists when
// the port is taken there.
func ListenTunnel(ctx context.Context, c *Conn, port int) (*TunnelListener, error) {
	if err := validPort(OpListen, port); err != nil {
		return nil, err
	}
	st, err := startTunnel(ctx, c, CallMsg{Op: OpListen, Port: port})
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.Background()) // the listener's life; Close ends it
	l := &TunnelListener{c: c, port: port, listen: st, ctx: lctx, cancel: cancel, done: make(chan struct{})}
	go func() { // ends with the stream (Close abandons it)
		defer close(l.done)
		defer cancel()
		for {
			if _, err := st.Recv(context.Background()); err != nil {
				return
			}
		}
	}()
	return l, nil
}

// Accept waits for the next connection a process of the sandbox makes to
// the port. After Close, or once the supervisor's connection has ended,
// it returns net.ErrClosed.
func (l *TunnelListener) Accept() (net.Conn, error) {
	if l.ctx.Err() != nil {
		return nil, fmt.Errorf("accept on the sandbox's port %d: %w", l.port, net.ErrClosed)
	}
	st, err := startTunnel(l.ctx, l.c, CallMsg{Op: OpAccept, Port: l.port})
	if err != nil {
		if l.ctx.Err() != nil {
			return nil, fmt.Errorf("accept on the sandbox's port %d: %w", l.port, net.ErrClosed)
		}
		return nil, err
	}
	return newTunnelConn(st, l.port)
}

// Done is closed once the listener has ended (Close, or the end of the
// supervisor's connection).
func (l *TunnelListener) Done() <-chan struct{} { return l.done }

// Close stops the listener in the sandbox and any Accept waiting.
func (l *TunnelListener) Close() error {
	l.cancel()
	l.listen.Abandon()
	<-l.done
	return nil
}

// Addr is the listener's address inside the sandbox.
func (l *TunnelListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: l.port}
}

// tunnelConn is the caller's end of a socket pair whose other end (inner)
// is pumped to and from a tunnel's stream.
type tunnelConn struct {
	*net.UnixConn
	st     *Stream
	inner  *net.UnixConn
	port   int
	cancel context.CancelFunc
	pumps  sync.WaitGroup // up and down
	wg     sync.WaitGroup // Close's linger
	once   sync.Once
}

// newTunnelConn returns the caller's end of st, pumped by two goroutines
// that Close stops.
func newTunnelConn(st *Stream, port int) (net.Conn, error) {
	outer, inner, err := socketPair()
	if err != nil {
		st.Abandon()
		return nil, errcode.Wrap(errcode.Internal, err, "tunnel: socket pair")
	}
	ctx, cancel := context.WithCancel(context.Background()) // the pumps' life; Close ends it
	t := &tunnelConn{UnixConn: outer, st: st, inner: inner, port: port, cancel: cancel}
	t.pumps.Go(func() { t.up(ctx) })
	t.pumps.Go(func() { t.down(ctx) })
	return t, nil
}

// socketPair returns the two ends of a new unix stream socket pair.
func socketPair() (*net.UnixConn, *net.UnixConn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	conn := func(fd int) (*net.UnixConn, error) {
		f := os.NewFile(uintptr(fd), "tunnel")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			return nil, err
		}
		return c.(*net.UnixConn), nil
	}
	a, err := conn(fds[0])
	if err != nil {
		syscall.Close(fds[1])
		return nil, nil, err
	}
	b, err := conn(fds[1])
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}

// up sends what the caller writes as Data, and its half-close as EOF.
func (t *tunnelConn) up(ctx context.Context) {
	buf := make([]byte, Chunk)
	for {
		n, err := t.inner.Read(buf)
		if n > 0 {
			if serr := t.st.Send(ctx, Data, buf[:n]); serr != nil {
				t.st.Abandon()
				t.inner.Close()
				return
			}
		}
		if errors.Is(err, io.EOF) {
			_ = t.st.Send(ctx, EOF, nil)
			return
		}
		if err != nil {
			t.st.Abandon()
			return
		}
	}
}

// down writes the sandbox's Data to the caller, an EOF as a half-close,
// and closes the caller's end once the stream ends.
func (t *tunnelConn) down(ctx context.Context) {
	defer t.inner.Close()
	for {
		f, err := t.st.Recv(ctx)
		if err != nil {
			t.st.Abandon()
			return
		}
		switch f.Type {
		case Data:
			if _, err := t.inner.Write(f.Payload); err != nil {
				t.st.Abandon()
				return
			}
		case EOF:
			_ = t.inner.CloseWrite()
		case Result:
			return
		}
	}
}

// closeLinger bounds how long a closed tunnel connection goes on
// delivering what its caller wrote before the Close (and waiting for the
// sandbox's end to finish) before its stream is abandoned.
const closeLinger = 5 * time.Second

// Close closes the connection as TCP's close does: what was written
// before it is still delivered, then the sandbox's end sees EOF. The
// pumps end when the stream does, and within closeLinger at most (then
// the stream is abandoned).
func (t *tunnelConn) Close() error {
	err := t.UnixConn.Close()
	t.once.Do(func() {
		t.wg.Go(func() { // ends within closeLinger
			done := make(chan struct{})
			go func() { t.pumps.Wait(); close(done) }() // ends with the pumps, which the abandon below ends
			timer := time.NewTimer(closeLinger)
			defer timer.Stop()
			select {
			case <-done:
			case <-timer.C:
			}
			t.cancel()
			t.st.Abandon()
			t.inner.Close()
			<-done
		})
	})
	return err
}

// RemoteAddr is the sandbox's end: its port on its loopback.
func (t *tunnelConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: t.port}
}
