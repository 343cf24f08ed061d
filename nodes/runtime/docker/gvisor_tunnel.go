package docker

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime/supervisor"
)

// On gvisor the node reaches a sandbox's loopback through its supervisor
// (see supervisor's tunnels): gVisor's network stack is its own, not the
// container's network namespace, so the node cannot enter it. An exposed
// port is a dial the supervisor makes inside; the egress proxy's listener
// is a listener the supervisor holds inside, each connection to it carried
// to the node, where the proxy decides and records it as on docker.

// tunnelRetry is how long a tunnelled listener waits before it listens
// again when its supervisor is gone or refused.
const tunnelRetry = 500 * time.Millisecond

// supervisorConn returns the sandbox's supervisor connection, waiting up
// to SupervisorWait for one; unavailable when none comes.
func (s *Sandbox) supervisorConn(ctx context.Context, what string) (*supervisor.Conn, error) {
	if s.link == nil {
		return nil, errcode.New(errcode.Unavailable, "%s: sandbox %s has no supervisor, which the gvisor runtime tunnels through", what, s.name)
	}
	c := s.link.wait(ctx, s.r.cfg.SupervisorWait)
	if c == nil {
		return nil, errcode.New(errcode.Unavailable, "%s: the supervisor of sandbox %s is not connected", what, s.name)
	}
	return c, nil
}

// gvisorDialPort dials port on the sandbox's loopback through its
// supervisor.
func (s *Sandbox) gvisorDialPort(ctx context.Context, port int) (net.Conn, error) {
	c, err := s.supervisorConn(ctx, "dial port")
	if err != nil {
		return nil, err
	}
	return supervisor.DialTunnel(ctx, c, port)
}

// gvisorListenEgress has the sandbox's supervisor listen on its loopback
// at port for the node, and listen again on every new connection of a
// supervisor (restarted, or after a restart of the node).
func (s *Sandbox) gvisorListenEgress(ctx context.Context, port int) (net.Listener, error) {
	c, err := s.supervisorConn(ctx, "egress")
	if err != nil {
		return nil, err
	}
	ln, err := supervisor.ListenTunnel(ctx, c, port)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.Background()) // the listener's life; Close ends it
	return &tunnelListener{l: s.link, port: port, ctx: lctx, cancel: cancel, conn: c, cur: ln}, nil
}

// tunnelListener is a listener on a gvisor sandbox's loopback that
// outlives its supervisor's connections: Accept listens again through the
// next one. Accept returns an error only once Close has run.
type tunnelListener struct {
	l      *link
	port   int
	ctx    context.Context
	cancel context.CancelFunc

	mu   sync.Mutex // guards conn and cur
	conn *supervisor.Conn
	cur  *supervisor.TunnelListener // nil between connections
}

// current returns a live listener, listening again through the link's
// connection when the last one has ended; nil when it cannot yet.
func (t *tunnelListener) current() *supervisor.TunnelListener {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cur != nil {
		select {
		case <-t.cur.Done():
			t.cur.Close()
			t.cur = nil
		default:
			return t.cur
		}
	}
	c := t.l.current()
	if c == nil || t.ctx.Err() != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(t.ctx, helloWait)
	defer cancel()
	ln, err := supervisor.ListenTunnel(ctx, c, t.port)
	if err != nil {
		return nil
	}
	t.conn, t.cur = c, ln
	return ln
}

// Accept returns the next connection a process of the sandbox makes to
// the port.
func (t *tunnelListener) Accept() (net.Conn, error) {
	for {
		if t.ctx.Err() != nil {
			return nil, fmt.Errorf("accept on the sandbox's port %d: %w", t.port, net.ErrClosed)
		}
		if ln := t.current(); ln != nil {
			c, err := ln.Accept()
			if err == nil {
				return c, nil
			}
			select { // the listener has ended, or one accept failed
			case <-ln.Done():
				continue
			case <-t.ctx.Done():
				continue
			case <-time.After(tunnelRetry):
				continue
			}
		}
		t.l.mu.Lock()
		changed := t.l.changed
		t.l.mu.Unlock()
		select {
		case <-changed:
		case <-t.ctx.Done():
		case <-time.After(tunnelRetry):
		}
	}
}

// Close stops listening in the sandbox and ends a waiting Accept.
func (t *tunnelListener) Close() error {
	t.cancel()
	t.mu.Lock()
	ln := t.cur
	t.cur = nil
	t.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	return nil
}

// Addr is the listener's address inside the sandbox.
func (t *tunnelListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: t.port}
}
