package supervisor

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// accept runs Accept on one end of a pipe while the other end sends
// what, and returns Accept's outcome; the peer's end is returned to see
// whether Accept hung up.
func accept(t *testing.T, timeout time.Duration, what []byte) (*Conn, HelloMsg, error, net.Conn) {
	t.Helper()
	a, b := net.Pipe()
	var wg sync.WaitGroup
	t.Cleanup(func() {
		b.Close()
		wg.Wait()
	})
	if what != nil {
		wg.Go(func() {
			_ = b.SetWriteDeadline(time.Now().Add(wait))
			_, _ = b.Write(what) // fails when Accept hangs up first
		})
	}
	c, h, err := Accept(a, timeout, Options{PingEvery: time.Hour, Silence: time.Hour})
	if c != nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, h, err, b
}

// hungUp says whether the node closed its end of nc.
func hungUp(t *testing.T, nc net.Conn) bool {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(wait))
	_, err := nc.Read(make([]byte, 1))
	return errors.Is(err, io.EOF)
}

func TestHelloAccepted(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	go func() { _ = SendHello(b, 42) }()
	c, h, err := Accept(a, wait, Options{})
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	defer c.Close()
	if h.Version != Version || h.PID != 42 {
		t.Errorf("hello: got %+v, want version %d and pid 42", h, Version)
	}
	if !c.opts.Node {
		t.Errorf("Accept made a conn that is not the node's end")
	}
}

// TestHelloRefused: a connection whose first words are not a hello of
// this version is refused as a protocol violation and closed.
func TestHelloRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"a data frame first", appendFrame(nil, Frame{Type: Data, Payload: []byte(`{"version":1}`)})},
		{"a pong first", appendFrame(nil, Frame{Type: Pong})},
		{"a result first", appendFrame(nil, Frame{Type: Result, Stream: 1, Payload: []byte(`{}`)})},
		{"a hello on a stream", appendFrame(nil, Frame{Type: Hello, Stream: 1, Payload: []byte(`{"version":1}`)})},
		{"malformed JSON", hello(`{"version":1`)},
		{"not an object", hello(`[1]`)},
		{"an empty hello", hello(``)},
		{"a version as a string", hello(`{"version":"1"}`)},
		{"no version", hello(`{"pid":1}`)},
		{"version 2", hello(`{"version":2}`)},
		{"version -1", hello(`{"version":-1}`)},
		{"a 2 GiB hello", header(2<<30, Hello, 0)},
		{"an unknown type", header(0, 99, 0)},
		{"HTTP", []byte("GET / HTTP/1.1\r\nHost: node\r\n\r\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, err, far := accept(t, wait, tc.in)
			if c != nil || !errors.Is(err, ErrProtocol) {
				t.Fatalf("got conn %v, %v, want ErrProtocol", c != nil, err)
			}
			if !hungUp(t, far) {
				t.Errorf("the connection was not closed")
			}
		})
	}
}

// TestHelloSilent: a connection that says nothing is given up within the
// timeout, closed, and its error is the read's deadline.
func TestHelloSilent(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"nothing", nil},
		{"half a header", []byte{0, 0, 0}},
		{"half a hello", hello(`{"version":1}`)[:headerSize+3]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const timeout = 50 * time.Millisecond
			start := time.Now()
			c, _, err, far := accept(t, timeout, tc.in)
			if c != nil || !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("got conn %v, %v, want the deadline's error", c != nil, err)
			}
			if took := time.Since(start); took > wait/2 {
				t.Errorf("Accept took %s with a timeout of %s", took, timeout)
			}
			if !hungUp(t, far) {
				t.Errorf("the connection was not closed")
			}
		})
	}
}

func hello(payload string) []byte {
	return appendFrame(nil, Frame{Type: Hello, Payload: []byte(payload)})
}

// TestHelloHangUp: a connection closed before its hello is an error
// (io.EOF), not a conn.
func TestHelloHangUp(t *testing.T) {
	a, b := net.Pipe()
	b.Close()
	c, _, err := Accept(a, wait, Options{})
	if c != nil || !errors.Is(err, io.EOF) {
		t.Errorf("got conn %v, %v, want io.EOF", c != nil, err)
	}
}

// FuzzAccept: whatever a connection says first, Accept never panics and
// only takes a hello of this version.
func FuzzAccept(f *testing.F) {
	f.Add(hello(`{"version":1,"pid":3}`))
	f.Add(hello(`{"version":2}`))
	f.Add(hello(`{"version":1e400}`))
	f.Add(header(2<<30, Hello, 0))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		a, b := net.Pipe()
		defer b.Close()
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() {
			_ = b.SetWriteDeadline(time.Now().Add(wait))
			_, _ = b.Write(in)
			b.Close()
		})
		c, h, err := Accept(a, wait, Options{PingEvery: time.Hour, Silence: time.Hour})
		if err != nil {
			return
		}
		defer c.Close()
		if h.Version != Version {
			t.Fatalf("took a hello of version %d", h.Version)
		}
	})
}
