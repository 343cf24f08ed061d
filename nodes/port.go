package nodes

import (
	"context"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/projection"
)

// portDialer is a sandbox that can open a TCP connection, from the node,
// to a port inside itself. Docker does it in the container's network
// namespace, so a sandbox without a network (the default) is reached all
// the same; the local runtime, which has no isolation, dials the host.
type portDialer interface {
	DialPort(ctx context.Context, port int) (net.Conn, error)
}

// Bounds of a port forward.
const (
	// maxPortConns bounds the connections one forward carries at once; one
	// more is closed as it comes.
	maxPortConns = 256
	// portDialTimeout bounds the connection into the sandbox.
	portDialTimeout = 10 * time.Second
)

// portForward is a listener on the node that forwards each connection to
// one port of one sandbox. It is owned by its session: closed when the
// sandbox stops running there, when the node lets the session
// go, and when the node closes (the ports teardown hook, teardown.go).
type portForward struct {
	ln    net.Listener
	sb    runtime.Sandbox // the sandbox it reaches; another sandbox ends it
	port  int
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

func portStart(_ *Agent, _ *session, args *commands.PortArgs) any {
	return events.PortStart{Port: args.Port}
}

// runPort returns the address on this node that reaches an exposed port of
// the session's running sandbox, opening a forward on first use.
func runPort(_ context.Context, a *Agent, s *session, args *commands.PortArgs) (outcome, error) {
	if !slices.Contains(s.exposed, args.Port) {
		return outcome{}, errcode.New(errcode.InvalidRequest, "port %d is not exposed by session %s (exposed: %v); a create exposes ports (exposed_ports, engine sandbox create --expose)", args.Port, s.id, s.exposed)
	}
	fw, err := a.forward(s, args.Port)
	if err != nil {
		return outcome{}, err
	}
	host, p := a.exposeHost(), fw.ln.Addr().(*net.TCPAddr).Port
	return outcome{
		result: commands.PortResult{Host: host, Port: p, SandboxPort: args.Port, Node: a.cfg.ID},
		data:   events.PortFinish{Host: host, Port: p},
	}, nil
}

// exposeHost is the host a client connects to: the address forwards
// listen on, or this host's name when they listen on every address.
func (a *Agent) exposeHost() string {
	h := a.cfg.ExposeHost
	if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
		if name, err := os.Hostname(); err == nil {
			return name
		}
	}
	return h
}

// forward returns the session's forward of port, opening it if needed.
func (a *Agent) forward(s *session, port int) (*portForward, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status != projection.StatusRunning || s.sb == nil {
		return nil, errcode.New(errcode.InvalidState, "session %s is %s: its ports are reachable while it runs", s.id, s.status)
	}
	d, ok := s.sb.(portDialer)
	if !ok {
		return nil, errcode.New(errcode.InvalidState, "the %s runtime cannot forward ports", s.runtime)
	}
	if fw := s.ports[port]; fw != nil && fw.sb == s.sb {
		return fw, nil
	} else if fw != nil {
		fw.close()
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(a.cfg.ExposeHost, "0"))
	if err != nil {
		return nil, errcode.Wrap(errcode.RuntimeError, err, "listen for port "+strconv.Itoa(port))
	}
	fw := &portForward{ln: ln, sb: s.sb, port: port, conns: map[net.Conn]struct{}{}}
	if s.ports == nil {
		s.ports = map[int]*portForward{}
	}
	s.ports[port] = fw
	fw.wg.Add(1)
	go fw.serve(a.ctx, d, func() bool { return s.sandbox() == fw.sb && s.getStatus() == projection.StatusRunning })
	a.logger.Info("port forward open", "session", s.id, "port", port, "addr", ln.Addr().String())
	return fw, nil
}

// portForwarder is a runtime that says whether the node can reach its
// sandboxes' ports (the gvisor runtime cannot).
type portForwarder interface {
	ForwardsPorts() bool
}

// checkPorts refuses exposed ports runtime rt cannot forward.
func checkPorts(rt runtime.Runtime, ports []int) error {
	if f, ok := rt.(portForwarder); ok && len(ports) > 0 && !f.ForwardsPorts() {
		return errcode.New(errcode.PolicyDenied, "the %s runtime cannot forward exposed ports; use the docker runtime", rt.Name())
	}
	return nil
}

// isContainerRuntime reports whether runtime name runs images (docker,
// and gvisor: Docker under gVisor's runsc).
func isContainerRuntime(name string) bool { return name == "docker" || name == "gvisor" }

// serve accepts connections until the listener closes, forwarding each to
// the sandbox's port while current says the sandbox still runs.
func (fw *portForward) serve(ctx context.Context, d portDialer, current func() bool) {
	defer fw.wg.Done()
	for {
		c, err := fw.ln.Accept()
		if err != nil {
			return // closed
		}
		if !current() {
			c.Close()
			fw.close()
			return
		}
		fw.mu.Lock()
		full := len(fw.conns) >= maxPortConns
		if !full {
			fw.conns[c] = struct{}{}
		}
		fw.mu.Unlock()
		if full {
			c.Close()
			continue
		}
		fw.wg.Add(1)
		go func() {
			defer fw.wg.Done()
			defer fw.drop(c)
			dctx, cancel := context.WithTimeout(ctx, portDialTimeout)
			in, err := d.DialPort(dctx, fw.port)
			cancel()
			if err != nil {
				return // nothing listens there (yet): the client sees the close
			}
			fw.mu.Lock()
			fw.conns[in] = struct{}{}
			fw.mu.Unlock()
			defer fw.drop(in)
			splice(c, in)
		}()
	}
}

// splice copies both ways until both directions end (a half-close is
// passed on), or either side fails.
func splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
			_ = cw.CloseWrite()
		} else {
			dst.Close()
			src.Close()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
}

func (fw *portForward) drop(c net.Conn) {
	c.Close()
	fw.mu.Lock()
	delete(fw.conns, c)
	fw.mu.Unlock()
}

// close stops the listener and every connection; it does not wait.
func (fw *portForward) close() {
	fw.once.Do(func() {
		fw.ln.Close()
		fw.mu.Lock()
		for c := range fw.conns {
			c.Close()
		}
		fw.mu.Unlock()
	})
}

// closePorts closes the session's forwards and waits for their goroutines.
func (s *session) closePorts() {
	s.mu.Lock()
	fws := s.ports
	s.ports = nil
	s.mu.Unlock()
	for _, fw := range fws {
		fw.close()
	}
	for _, fw := range fws {
		fw.wg.Wait()
	}
}
