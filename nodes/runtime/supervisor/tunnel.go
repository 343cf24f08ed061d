package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/paddock-dev/paddock/errcode"
)

// Tunnels (the supervisor's end). A sandbox with no network interface of
// the host's (the gvisor runtime: gVisor's own loopback is all it has)
// reaches the node only through the supervisor's socket, and the node
// reaches it the same way. Three ops carry TCP over a stream:
//
//   - dial: the supervisor dials 127.0.0.1:Port inside the sandbox, says
//     Started (Ctl), and the stream carries the connection's bytes both
//     ways as Data (EOF is a half-close) until both ends have closed or
//     the node cancels. A node's exposed port is served by it.
//   - listen: the supervisor listens on 127.0.0.1:Port inside the
//     sandbox and says Started; the listener lives until the node cancels
//     the stream (or the connection ends). The node's egress proxy is
//     served by it: the sandbox's HTTP(S)_PROXY names that address.
//   - accept: waits for the next connection on a listen's port, says
//     Started, and carries it as dial does.
//
// The node opens every stream, so a sandbox's connections wait in its own
// kernel's backlog until the node asks for the next one. What flows is
// the sandbox's bytes only; the node decides what they may reach.

// dialTimeout bounds a dial to the sandbox's loopback.
const dialTimeout = 10 * time.Second

// tunnels are the listeners the node asked for, by port.
type tunnels struct {
	mu sync.Mutex
	ln map[int]chan net.Conn // accepted connections, closed when the listener ends
}

func (t *tunnels) add(port int, ch chan net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ln == nil {
		t.ln = map[int]chan net.Conn{}
	}
	if _, dup := t.ln[port]; dup {
		return false
	}
	t.ln[port] = ch
	return true
}

func (t *tunnels) get(port int) chan net.Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ln[port]
}

func (t *tunnels) remove(port int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.ln, port)
}

// loopback is the address of port on the sandbox's loopback.
func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// validPort refuses a port that is not one.
func validPort(op string, port int) error {
	if port < 1 || port > 65535 {
		return errcode.New(errcode.InvalidRequest, "supervisor: %s: port %d is not a TCP port", op, port)
	}
	return nil
}

// tunnel serves a dial, listen or accept call; ctx ends when the node
// cancels the stream or the connection ends.
func (srv *Server) tunnel(ctx context.Context, s *Stream, call CallMsg) error {
	if err := validPort(call.Op, call.Port); err != nil {
		return err
	}
	switch call.Op {
	case OpDial:
		dctx, cancel := context.WithTimeout(ctx, dialTimeout)
		var d net.Dialer
		c, err := d.DialContext(dctx, "tcp", loopback(call.Port))
		cancel()
		if err != nil {
			return errcode.New(errcode.InvalidState, "supervisor: nothing answers on port %d in the sandbox: %v", call.Port, err)
		}
		return carry(ctx, s, c)
	case OpListen:
		return srv.listen(ctx, s, call.Port)
	default: // OpAccept
		ch := srv.tunnels.get(call.Port)
		if ch == nil {
			return errcode.New(errcode.InvalidState, "supervisor: no listener on port %d", call.Port)
		}
		select {
		case c, ok := <-ch:
			if !ok {
				return errcode.New(errcode.InvalidState, "supervisor: the listener on port %d has closed", call.Port)
			}
			return carry(ctx, s, c)
		case <-ctx.Done():
			return errcode.Wrap(errcode.InvalidState, ctx.Err(), "supervisor: accept")
		}
	}
}

// listen listens on the sandbox's loopback at port until ctx ends,
// handing what it accepts to accept calls.
func (srv *Server) listen(ctx context.Context, s *Stream, port int) error {
	ln, err := net.Listen("tcp", loopback(port))
	if err != nil {
		return errcode.New(errcode.AlreadyExists, "supervisor: cannot listen on port %d in the sandbox: %v", port, err)
	}
	ch := make(chan net.Conn)
	if !srv.tunnels.add(port, ch) {
		ln.Close()
		return errcode.New(errcode.AlreadyExists, "supervisor: port %d is already tunnelled", port)
	}
	defer srv.tunnels.remove(port)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close() // ends the accept loop below
	wg.Go(func() {
		defer close(ch)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case ch <- c:
			case <-ctx.Done():
				c.Close()
				return
			}
		}
	})
	started, _ := json.Marshal(ControlMsg{Started: true})
	if err := s.Send(ctx, Ctl, started); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// carry says Started and then carries c's bytes over s both ways until
// both directions have ended or ctx ends; it closes c.
func carry(ctx context.Context, s *Stream, c net.Conn) error {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	started, _ := json.Marshal(ControlMsg{Started: true})
	if err := s.Send(ctx, Ctl, started); err != nil {
		return err
	}
	out := make(chan struct{})
	go func() { // ends with c (closed by ctx's end at the latest)
		defer close(out)
		if _, err := io.Copy(s.Writer(ctx, Data), c); err == nil {
			_ = s.Send(ctx, EOF, nil)
		} else {
			c.Close()
		}
	}()
	in := &streamReader{s: s, ctx: ctx}
	_, err := io.Copy(c, in)
	if err == nil {
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	} else {
		c.Close()
	}
	select {
	case <-out:
	case <-ctx.Done():
		<-out
	}
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, net.ErrClosed) {
		return errcode.Wrap(errcode.InvalidState, err, "supervisor: tunnel")
	}
	return nil
}
