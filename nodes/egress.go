package nodes

import (
	"context"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/egress"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// Egress (docs/security.md, "Egress"). A session with egress mode allow
// runs in a sandbox with no network; the node listens on the sandbox's
// own loopback, in its network namespace, and serves it an HTTP proxy
// (package egress) that opens only what the allow list holds, and records
// every connection as an egress operation of the session. The proxy runs
// while the sandbox runs: it is opened when the sandbox starts (create,
// start, resume, reattach) and closed when it stops running here.

// egressListener is a sandbox the node can serve an egress proxy to: it
// listens on the sandbox's loopback (the docker runtime, in the
// container's network namespace).
type egressListener interface {
	ListenEgress(ctx context.Context, port int) (net.Listener, error)
}

// egressEnforcer is a runtime whose sandboxes are egressListeners.
type egressEnforcer interface {
	EnforcesEgress() bool
}

// sandboxNetworks is a runtime that says which networks its sandboxes
// with an open network live on: no egress policy reaches them.
type sandboxNetworks interface {
	SandboxNetworks(ctx context.Context) ([]netip.Prefix, error)
}

// checkEgress refuses a policy that runtime rt cannot enforce.
func checkEgress(rt runtime.Runtime, eg commands.Egress) error {
	if eg.Mode != egress.ModeAllow {
		return nil
	}
	if e, ok := rt.(egressEnforcer); ok && e.EnforcesEgress() {
		return nil
	}
	return errcode.New(errcode.PolicyDenied, "the %s runtime has no network isolation, so it cannot enforce an egress allow list; use the docker runtime", rt.Name())
}

// proxyEnv is what a sandbox's processes are told of the proxy: the
// variables HTTP clients (curl, pip, Python's urllib, Go) read. A sandbox
// without a network gets them too, so that a later resume with an allow
// list needs no new sandbox; nothing listens there until then.
func proxyEnv(env map[string]string, port int) map[string]string {
	out := maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	u := "http://127.0.0.1:" + strconv.Itoa(port)
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"} {
		if _, set := out[k]; !set {
			out[k] = u
		}
	}
	for _, k := range []string{"NO_PROXY", "no_proxy"} {
		if _, set := out[k]; !set {
			out[k] = "localhost,127.0.0.1,::1"
		}
	}
	return out
}

// withoutProxyEnv removes the variables proxyEnv set (those that still
// name the proxy), for a sandbox with an open network.
func withoutProxyEnv(env map[string]string, port int) map[string]string {
	out := maps.Clone(env)
	set := proxyEnv(nil, port)
	for k, v := range set {
		if out[k] == v {
			delete(out, k)
		}
	}
	return out
}

// changeEgress makes eg the policy of s from this resume on, when the
// node's policy and the runtime allow it; recreate says whether the
// resume makes a new sandbox (a change to or from open needs one). It
// returns a function that puts the old policy back (for a resume that
// fails).
func (a *Agent) changeEgress(s *session, eg commands.Egress, recreate bool) (undo func(), err error) {
	if eg.Mode == egress.ModeOpen && !a.cfg.Policy.AllowNetwork {
		return nil, errcode.New(errcode.PolicyDenied, "this node allows no open network (egress mode allow, with an allow list, may be)")
	}
	if rt, ok := a.runtimes[s.runtime]; ok {
		if err := checkEgress(rt, eg); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.egress
	if !recreate && (old.Mode == egress.ModeOpen) != (eg.Mode == egress.ModeOpen) {
		return nil, errcode.New(errcode.InvalidState, "session %s: a change of egress from %s to %s needs a new sandbox; shut the session down, then resume it", s.id, old.Mode, eg.Mode)
	}
	s.setEgressLocked(eg)
	return func() {
		s.mu.Lock()
		s.setEgressLocked(old)
		s.mu.Unlock()
	}, nil
}

// egressGuard returns the node's guard, made on first use from its
// config and its runtimes' sandbox networks.
func (a *Agent) egressGuard(ctx context.Context) (*egress.Guard, error) {
	a.mu.Lock()
	g := a.egressG
	a.mu.Unlock()
	if g != nil {
		return g, nil
	}
	// Made outside the agent's lock (it asks the runtimes); two made at
	// once are the same, and the first kept wins.
	refuse := append([]netip.Prefix{}, a.cfg.Egress.Refuse...)
	for _, rt := range a.runtimes {
		if n, ok := rt.(sandboxNetworks); ok {
			ps, err := n.SandboxNetworks(ctx)
			if err != nil {
				return nil, errcode.Wrap(errcode.RuntimeError, err, "the sandboxes' networks")
			}
			refuse = append(refuse, ps...)
		}
	}
	ports, servers := a.clusterEdges(ctx)
	g, err := egress.NewGuard(egress.GuardConfig{Refuse: refuse, Ports: ports, Servers: servers})
	if err != nil {
		return nil, errcode.Wrap(errcode.RuntimeError, err, "egress guard")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.egressG == nil {
		a.egressG = g
	}
	return a.egressG, nil
}

// natsDefaultPorts are NATS's default client, route, leafnode and
// monitoring ports: a remote cluster's route and leafnode ports are not
// visible to a client, and these are what most clusters use.
var natsDefaultPorts = []int{4222, 6222, 7422, 8222}

// clusterEdges returns the ports of the NATS cluster the node is part of
// and the addresses of its servers: NATS's default ports, the config's
// ClusterPorts, and the port and address of every server URL the node's
// connection knows (those it was given and those the cluster told it
// of). A server named by a host name is looked up once, here; one that
// does not resolve is left out (its private addresses are refused on
// those ports anyway).
func (a *Agent) clusterEdges(ctx context.Context) ([]int, []netip.Addr) {
	ports := append(append([]int{}, natsDefaultPorts...), a.cfg.Egress.ClusterPorts...)
	var servers []netip.Addr
	urls := a.nc.Servers()
	if u := a.nc.ConnectedUrl(); u != "" {
		urls = append(urls, u)
	}
	// The address connected to (not an in-process connection's "pipe").
	if ap, err := netip.ParseAddrPort(a.nc.ConnectedAddr()); err == nil {
		urls = append(urls, "nats://"+ap.String())
	}
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			continue
		}
		if p, err := strconv.Atoi(u.Port()); err == nil && p > 0 && p <= 65535 {
			ports = append(ports, p)
		}
		host := u.Hostname()
		if ip, err := netip.ParseAddr(host); err == nil {
			servers = append(servers, ip.Unmap())
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ips, err := net.DefaultResolver.LookupNetIP(lctx, "ip", host)
		cancel()
		if err == nil {
			servers = append(servers, ips...)
		}
	}
	return ports, servers
}

// openEgress starts the proxy of s in sb, which runs, when s's policy is
// allow; it replaces a proxy s had.
func (a *Agent) openEgress(ctx context.Context, s *session, sb runtime.Sandbox) error {
	s.closeEgress()
	s.mu.Lock()
	eg := s.egress
	s.mu.Unlock()
	if eg.Mode != egress.ModeAllow {
		return nil
	}
	rules, err := egress.Parse(eg.Allow)
	if err != nil {
		return err
	}
	l, ok := sb.(egressListener)
	if !ok {
		return errcode.New(errcode.PolicyDenied, "the %s runtime cannot enforce an egress allow list", s.runtime)
	}
	guard, err := a.egressGuard(ctx)
	if err != nil {
		return err
	}
	ln, err := l.ListenEgress(ctx, a.cfg.Egress.Port)
	if err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "open the sandbox's egress proxy")
	}
	rec := &egressRecorder{a: a, s: s, lim: rate.NewLimiter(rate.Limit(a.cfg.Egress.RecordRate), a.cfg.Egress.RecordBurst)}
	p, err := egress.Serve(ln, egress.Config{Rules: rules, Guard: guard, Resolve: a.cfg.Egress.Resolve, Record: rec.record})
	if err != nil {
		ln.Close()
		return errcode.Wrap(errcode.Internal, err, "egress proxy")
	}
	s.mu.Lock()
	s.proxy = p
	s.mu.Unlock()
	a.logger.Info("egress proxy open", "session", s.id, "rules", len(rules))
	return nil
}

// closeEgress stops the session's proxy, if any, and waits for its
// connections (each records its finish).
func (s *session) closeEgress() {
	s.mu.Lock()
	p := s.proxy
	s.proxy = nil
	s.mu.Unlock()
	if p != nil {
		p.Close()
	}
}

// egressRecorder records one proxy's connections as egress operations of
// its session, within the session's record budget.
type egressRecorder struct {
	a   *Agent
	s   *session
	lim *rate.Limiter
	// unrecorded counts refused connections dropped over the budget since
	// the last record.
	unrecorded atomic.Int64
}

// record records d and runs the connection (see egress.Recorder). An
// allowed connection waits for the budget; a refused one over it is run
// (refused) and counted.
func (r *egressRecorder) record(ctx context.Context, d egress.Decision, run func(context.Context) (egress.Traffic, error)) {
	r.a.cfg.Metrics.Egress(d.Allowed)
	if !d.Allowed && !r.lim.Allow() {
		r.unrecorded.Add(1)
		_, _ = run(ctx)
		return
	}
	if d.Allowed {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := r.lim.Wait(wctx)
		cancel()
		if err != nil {
			return // the proxy is closing, or the budget is spent for long: the connection closes unrun
		}
	}
	start := events.EgressStart{Decision: d, Unrecorded: r.unrecorded.Swap(0)}
	// The record outlives the proxy's context: a connection closed by a
	// stop still gets its finish.
	rctx := context.WithoutCancel(ctx)
	r.a.perform(rctx, r.s, commands.Request{Actor: "sandbox"}, commands.OpEgress, start, func(ctx context.Context) (outcome, error) {
		t, err := run(ctx)
		if err != nil {
			return outcome{}, err
		}
		return outcome{result: struct{}{}, data: t}, nil
	})
}
