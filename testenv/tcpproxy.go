package testenv

import (
	"io"
	"net"
	"sync"
	"testing"
)

// TCPProxy forwards TCP connections from a listener on 127.0.0.1 to a
// target: a link a test can cut (Cut closes every connection through it
// and refuses new ones) and mend (Restore). It stops when the test ends.
type TCPProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup // the accept loop and every copy

	mu    sync.Mutex // guards the fields below
	cut   bool
	conns map[net.Conn]struct{}
}

// StartTCPProxy starts a proxy to target (host:port).
func StartTCPProxy(t testing.TB, target string) *TCPProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &TCPProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept() // stopped by the cleanup, which closes the listener
	t.Cleanup(func() {
		ln.Close()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

// Addr is the proxy's host:port.
func (p *TCPProxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every connection through the proxy, and the proxy refuses
// (accepts and closes at once) new ones until Restore.
func (p *TCPProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore lets new connections through again.
func (p *TCPProxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

func (p *TCPProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return // the listener is closed
		}
		p.wg.Add(1)
		go p.forward(in) // ends when either side closes, or at Cut
	}
}

// track adds c to the live connections, unless the link is cut.
func (p *TCPProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *TCPProxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
	c.Close()
}

func (p *TCPProxy) forward(in net.Conn) {
	defer p.wg.Done()
	if !p.track(in) {
		in.Close()
		return
	}
	defer p.untrack(in)
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(out) {
		out.Close()
		return
	}
	defer p.untrack(out)
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// One direction ended: end both.
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go cp(out, in) // joined below
	go cp(in, out) // joined below
	<-done
	<-done
}
