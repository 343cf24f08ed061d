package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
	poll "github.com/paddock-dev/paddock/testenv/wait"
)

// serverPair returns a node's Conn to a real Server (on a workspace of its
// own) over a pipe. The Server's "sandbox loopback" is this host's.
func serverPair(t *testing.T) *Conn {
	t.Helper()
	srv, err := NewServer(local.OpenConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(b) }()
	node := NewConn(a, quiet)
	t.Cleanup(func() {
		node.Close()
		b.Close()
		<-served
	})
	return node
}

// echoServer listens on the loopback and echoes each connection until its
// half-close; it returns the port. It stops when the test ends.
func echoServer(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
				_ = c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().(*net.TCPAddr).Port
}

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// roundTrip writes msg on c, half-closes it and reads everything back.
func roundTrip(t *testing.T, c net.Conn, msg []byte) []byte {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(wait))
	errs := make(chan error, 1)
	go func() {
		_, err := c.Write(msg)
		if err == nil {
			err = c.(interface{ CloseWrite() error }).CloseWrite()
		}
		errs <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if err := <-errs; err != nil {
		t.Fatalf("write: %v", err)
	}
	return got
}

// TestTunnelDial: a dial through the supervisor reaches a server on the
// sandbox's loopback; a megabyte goes there and back through the stream's
// window, and half-closes pass both ways. A port nothing listens on is
// invalid_state, one that is not a port invalid_request.
func TestTunnelDial(t *testing.T) {
	node := serverPair(t)
	port := echoServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	c, err := DialTunnel(ctx, node, port)
	if err != nil {
		t.Fatalf("DialTunnel: %v", err)
	}
	msg := bytes.Repeat([]byte("paddock-"), 128<<10)
	if got := roundTrip(t, c, msg); !bytes.Equal(got, msg) {
		t.Errorf("echo: got %d bytes, want %d the same", len(got), len(msg))
	}
	c.Close()
	poll.Eventually(t, wait, func() error {
		if n := openStreams(node); n != 0 {
			return fmt.Errorf("%d streams open after the tunnel's Close", n)
		}
		return nil
	})

	if _, err := DialTunnel(ctx, node, freePort(t)); errcode.Of(err) != errcode.InvalidState {
		t.Errorf("a port nothing listens on: got %v, want invalid_state", err)
	}
	for _, p := range []int{0, -1, 65536} {
		if _, err := DialTunnel(ctx, node, p); errcode.Of(err) != errcode.InvalidRequest {
			t.Errorf("port %d: got %v, want invalid_request", p, err)
		}
	}
	// A hand-made call with a bad port is refused by the supervisor too.
	if _, res := call(t, node, CallMsg{Op: OpDial, Port: 70000}, nil); res.Code != string(errcode.InvalidRequest) {
		t.Errorf("a dial call for port 70000: got %+v, want invalid_request", res)
	}
}

// TestTunnelListen: the supervisor listens on the sandbox's loopback for
// the node; a process's connection there is what Accept returns, and its
// bytes pass both ways. A second listen on the port is already_exists.
// Close ends a waiting Accept with net.ErrClosed and frees the port.
func TestTunnelListen(t *testing.T) {
	node := serverPair(t)
	port := freePort(t)
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	ln, err := ListenTunnel(ctx, node, port)
	if err != nil {
		t.Fatalf("ListenTunnel: %v", err)
	}
	if _, err := ListenTunnel(ctx, node, port); errcode.Of(err) != errcode.AlreadyExists {
		t.Errorf("a second listen: got %v, want already_exists", err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Errorf("Accept: %v", err)
		}
		accepted <- c
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("a process's dial: %v", err)
	}
	defer client.Close()
	var served net.Conn
	select {
	case served = <-accepted:
	case <-time.After(wait):
		t.Fatal("Accept returned nothing")
	}
	if served == nil {
		t.FailNow()
	}
	go func() { // the node's side echoes
		defer served.Close()
		_, _ = io.Copy(served, served)
		_ = served.(interface{ CloseWrite() error }).CloseWrite()
	}()
	msg := []byte("CONNECT example.com:443 HTTP/1.1\r\n\r\n")
	if got := roundTrip(t, client, msg); !bytes.Equal(got, msg) {
		t.Errorf("through the listener: got %q, want %q", got, msg)
	}

	waiting := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if c != nil {
			c.Close()
		}
		waiting <- err
	}()
	ln.Close()
	select {
	case err := <-waiting:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: got %v, want net.ErrClosed", err)
		}
	case <-time.After(wait):
		t.Fatal("Close did not end a waiting Accept")
	}
	poll.Eventually(t, wait, func() error {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			c.Close()
			return errors.New("the supervisor still listens after Close")
		}
		return nil
	})
	if _, res := call(t, node, CallMsg{Op: OpAccept, Port: port}, nil); res.Code != string(errcode.InvalidState) {
		t.Errorf("an accept with no listener: got %+v, want invalid_state", res)
	}
}

// TestTunnelHostileSupervisor: a supervisor (or a sandbox's process
// pretending to be one) that answers a tunnel with anything but Started,
// or breaks the framing inside a tunnel, gets typed errors and its
// connection closed; the node's goroutines end.
func TestTunnelHostileSupervisor(t *testing.T) {
	t.Run("data before started", func(t *testing.T) {
		c, p := nodeConn(t, quiet)
		errs := make(chan error, 1)
		go func() {
			_, err := DialTunnel(t.Context(), c, 80)
			errs <- err
		}()
		f := p.expect(Call)
		var msg CallMsg
		if err := json.Unmarshal(f.Payload, &msg); err != nil || msg.Op != OpDial || msg.Port != 80 {
			t.Fatalf("call %q: %v", f.Payload, err)
		}
		_ = p.send(Frame{Type: Data, Stream: f.Stream, Payload: []byte("HTTP/1.1 200 OK\r\n")})
		if err := <-errs; errcode.Of(err) != errcode.RuntimeError {
			t.Errorf("got %v, want runtime_error", err)
		}
	})
	t.Run("oversized frame inside a tunnel", func(t *testing.T) {
		c, p := nodeConn(t, quiet)
		type res struct {
			c   net.Conn
			err error
		}
		got := make(chan res, 1)
		go func() {
			tc, err := DialTunnel(t.Context(), c, 80)
			got <- res{tc, err}
		}()
		f := p.expect(Call)
		started, _ := json.Marshal(ControlMsg{Started: true})
		_ = p.send(Frame{Type: Ctl, Stream: f.Stream, Payload: started})
		r := <-got
		if r.err != nil {
			t.Fatalf("DialTunnel: %v", r.err)
		}
		defer r.c.Close()
		// A header claiming a payload over MaxFrame.
		_ = p.sendRaw(appendFrame(nil, Frame{Type: Data, Stream: f.Stream})[:5:5])
		_ = p.sendRaw([]byte{0, 0, 0, byte(f.Stream)})
		bad := appendFrame(nil, Frame{Type: Data, Stream: f.Stream})
		bad[0] = 0xff
		_ = p.sendRaw(bad)
		waitDone(t, c)
		if !errors.Is(c.Err(), ErrProtocol) {
			t.Errorf("the connection ended with %v, want ErrProtocol", c.Err())
		}
		_ = r.c.SetReadDeadline(time.Now().Add(wait))
		if _, err := io.ReadAll(r.c); err != nil {
			t.Errorf("the tunnel's reader: got %v, want the end of its data", err)
		}
	})
	t.Run("more data than the window", func(t *testing.T) {
		c, p := nodeConn(t, quiet)
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		defer cancel()
		got := make(chan error, 1)
		go func() {
			ln, err := ListenTunnel(ctx, c, 8080)
			if err == nil {
				var tc net.Conn
				tc, err = ln.Accept()
				if err == nil {
					// Nobody reads: the window fills and the flood breaks it.
					<-c.Done()
					tc.Close()
					err = c.Err()
				}
				ln.Close()
			}
			got <- err
		}()
		started, _ := json.Marshal(ControlMsg{Started: true})
		lf := p.expect(Call)
		_ = p.send(Frame{Type: Ctl, Stream: lf.Stream, Payload: started})
		af := p.expect(Call)
		_ = p.send(Frame{Type: Ctl, Stream: af.Stream, Payload: started})
		// The node's pump takes what fits its socket pair's buffer; past
		// that it stops acknowledging, and the flood breaks the window.
		chunk := make([]byte, Chunk)
		for range 1024 {
			if p.send(Frame{Type: Data, Stream: af.Stream, Payload: chunk}) != nil {
				break
			}
		}
		if err := <-got; !errors.Is(err, ErrProtocol) {
			t.Errorf("got %v, want ErrProtocol", err)
		}
	})
}
