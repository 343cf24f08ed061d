package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/nats-io/nkeys"
	"log/slog"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/egress"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/overlay"
	"github.com/paddock-dev/paddock/nodes/trees"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/snapshot"
	"github.com/paddock-dev/paddock/tracing"
)

// Agent is a node agent. Create it with New, then Start; Close drains it.
type Agent struct {
	nc     *nats.Conn
	log    *events.Log
	logger *slog.Logger
	cfg    Config
	// tarRestore makes a manifest restore write a tar into the runtime's
	// staging even when the runtime stages on the host (tests and
	// benchmarks compare both paths; atomic: set between operations).
	tarRestore atomic.Bool
	cmdSubj    commands.Subjects
	runtimes   map[string]runtime.Runtime
	// egressG is what no egress policy reaches, made on first use (under mu).
	egressG *egress.Guard
	order   []string // runtime names in preference order
	ops     map[commands.Op]opDef
	tracer  *tracing.Tracer
	// handle runs every operation (pipeline.go); teardowns end a
	// session's parts, in order (teardown.go). Both are set once in New.
	handle    handler
	teardowns []teardownHook
	// chunks is the node's local cache of snapshot chunks (nil: none);
	// set once in New.
	chunks *snapshot.Cache
	// trees keeps restored workspace trees for overlay restores (nil:
	// none); overlayOff is set once an overlay could not be mounted here.
	trees      *trees.Cache
	overlayOff atomic.Bool
	keptOff    atomic.Bool // SetKeptTrees, for tests
	// flights shares the fetches of chunks that concurrent restores want
	// (a fork's children).
	flights chunkFlights

	// ctx is cancelled by Close once the drain bound has passed; in-flight
	// operations run under it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // in-flight handlers
	loops  sync.WaitGroup // the heartbeat and reaper loops
	sem    chan struct{}

	// mu guards the fields below. Lock order: Agent.mu, then a session's
	// chain, then its mu (see session).
	mu       sync.Mutex
	store    *objectstore.Store
	inflight map[string]int // commands in flight, by tenant
	sessions map[string]*session
	nodeSubs []*nats.Subscription
	draining bool
	// registered is set once the node's registered event is recorded:
	// until then it takes no command and answers no announce, so that no
	// event it signs lands in the chain before the one that registers its
	// key (audit verify rejects such events: unknown_signer).
	registered bool
	cordoned   bool // no new sessions: the scheduler skips the node
	started    bool
	closed     bool
}

// New returns an agent that serves its sessions with the given runtimes
// (the first is preferred when a create names none). nc must be connected;
// log appends to the events stream.
func New(nc *nats.Conn, log *events.Log, cfg Config, logger *slog.Logger, rts ...runtime.Runtime) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(rts) == 0 {
		return nil, errors.New("nodes: at least one runtime is required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	if cfg.Signer == nil {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, fmt.Errorf("nodes: signing key: %w", err)
		}
		cfg.Signer = kp
	}
	log, err := log.Signed(cfg.Signer)
	if err != nil {
		return nil, err
	}
	a := &Agent{
		nc:       nc,
		log:      log,
		logger:   logger.With("node", cfg.ID),
		cfg:      cfg,
		cmdSubj:  commands.Subjects{Prefix: cfg.Prefix},
		runtimes: map[string]runtime.Runtime{},
		sessions: map[string]*session{},
		inflight: map[string]int{},
		sem:      make(chan struct{}, cfg.MaxConcurrent),
		ops:      sessionOps(),
		tracer:   tracing.New(cfg.TracerProvider),
	}
	if cfg.ChunkCacheDir != "" && cfg.ChunkCacheBytes > 0 {
		if a.chunks, err = snapshot.OpenCache(cfg.ChunkCacheDir, cfg.ChunkCacheBytes); err != nil {
			return nil, fmt.Errorf("nodes: chunk cache: %w", err)
		}
	}
	if cfg.TreeCacheDir != "" && cfg.TreeCacheBytes > 0 {
		a.trees, err = trees.Open(cfg.TreeCacheDir, cfg.TreeCacheBytes, a.overlayLowers)
		switch {
		case errors.Is(err, trees.ErrInUse):
			a.logger.Warn("another process keeps trees in this directory: restores write files", "dir", cfg.TreeCacheDir)
		case err != nil:
			return nil, fmt.Errorf("nodes: tree cache: %w", err)
		default:
			if perr := overlay.Probe(cfg.TreeCacheDir); perr != nil {
				a.logger.Info("this node cannot mount overlays: restores write files, no tree is kept", "err", perr)
				_ = a.trees.Close()
				a.trees = nil
			}
		}
	}
	a.handle = a.newPipeline()
	a.teardowns = a.teardownHooks()
	for _, rt := range rts {
		if _, dup := a.runtimes[rt.Name()]; dup {
			return nil, fmt.Errorf("nodes: runtime %q given twice", rt.Name())
		}
		a.runtimes[rt.Name()] = rt
		a.order = append(a.order, rt.Name())
	}
	if err := cfg.Metrics.WatchNode(a.metricsState); err != nil {
		return nil, fmt.Errorf("nodes: metrics: %w", err)
	}
	return a, nil
}

// ID returns the node's id.
func (a *Agent) ID() string { return a.cfg.ID }

// Start subscribes to the node's subjects, records a registered event and
// starts heartbeating. It returns once the subscriptions are in place at
// the server.
func (a *Agent) Start(ctx context.Context) error {
	a.mu.Lock()
	if a.started {
		a.mu.Unlock()
		return errors.New("nodes: agent already started")
	}
	a.started = true
	// The agent's own context outlives Start's ctx: it is cancelled by
	// Close, which owns every goroutine started under it.
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.mu.Unlock()

	subs := []struct {
		subj string
		fn   nats.MsgHandler
	}{
		{a.cmdSubj.Node(a.cfg.ID, "create"), a.dispatch("", a.handleCreate)},
		{a.cmdSubj.Node(a.cfg.ID, "resume"), a.dispatch("", a.handleResumePlacement)},
		{a.cmdSubj.Node(a.cfg.ID, "ping"), a.handlePing},
		{a.cmdSubj.Node(a.cfg.ID, commands.NodeCordon), a.dispatch("", a.handleCordon(true))},
		{a.cmdSubj.Node(a.cfg.ID, commands.NodeUncordon), a.dispatch("", a.handleCordon(false))},
		{a.cmdSubj.Node(a.cfg.ID, commands.NodeRelease), a.dispatch("", a.handleRelease)},
		{a.cmdSubj.Announce(), a.handleAnnounce},
	}
	for _, s := range subs {
		sub, err := a.nc.Subscribe(s.subj, s.fn)
		if err != nil {
			a.unsubscribeNode()
			return fmt.Errorf("nodes: subscribe %s: %w", s.subj, err)
		}
		a.mu.Lock()
		a.nodeSubs = append(a.nodeSubs, sub)
		a.mu.Unlock()
	}
	if err := a.nc.FlushTimeout(10 * time.Second); err != nil {
		a.unsubscribeNode()
		return fmt.Errorf("nodes: flush: %w", err)
	}
	info, _ := json.Marshal(a.info())
	if err := a.register(ctx, &events.NodeEvent{
		Version: events.Version, EventID: uuid.NewString(), TS: time.Now().UTC(),
		Node: a.cfg.ID, Kind: "registered", Data: info,
	}); err != nil {
		a.unsubscribeNode()
		return err
	}
	a.mu.Lock()
	a.registered = true
	a.mu.Unlock()
	a.adoptAll(ctx)
	a.heartbeat()
	a.loops.Add(1)
	go a.every(a.cfg.HeartbeatInterval, a.heartbeat)
	a.loops.Add(1)
	go a.every(a.cfg.ExpiryInterval, func() { a.expire(a.ctx); a.reapIdle(); a.stopIdle(a.ctx); a.shutRetained(a.ctx) })
	if a.hasFinder() {
		a.loops.Add(1)
		go a.every(a.cfg.ReapInterval, func() { a.reap(a.ctx) })
	}
	a.logger.Info("node agent started", "runtimes", a.order, "sessions", len(a.Sessions()))
	return nil
}

// Close stops taking new commands, waits for in-flight ones until ctx ends,
// then cancels what is left and waits for it. Sandboxes are left as they
// are. Close is safe to call twice.
func (a *Agent) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closed || !a.started {
		a.closed = true
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	a.draining = true
	subs := a.nodeSubs
	a.nodeSubs = nil
	for _, s := range a.sessions {
		s.mu.Lock()
		if s.sub != nil {
			subs = append(subs, s.sub)
		}
		s.mu.Unlock()
	}
	a.mu.Unlock()

	for _, s := range subs {
		_ = s.Unsubscribe() // stop taking new commands; in-flight ones go on
	}
	a.heartbeat() // tell schedulers we are draining
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("nodes: drain bound reached, cancelling in-flight commands: %w", ctx.Err())
	}
	// Processes cannot outlive the node that holds their streams: each
	// ends now, its proc_exit saying lost.
	pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
	for _, s := range a.held() {
		_ = a.teardown(pctx, s, ending{why: "stopping with its node", proc: ProcLost})
	}
	pcancel()
	a.cancel()
	<-done
	a.loops.Wait()
	// Best effort: the stream may already be gone when the engine stops first.
	ectx, ecancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer ecancel()
	_ = a.log.AppendNode(ectx, &events.NodeEvent{
		Version: events.Version, EventID: uuid.NewString(), TS: time.Now().UTC(),
		Node: a.cfg.ID, Kind: "stopped",
	})
	// A last heartbeat says so to the schedulers, which then do not
	// declare the node lost when its heartbeats stop.
	last := a.info()
	last.Status = "stopped"
	if b, err := json.Marshal(last); err == nil {
		_ = a.nc.Publish(a.cmdSubj.Heartbeat(a.cfg.ID), b)
		_ = a.nc.FlushTimeout(time.Second)
	}
	if a.trees != nil {
		_ = a.trees.Close()
	}
	a.logger.Info("node agent stopped")
	return err
}

func (a *Agent) hasFinder() bool {
	for _, rt := range a.runtimes {
		if _, ok := rt.(finder); ok {
			return true
		}
	}
	return false
}

func (a *Agent) unsubscribeNode() {
	a.mu.Lock()
	subs := a.nodeSubs
	a.nodeSubs = nil
	a.mu.Unlock()
	for _, s := range subs {
		_ = s.Unsubscribe()
	}
}

// dispatch runs h for each message on its own goroutine, bounded by
// MaxConcurrent and tracked for Close. A message of tenant (the tenant of
// a session's subject; "" for the node's own subjects, whose handlers
// admit the tenant the body names) past the tenant's share is answered
// quota_exceeded at once, so that one tenant's flood neither takes every
// slot nor queues in front of another tenant. A panic outside an
// operation (in decoding, say) is recovered, logged and answered as
// internal; one inside an operation is the operation's (see the recovered layer).
func (a *Agent) dispatch(tenant string, h func(ctx context.Context, m *nats.Msg)) nats.MsgHandler {
	return func(m *nats.Msg) {
		// A message JetStream delivered onto a command subject (a consumer
		// whose deliver subject names it), or one that is no request (a
		// JetStream API response aimed here), is no command: it is
		// dropped unanswered (an answer to $JS.ACK would acknowledge it).
		if err := auth.RequireReply(m); err != nil {
			a.logger.Warn("not a command: dropped", "subject", m.Subject, "err", err)
			return
		}
		a.mu.Lock()
		if a.draining {
			a.mu.Unlock()
			a.respond(m, commands.ErrorReply(errcode.New(errcode.Unavailable, "node %s is draining", a.cfg.ID)))
			return
		}
		if !a.registered {
			a.mu.Unlock()
			a.respond(m, commands.ErrorReply(errcode.New(errcode.Unavailable, "node %s is starting: its registration is not recorded yet", a.cfg.ID)))
			return
		}
		release := func() {}
		if tenant != "" {
			var err error
			if release, err = a.admitLocked(tenant); err != nil {
				a.mu.Unlock()
				a.respond(m, commands.ErrorReply(err))
				return
			}
		}
		a.wg.Add(1)
		a.mu.Unlock()
		a.sem <- struct{}{}
		go func() {
			defer a.wg.Done()
			defer release()
			defer func() { <-a.sem }()
			defer func() {
				if r := recover(); r != nil {
					a.logger.Error("handler panicked", "subject", m.Subject, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
					a.respond(m, commands.ErrorReply(errcode.New(errcode.Internal, "internal error; the node's log has the cause")))
				}
			}()
			h(tracing.Extract(a.ctx, m.Header), m)
		}()
	}
}

// admit takes one of tenant's command slots on this node, or fails with
// quota_exceeded when the tenant holds TenantConcurrent of them; the
// returned func gives the slot back.
func (a *Agent) admit(tenant string) (func(), error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.admitLocked(tenant)
}

// admitLocked is admit with a.mu held.
func (a *Agent) admitLocked(tenant string) (func(), error) {
	if a.inflight[tenant] >= a.cfg.TenantConcurrent {
		return nil, errcode.New(errcode.QuotaExceeded, "tenant %s has %d commands in flight on node %s, its limit; retry when one ends", tenant, a.cfg.TenantConcurrent, a.cfg.ID)
	}
	a.inflight[tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			if a.inflight[tenant]--; a.inflight[tenant] <= 0 {
				delete(a.inflight, tenant)
			}
			a.mu.Unlock()
		})
	}, nil
}

// attach sets s's sandbox and then serves s's subject: no command reaches
// a session before its sandbox is set.
func (a *Agent) attach(s *session, sb runtime.Sandbox) error {
	s.mu.Lock()
	s.sb = sb
	s.mu.Unlock()
	return a.subscribe(s)
}

// subscribe serves s's subject and waits until the server has the
// subscription. The subscription is recorded under a.mu, so Close either
// sees it (and unsubscribes it) or has begun draining first, and then it
// is dropped here: a session made while the agent closes cannot leak one.
func (a *Agent) subscribe(s *session) error {
	sub, err := a.nc.Subscribe(a.cmdSubj.SessionAll(s.tenant, s.id), a.dispatch(s.tenant, a.sessionHandler(s)))
	if err == nil {
		err = a.nc.FlushTimeout(10 * time.Second)
	}
	if err != nil {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
		return errcode.Wrap(errcode.Unavailable, err, "subscribe the session's subject")
	}
	a.mu.Lock()
	draining := a.draining
	if !draining {
		s.mu.Lock()
		s.sub = sub
		s.mu.Unlock()
	}
	a.mu.Unlock()
	if draining {
		_ = sub.Unsubscribe()
		return errcode.New(errcode.Unavailable, "node %s is draining", a.cfg.ID)
	}
	return nil
}

func (a *Agent) respond(m *nats.Msg, data []byte) {
	if m.Reply == "" {
		return
	}
	if err := m.Respond(data); err != nil {
		a.logger.Warn("reply failed", "subject", m.Subject, "err", err)
	}
}

// poolFree is the ready warm-pool sandboxes of the node's runtimes by
// image (nil when none keeps a pool). The runtimes map is fixed after New.
func (a *Agent) poolFree() map[string]int {
	var pools map[string]int
	for _, rt := range a.runtimes {
		if p, ok := rt.(interface{ PoolFree() map[string]int }); ok {
			for img, n := range p.PoolFree() {
				if pools == nil {
					pools = map[string]int{}
				}
				pools[img] += n
			}
		}
	}
	return pools
}

func (a *Agent) info() Info {
	a.mu.Lock()
	defer a.mu.Unlock()
	status := "up"
	if a.draining {
		status = "draining"
	}
	tenants := map[string]int{}
	for _, s := range a.sessions {
		tenants[s.tenant]++
	}
	pools := a.poolFree()
	return Info{
		Node: a.cfg.ID, Runtimes: a.order, Capacity: a.cfg.Capacity, Sessions: len(a.sessions),
		Tenants: tenants, Labels: a.cfg.Labels, Status: status, TS: time.Now().UTC(), SigningKey: a.log.SigningKey(),
		Cordoned: a.cordoned, Pools: pools, Disks: a.disks(),
	}
}

func (a *Agent) heartbeat() {
	b, err := json.Marshal(a.info())
	if err != nil {
		return
	}
	if err := a.nc.Publish(a.cmdSubj.Heartbeat(a.cfg.ID), b); err != nil {
		a.logger.Warn("heartbeat failed", "err", err)
	}
}

// every calls fn every interval until the agent's context ends; it is one
// of the agent's loops, which Close waits for.
func (a *Agent) every(interval time.Duration, fn func()) {
	defer a.loops.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

func (a *Agent) handlePing(m *nats.Msg) {
	if auth.RequireReply(m) != nil {
		return
	}
	b, _ := commands.ResultReply(a.info())
	a.respond(m, b)
}

// handleAnnounce heartbeats at once when the scheduler asks; a message
// JetStream delivered onto the announce subject does not make every node
// heartbeat once per event.
func (a *Agent) handleAnnounce(m *nats.Msg) {
	if auth.Delivered(m) != nil {
		return
	}
	a.mu.Lock()
	registered := a.registered
	a.mu.Unlock()
	if !registered {
		return // not up until its registration is recorded
	}
	a.heartbeat()
}

// Sessions returns the keys (tenant/session) of the sessions the agent
// holds, sorted.
func (a *Agent) Sessions() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.sessions))
	for k := range a.sessions {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// held returns the sessions the agent holds now.
func (a *Agent) held() []*session {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*session, 0, len(a.sessions))
	for _, s := range a.sessions {
		out = append(out, s)
	}
	return out
}

func sessionKey(tenant, id string) string { return tenant + "/" + id }

// register records the node's registered event. A node may start with, or
// before, the engine that makes the streams, and a new replicated stream
// answers only once it has elected a leader: while the append fails as
// unavailable (no stream, no leader, no answer) it is tried again, the
// same event (one id, so recorded once), with backoff, until ctx ends.
func (a *Agent) register(ctx context.Context, ev *events.NodeEvent) error {
	backoff, warned := 100*time.Millisecond, false
	for {
		err := a.log.AppendNode(ctx, ev)
		if err == nil || errcode.Of(err) != errcode.Unavailable || ctx.Err() != nil {
			return err
		}
		if !warned {
			a.logger.Warn("waiting for the events stream (is the engine up?)", "err", err)
			warned = true
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("nodes: register: %w (last: %w)", ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}
