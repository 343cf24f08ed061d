package docker

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/paddock-dev/paddock/errcode"
)

// DialPort opens a TCP connection from the node to port on the
// container's loopback, inside the container's network namespace: the
// sandbox needs no network of its own (network none stays none), and
// nothing but this node reaches the port. The connection's socket belongs
// to the container's namespace; only the dialling thread enters it, for
// the length of the dial. It needs the node to run in the host's PID
// namespace with CAP_SYS_ADMIN (a node on the host, as root); otherwise a
// sandbox with a network is dialled at its address on that network.
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	c, err := s.r.cli.ContainerInspect(ctx, s.id)
	if err != nil {
		return nil, s.r.wrap(err, "inspect container")
	}
	if c.State == nil || !c.State.Running || c.State.Pid <= 0 {
		return nil, errcode.New(errcode.InvalidState, "container %s is not running", s.name)
	}
	conn, nsErr := dialInNetns(ctx, c.State.Pid, port)
	if nsErr == nil {
		return conn, nil
	}
	if c.NetworkSettings != nil {
		for _, n := range c.NetworkSettings.Networks {
			if n != nil && n.IPAddress != "" {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", net.JoinHostPort(n.IPAddress, strconv.Itoa(port)))
			}
		}
	}
	return nil, nsErr
}

// dialInNetns dials 127.0.0.1:port from a thread that enters the network
// namespace of pid for the dial and then returns to the node's own. A
// thread that cannot return stays locked, and Go ends it with its
// goroutine rather than reuse it.
func dialInNetns(ctx context.Context, pid, port int) (net.Conn, error) {
	target, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nil, fmt.Errorf("open the container's network namespace: %w", err)
	}
	defer target.Close()
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("open the node's network namespace: %w", err)}
			return
		}
		defer own.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("enter the container's network namespace: %w", err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else: the thread stays locked and ends with this goroutine
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
