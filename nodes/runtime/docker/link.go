package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/paddock-dev/paddock/nodes/runtime/supervisor"
)

// Where a sandbox sees its supervisor's parts (see package supervisor).
const (
	// supervisorPath is where the supervisor binary is bind-mounted.
	supervisorPath = "/.paddock/supervisor"
	// supervisorRun is where the sandbox's socket directory is
	// bind-mounted, read-only.
	supervisorRun = "/.paddock/run"
	// socketName is the node's socket in that directory.
	socketName = "node.sock"
	// LabelSupervisor names a container's socket directory (under
	// Config.SupervisorDir); a container without it has no supervisor.
	LabelSupervisor = "paddock.supervisor"
)

// link is a sandbox's channel to its supervisor: the node's listener on
// the sandbox's own socket and the connection the supervisor made to it.
// The newest connection that says hello wins (a restarted supervisor
// replaces a dead one; a process of the sandbox that pretends to be one
// speaks only for its own sandbox). It owns its goroutines: close stops
// them and waits.
//
//	listening ─► connected ─► (conn ends) ─► waiting ─(restartAfter)─► restart through the Docker API
//	                 ▲                           │
//	                 └────── hello on the socket ┘
type link struct {
	dir     string // host directory, bind-mounted read-only at supervisorRun
	ln      *net.UnixListener
	restart func(ctx context.Context) error // starts a supervisor through the Docker API

	mu       sync.Mutex // guards the fields below
	conn     *supervisor.Conn
	changed  chan struct{} // closed (and replaced) when conn changes
	env      map[string]string
	envGen   int // counts setEnv calls
	closed   bool
	watching bool   // startWatch ran
	reason   string // why the last connection ended, for errors and logs
	stats    linkStats

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// linkStats counts what happened on a link, for tests and status.
type linkStats struct {
	Connects, Violations, Restarts int
	// Accepted counts the connections accepted (hello or not).
	Accepted int
}

// Timings of a link.
var (
	helloWait    = 2 * time.Second  // a connection must say hello within it
	restartAfter = time.Second      // a supervisor gone this long is restarted
	restartMax   = 30 * time.Second // the longest wait between restarts
	maxHandshake = 4                // hellos awaited at once; more connections are refused
	acceptRate   = rate.Limit(10)   // connections accepted a second, per sandbox, past the burst
	acceptBurst  = 20
	connOptions  = supervisor.Options{} // the defaults: ping 1s, silence 5s, write 10s
)

// newLinkDir makes a fresh socket directory under parent, named at random
// (the name goes into the container's label).
func newLinkDir(parent string) (string, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	dir := filepath.Join(parent, hex.EncodeToString(b[:]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// The sandbox's user must reach the socket; nothing else is there.
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

// listen opens a link on dir (made by newLinkDir, or found again after a
// restart of the node) and starts accepting. env, when set, is what every
// connection is configured with (a claimed pool container's session
// variables).
func listen(dir string, restart func(ctx context.Context) error, env map[string]string) (*link, error) {
	sock := filepath.Join(dir, socketName)
	_ = os.Remove(sock) // a previous node's
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", sock, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(sock, 0o666); err != nil { // any user of the sandbox may dial it
		ln.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background()) // the link's life; close cancels it
	l := &link{dir: dir, ln: ln, restart: restart, env: env, changed: make(chan struct{}), ctx: ctx, cancel: cancel}
	l.wg.Go(l.acceptLoop)
	return l, nil
}

// startWatch starts restarting a supervisor that has gone; only once the
// container exists (the restart is an exec in it). It runs once.
func (l *link) startWatch() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.watching || l.closed {
		return
	}
	l.watching = true
	l.wg.Go(l.watch)
}

func (l *link) acceptLoop() {
	slots := make(chan struct{}, maxHandshake)
	// A sandbox that dials again and again costs the node no more than
	// acceptRate connections a second: past the burst the loop waits, and
	// further dials wait in the kernel's backlog, inside the sandbox.
	limit := rate.NewLimiter(acceptRate, acceptBurst)
	for {
		if err := limit.Wait(l.ctx); err != nil {
			return // closed
		}
		nc, err := l.ln.Accept()
		if err != nil {
			return // closed
		}
		l.mu.Lock()
		l.stats.Accepted++
		l.mu.Unlock()
		select {
		case slots <- struct{}{}:
		default:
			nc.Close() // too many connections saying nothing
			continue
		}
		l.wg.Go(func() { l.handshake(nc, func() { <-slots }) })
	}
}

// handshake takes a connection that says hello (and, for a claimed pool
// sandbox, accepts the session's environment) as the link's connection.
// release frees the handshake's slot once the hello is read.
func (l *link) handshake(nc net.Conn, release func()) {
	stop := context.AfterFunc(l.ctx, func() { nc.Close() })
	defer stop()
	c, _, err := supervisor.Accept(nc, helloWait, connOptions)
	release()
	if err != nil {
		l.mu.Lock()
		l.stats.Violations++
		l.reason = err.Error()
		l.mu.Unlock()
		return
	}
	l.mu.Lock()
	env, gen := l.env, -1
	for gen != l.envGen { // until no setEnv ran meanwhile
		env, gen = l.env, l.envGen
		l.mu.Unlock()
		if env != nil {
			ctx, cancel := context.WithTimeout(l.ctx, helloWait)
			err := supervisor.Configure(ctx, c, env)
			cancel()
			if err != nil {
				c.Close()
				return
			}
		}
		l.mu.Lock()
	}
	if l.closed {
		l.mu.Unlock()
		c.Close()
		return
	}
	old := l.conn
	l.conn = c
	l.stats.Connects++
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
	if old != nil {
		old.Close()
	}
	<-c.Done()
	l.mu.Lock()
	if l.conn == c {
		l.conn = nil
		l.reason = c.Err().Error()
		if errors.Is(c.Err(), supervisor.ErrProtocol) || errors.Is(c.Err(), supervisor.ErrSilent) {
			l.stats.Violations++
		}
		close(l.changed)
		l.changed = make(chan struct{})
	}
	l.mu.Unlock()
}

// watch restarts a supervisor that has been gone for restartAfter,
// waiting longer after each restart that brought none back.
func (l *link) watch() {
	backoff := restartAfter
	for {
		l.mu.Lock()
		conn, changed := l.conn, l.changed
		l.mu.Unlock()
		if conn != nil {
			backoff = restartAfter
			select {
			case <-changed:
				continue
			case <-l.ctx.Done():
				return
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-changed:
			t.Stop()
			continue
		case <-l.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		// Check again under the lock: a supervisor that connected as the
		// timer fired needs no second one, and the lock orders the restart
		// after what the sandbox's creator did under it (awaitSupervisor).
		l.mu.Lock()
		still := l.conn == nil && l.changed == changed
		l.mu.Unlock()
		if !still {
			continue
		}
		rctx, cancel := context.WithTimeout(l.ctx, 30*time.Second)
		if err := l.restart(rctx); err == nil {
			l.mu.Lock()
			l.stats.Restarts++
			l.mu.Unlock()
		}
		cancel()
		backoff = min(2*backoff, restartMax)
	}
}

// current returns the connection, or nil when no supervisor is connected.
func (l *link) current() *supervisor.Conn {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conn
}

// wait returns the connection, waiting up to d for one.
func (l *link) wait(ctx context.Context, d time.Duration) *supervisor.Conn {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		l.mu.Lock()
		c, changed := l.conn, l.changed
		l.mu.Unlock()
		if c != nil {
			return c
		}
		select {
		case <-changed:
		case <-t.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// setEnv sets the environment every connection is configured with (a
// claimed pool sandbox's session variables) and configures the current one.
func (l *link) setEnv(ctx context.Context, env map[string]string) error {
	l.mu.Lock()
	l.env = env
	l.envGen++
	c := l.conn
	l.mu.Unlock()
	if c == nil {
		return nil // the next connection gets it
	}
	return supervisor.Configure(ctx, c, env)
}

// snapshot returns the link's counters and why its last connection ended.
func (l *link) snapshot() (linkStats, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats, l.reason
}

// close stops accepting, ends the connection and waits for the link's
// goroutines. It is idempotent.
func (l *link) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	l.cancel()
	l.ln.Close()
	if c != nil {
		c.Close()
	}
	l.wg.Wait()
}

// remove closes the link and removes its directory.
func (l *link) remove() {
	l.close()
	_ = os.RemoveAll(l.dir)
}
