package docker

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
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
// sandbox with a network is dialled at its address on that network. On
// gvisor the sandbox's supervisor dials it inside (gvisor_tunnel.go).
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if s.r.isGVisor() {
		return s.gvisorDialPort(ctx, port)
	}
	c, err := s.running(ctx)
	if err != nil {
		return nil, err
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

// running inspects the container, which must be running (with a pid whose
// namespaces the node can enter).
func (s *Sandbox) running(ctx context.Context) (container.InspectResponse, error) {
	c, err := s.r.cli.ContainerInspect(ctx, s.id)
	if err != nil {
		return c, s.r.wrap(err, "inspect container")
	}
	if c.State == nil || !c.State.Running || c.State.Pid <= 0 {
		return c, errcode.New(errcode.InvalidState, "container %s is not running", s.name)
	}
	return c, nil
}

// dialInNetns dials 127.0.0.1:port in the network namespace of pid.
func dialInNetns(ctx context.Context, pid, port int) (net.Conn, error) {
	var c net.Conn
	err := inNetns(pid, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		return err
	})
	return c, err
}

// ListenEgress listens on 127.0.0.1:port inside the container's network
// namespace, for the node's egress proxy: the listener's socket belongs
// to the container's namespace (its loopback, the only interface a
// sandbox without a network has), and the node accepts on it from its
// own. It needs what DialPort's namespace path needs; there is no
// fallback (an allow list the node cannot serve is refused). On gvisor
// the sandbox's supervisor listens inside and tunnels each connection to
// the node (gvisor_tunnel.go).
func (s *Sandbox) ListenEgress(ctx context.Context, port int) (net.Listener, error) {
	if s.r.isGVisor() {
		return s.gvisorListenEgress(ctx, port)
	}
	c, err := s.running(ctx)
	if err != nil {
		return nil, err
	}
	var ln net.Listener
	err = inNetns(c.State.Pid, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		return err
	})
	return ln, err
}

// inNetns runs fn on a thread that enters the network namespace of pid
// for it and then returns to the node's own. A thread that cannot return
// stays locked, and Go ends it with its goroutine rather than reuse it.
func inNetns(pid int, fn func() error) error {
	target, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return fmt.Errorf("open the container's network namespace: %w", err)
	}
	defer target.Close()
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("open the node's network namespace: %w", err)
			return
		}
		defer own.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("enter the container's network namespace: %w", err)
			return
		}
		err = fn()
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else: the thread stays locked and ends with this goroutine
		ch <- err
	}()
	return <-ch
}

// EnforcesEgress says that the runtime's sandboxes can be served an
// egress proxy (Linux: in their network namespaces; on gvisor, through
// their supervisors).
func (r *Runtime) EnforcesEgress() bool { return true }

// SandboxNetworks returns the subnets of the network sandboxes with an
// open network join (Docker's default bridge): no egress policy reaches
// another sandbox there.
func (r *Runtime) SandboxNetworks(ctx context.Context) ([]netip.Prefix, error) {
	n, err := r.cli.NetworkInspect(ctx, "bridge", network.InspectOptions{})
	if err != nil {
		return nil, r.wrap(err, "inspect the bridge network")
	}
	var out []netip.Prefix
	for _, c := range n.IPAM.Config {
		if p, err := netip.ParsePrefix(c.Subnet); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}
