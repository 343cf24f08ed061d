package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paddock-dev/paddock/errcode"
)

// Bounds of the proxy.
const (
	// MaxConns bounds the connections one sandbox's proxy carries at once;
	// one more is closed as it comes.
	MaxConns = 256
	// headerTimeout bounds the read of a request's head.
	headerTimeout = 10 * time.Second
	// maxHeader bounds a request's head.
	maxHeader = 16 << 10
	// dialTimeout bounds the connection to the destination, all its
	// addresses tried.
	dialTimeout = 10 * time.Second
)

// Decision is what the proxy made of one connection the sandbox asked
// for, as it is recorded.
type Decision struct {
	// Method is CONNECT, or the method of a plain HTTP request.
	Method string `json:"method"`
	// Host is the name or address the sandbox asked for; Port its port.
	Host string `json:"host"`
	Port int    `json:"port"`
	// Addr is the address the proxy connects to ("" when denied, or when
	// no address of an allowed name could be reached).
	Addr string `json:"addr,omitempty"`
	// Allowed says whether the policy allows it; Rule is the entry that
	// did, Reason why it was refused.
	Allowed bool   `json:"allowed"`
	Rule    string `json:"rule,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// Traffic is what an allowed connection carried.
type Traffic struct {
	// BytesOut went from the sandbox to the destination, BytesIn back.
	BytesOut int64 `json:"bytes_out"`
	BytesIn  int64 `json:"bytes_in"`
}

// Recorder is told of every connection the sandbox asks for, before
// anything is sent to the destination: it records d, calls run (which
// connects, answers the sandbox and carries the bytes, or refuses) and
// records what run returns. A recorder may hold an allowed connection
// back (run it later) but must run it or close the proxy.
type Recorder func(ctx context.Context, d Decision, run func(ctx context.Context) (Traffic, error))

// Config is a proxy's policy and its means.
type Config struct {
	// Rules is the allow list.
	Rules []Rule
	// Guard refuses what no rule may open.
	Guard *Guard
	// Resolve looks a name up (default: the host's resolver). It is only
	// called for names a rule allows.
	Resolve func(ctx context.Context, name string) ([]netip.Addr, error)
	// Dial connects to an address (default: a net.Dialer).
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Record is told of every connection (required).
	Record Recorder
}

// Proxy serves one sandbox's egress on one listener.
type Proxy struct {
	cfg   Config
	ln    net.Listener
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	n     atomic.Int64
}

// Serve starts a proxy on ln; Close stops it.
func Serve(ln net.Listener, cfg Config) (*Proxy, error) {
	if cfg.Guard == nil || cfg.Record == nil {
		return nil, errors.New("egress: a proxy needs a guard and a recorder")
	}
	if cfg.Resolve == nil {
		cfg.Resolve = func(ctx context.Context, name string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", name)
		}
	}
	if cfg.Dial == nil {
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{cfg: cfg, ln: ln, ctx: ctx, stop: cancel, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the listener's address.
func (p *Proxy) Addr() net.Addr { return p.ln.Addr() }

// Close stops the listener and every connection, and waits for them.
func (p *Proxy) Close() {
	p.stop()
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.drop(c)
			p.handle(c)
		}()
	}
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil || len(p.conns) >= MaxConns {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) drop(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// handle reads one request and carries it out.
func (p *Proxy) handle(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(headerTimeout))
	br := bufio.NewReaderSize(io.LimitReader(c, maxHeader), 4096)
	req, err := http.ReadRequest(br)
	if err != nil {
		reply(c, http.StatusBadRequest, "bad proxy request: "+err.Error())
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	target, err := requestTarget(req)
	if err != nil {
		reply(c, http.StatusBadRequest, err.Error())
		return
	}
	name, ip, port, err := SplitHostPort(target)
	if err != nil {
		reply(c, http.StatusBadRequest, fmt.Sprintf("bad destination %q: %v", target, err))
		return
	}
	d := Decision{Method: req.Method, Host: name, Port: port}
	if name == "" {
		d.Host = ip.String()
	}
	addrs := p.decide(p.ctx, &d, name, ip)
	// What the head's reader holds past the head goes on, then the rest
	// of the connection, unbounded.
	body := io.MultiReader(bufferedOf(br), c)
	p.cfg.Record(p.ctx, d, func(ctx context.Context) (Traffic, error) {
		if !d.Allowed {
			reply(c, http.StatusForbidden, "paddock egress: "+d.Reason)
			return Traffic{}, errcode.New(errcode.PolicyDenied, "egress to %s:%d refused: %s", d.Host, port, d.Reason)
		}
		up, err := p.dial(ctx, addrs, port)
		if err != nil {
			reply(c, http.StatusBadGateway, "paddock egress: "+err.Error())
			return Traffic{}, errcode.Wrap(errcode.Unavailable, err, fmt.Sprintf("connect to %s:%d", d.Host, port))
		}
		if !p.track(up) {
			up.Close()
			reply(c, http.StatusServiceUnavailable, "paddock egress: closing")
			return Traffic{}, errcode.New(errcode.Unavailable, "the sandbox's proxy is closing")
		}
		defer p.drop(up)
		var t Traffic
		if req.Method == http.MethodConnect {
			if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
				return t, errcode.Wrap(errcode.Unavailable, err, "answer the sandbox")
			}
		} else {
			// The request's head goes on in origin form, its proxy
			// headers dropped, asking the server to close after its
			// answer; its body follows as the sandbox sends it.
			cw := &counter{w: up}
			err := writeHead(cw, req)
			t.BytesOut = cw.n
			if err != nil {
				return t, errcode.Wrap(errcode.Unavailable, err, "send the request")
			}
		}
		out, in := splice(c, body, up)
		t.BytesOut += out
		t.BytesIn = in
		return t, nil
	})
}

// writeHead writes req's head as an origin server reads it.
func writeHead(w io.Writer, req *http.Request) error {
	h := req.Header.Clone()
	for _, k := range []string{"Proxy-Connection", "Proxy-Authorization", "Connection", "Keep-Alive", "Content-Length", "Transfer-Encoding"} {
		h.Del(k)
	}
	if len(req.TransferEncoding) > 0 {
		h.Set("Transfer-Encoding", strings.Join(req.TransferEncoding, ", "))
	} else if req.ContentLength > 0 {
		h.Set("Content-Length", strconv.FormatInt(req.ContentLength, 10))
	}
	h.Set("Connection", "close")
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%s %s HTTP/1.1\r\nHost: %s\r\n", req.Method, req.URL.RequestURI(), req.Host)
	if err := h.Write(bw); err != nil {
		return err
	}
	bw.WriteString("\r\n")
	return bw.Flush()
}

// requestTarget is the host:port a proxy request names: CONNECT's
// authority, or an absolute http URL's host (port 80 by default).
func requestTarget(req *http.Request) (string, error) {
	if req.Method == http.MethodConnect {
		if req.Host == "" {
			return "", errors.New("CONNECT without a host:port")
		}
		return req.Host, nil
	}
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" {
		return "", errors.New("a proxy request is CONNECT host:port, or an absolute http:// URL (https goes through CONNECT)")
	}
	if req.URL.Port() == "" {
		return net.JoinHostPort(req.URL.Hostname(), "80"), nil
	}
	return req.URL.Host, nil
}

// decide fills in d from the rules and the guard, resolving a name only
// when a rule allows it, and returns the addresses to try.
func (p *Proxy) decide(ctx context.Context, d *Decision, name string, ip netip.Addr) []netip.Addr {
	guard := p.cfg.Guard.view() // the node's addresses as of this connection
	if name == "" {
		r, ok := matchAddr(p.cfg.Rules, ip, d.Port)
		if !ok {
			d.Reason = "no allow entry holds " + net.JoinHostPort(ip.String(), strconv.Itoa(d.Port))
			return nil
		}
		if why := guard.refused(ip, d.Port); why != "" {
			d.Reason = why
			return nil
		}
		d.Allowed, d.Rule = true, r.Text
		return []netip.Addr{ip}
	}
	r, ok := matchName(p.cfg.Rules, name, d.Port)
	if !ok {
		d.Reason = "no allow entry holds " + net.JoinHostPort(name, strconv.Itoa(d.Port)) + " (the name was not looked up)"
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	found, err := p.cfg.Resolve(rctx, name)
	if err != nil || len(found) == 0 {
		d.Reason = fmt.Sprintf("%s does not resolve: %v", name, err)
		return nil
	}
	var ok2 []netip.Addr
	var why string
	for _, a := range found {
		if w := guard.refused(a, d.Port); w != "" {
			why = w
			continue
		}
		ok2 = append(ok2, a.Unmap())
	}
	if len(ok2) == 0 {
		d.Reason = why
		return nil
	}
	d.Allowed, d.Rule = true, r.Text
	return ok2
}

// dial connects to the first of addrs that answers, within dialTimeout.
func (p *Proxy) dial(ctx context.Context, addrs []netip.Addr, port int) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	var last error
	for _, a := range addrs {
		c, err := p.cfg.Dial(ctx, net.JoinHostPort(a.String(), strconv.Itoa(port)))
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

// reply answers the sandbox with a status and a one-line reason, then
// the connection closes.
func reply(c net.Conn, code int, msg string) {
	msg = strings.ReplaceAll(msg, "\n", " ") + "\n"
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(msg), msg)
}

// bufferedOf returns what br holds already (read past the request's head).
func bufferedOf(br *bufio.Reader) io.Reader {
	b, _ := br.Peek(br.Buffered())
	return strings.NewReader(string(b))
}

// splice copies from (the sandbox's side, read through in) to up and back
// until both directions end (a half-close is passed on) or either fails,
// and returns the bytes each way.
func splice(c net.Conn, in io.Reader, up net.Conn) (out, back int64) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		n, err := io.Copy(up, in)
		out = n
		if cw, ok := up.(interface{ CloseWrite() error }); ok && err == nil {
			_ = cw.CloseWrite()
		} else {
			up.Close()
			c.Close()
		}
	}()
	n, err := io.Copy(c, up)
	back = n
	if cw, ok := c.(interface{ CloseWrite() error }); ok && err == nil {
		_ = cw.CloseWrite()
	} else {
		up.Close()
		c.Close()
	}
	<-done
	return out, back
}

// counter counts what is written through it.
type counter struct {
	w io.Writer
	n int64
}

func (c *counter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}
