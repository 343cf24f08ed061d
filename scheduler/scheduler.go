package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/paddock-dev/paddock/auth"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/tracing"
)

// QueueGroup is the queue group schedulers share.
const QueueGroup = "paddock-scheduler"

// Config configures a Scheduler.
type Config struct {
	// Prefix of every subject (default sbx).
	Prefix string
	// NodeTTL is how long a node counts as up after its last heartbeat
	// (default 10s).
	NodeTTL time.Duration
	// WaitForNode is how long a create waits for a suitable node to
	// heartbeat when none is known (default 3s).
	WaitForNode time.Duration
	// ForwardTimeout bounds a create on the chosen node (default 2m).
	ForwardTimeout time.Duration
	// TenantSessions is the most sessions one tenant may hold across all
	// nodes (0: no limit besides each node's own share). A create over it
	// is quota_exceeded. The count is the nodes' heartbeats plus the
	// placements since, so with several engines each may admit up to the
	// limit between two heartbeats.
	TenantSessions int
	// Name is this engine's name as the writer of the events it records
	// (node_lost and the finishes a lost node left open): the events'
	// node field, and what audit verify trusts its key for (default
	// "engine"; engine serve uses its credentials' name).
	Name string
	// Signer signs the events the scheduler records (nil: a key made for
	// this run, declared in each lost event it records).
	Signer events.Signer
	// Metrics records placements and rejections and reports the nodes as
	// the scheduler sees them (nil: none; *metrics.Metrics is one).
	Metrics Recorder
	// LostCheck is how often the scheduler looks for nodes silent past
	// NodeTTL (default 1s); a negative value turns loss detection off.
	LostCheck time.Duration
	// AutoResume resumes the sessions of a lost node on nodes that are up,
	// from their last snapshots (engine serve --auto-resume lost).
	AutoResume bool
	// LostSweep is, with AutoResume, how often the scheduler looks for
	// lost sessions that no resume followed (their engine died before it
	// resumed them, or every try failed) and resumes them (default 30s).
	// A sweep reads the whole sessions projection, so after each one that
	// found nothing to do the next waits twice as long, up to 16 times
	// LostSweep; a node going silent brings it back to LostSweep.
	LostSweep time.Duration
	// TracerProvider makes a span for every create, resume, lookup and
	// delete the scheduler handles, whose trace context travels on to the
	// node (nil: tracing off; see package tracing).
	TracerProvider trace.TracerProvider
	// MaxForks is the most children one fork may ask for (default and at
	// most commands.MaxForks); more is policy_denied.
	MaxForks int
}

// Validate checks the config.
func (c Config) Validate() error {
	if c.Name != "" {
		if err := commands.CheckToken("engine name", c.Name); err != nil {
			return fmt.Errorf("scheduler: %w", err)
		}
	}
	if c.NodeTTL < 0 || c.WaitForNode < 0 || c.ForwardTimeout < 0 || c.LostSweep < 0 {
		return errors.New("scheduler: negative duration")
	}
	if c.MaxForks < 0 || c.MaxForks > commands.MaxForks {
		return fmt.Errorf("scheduler: max forks %d is outside 0..%d", c.MaxForks, commands.MaxForks)
	}
	if c.TenantSessions < 0 {
		return errors.New("scheduler: negative tenant session limit")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = commands.DefaultPrefix
	}
	if c.NodeTTL == 0 {
		c.NodeTTL = 10 * time.Second
	}
	if c.WaitForNode == 0 {
		c.WaitForNode = 3 * time.Second
	}
	if c.ForwardTimeout == 0 {
		c.ForwardTimeout = 2 * time.Minute
	}
	if c.Name == "" {
		c.Name = "engine"
	}
	if c.LostCheck == 0 {
		c.LostCheck = time.Second
	}
	if c.LostSweep == 0 {
		c.LostSweep = 30 * time.Second
	}
	if c.MaxForks == 0 {
		c.MaxForks = DefaultMaxForks
	}
	return c
}

type nodeRecord struct {
	info     events.NodeInfo
	lastSeen time.Time
	lost     bool // declared lost since lastSeen
	// recorded: its lost event for lastSeen is appended, but sessions
	// another node was taking over were left to that node, to be looked
	// at again (lost is set once none is left).
	recorded bool
}

// Scheduler places new sessions on nodes. Start it, then Close it.
type Scheduler struct {
	nc     *nats.Conn
	log    *events.Log
	logger *slog.Logger
	cfg    Config
	subj   commands.Subjects
	tracer *tracing.Tracer

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	stats struct {
		projected, folds atomic.Int64 // session reads answered from KV, from a fold
		sweeps           atomic.Int64 // lost-session sweeps done
	}

	// claimMu makes a placement's choice of node and its count on it one
	// step (claim); taken before mu.
	claimMu sync.Mutex

	mu       sync.Mutex          // guards the fields below
	sessions *projector.Sessions // the sessions projection, once opened
	nodes    map[string]nodeRecord
	// heard is when the scheduler last heard any node's heartbeat.
	heard   time.Time
	placing map[string]int // placements in flight, by tenant
	// resumeSem bounds the auto-resumes in flight.
	resumeSem chan struct{}
	// resuming are the sessions this engine is auto-resuming now.
	resuming map[sessionKey]bool
	// swept are the lost sessions the sweep leaves alone until a time
	// (one that cannot come back without its client, one whose resume
	// failed for good), so that it does not retry or log them every round.
	swept   map[sessionKey]time.Time
	changed chan struct{} // closed and replaced on every heartbeat
	subs    []*nats.Subscription
	closed  bool

	// workspaces is the workspace bucket, once opened (see diff.go).
	workspaces *objectstore.Store
}

// New returns a scheduler on nc that reads session events through log.
func New(nc *nats.Conn, log *events.Log, cfg Config, logger *slog.Logger) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	signer := cfg.Signer
	if signer == nil {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, fmt.Errorf("scheduler: signing key: %w", err)
		}
		signer = kp
	}
	log, err := log.Signed(signer)
	if err != nil {
		return nil, err
	}
	return &Scheduler{
		nc: nc, log: log, logger: logger, cfg: cfg,
		subj:      commands.Subjects{Prefix: cfg.Prefix},
		tracer:    tracing.New(cfg.TracerProvider),
		nodes:     map[string]nodeRecord{},
		placing:   map[string]int{},
		changed:   make(chan struct{}),
		resumeSem: make(chan struct{}, 4),
		resuming:  map[sessionKey]bool{},
		swept:     map[sessionKey]time.Time{},
	}, nil
}

// Start subscribes and asks every node to announce itself.
func (s *Scheduler) Start(ctx context.Context) error {
	if err := s.watch(); err != nil {
		return err
	}
	// Handlers run under the scheduler's own context, cancelled by Close.
	s.ctx, s.cancel = context.WithCancel(context.Background())
	type sub struct {
		subj, queue string
		fn          nats.MsgHandler
	}
	for _, x := range []sub{
		{s.subj.HeartbeatAll(), "", s.handleHeartbeat},
		{s.subj.CreateAll(), QueueGroup, s.async(s.handleCreate)},
		{s.subj.LookupAll(), QueueGroup, s.async(s.handleLookup)},
		{s.subj.DiffAll(), QueueGroup, s.async(s.handleDiff)},
		{s.subj.ResumeAll(), QueueGroup, s.async(s.handleResume)},
		{s.subj.DeleteAll(), QueueGroup, s.async(s.handleDelete)},
		{s.subj.ForkAll(), QueueGroup, s.async(s.handleFork)},
	} {
		ns, err := s.nc.QueueSubscribe(x.subj, x.queue, x.fn)
		if err != nil {
			s.Close()
			return fmt.Errorf("scheduler: subscribe %s: %w", x.subj, err)
		}
		s.mu.Lock()
		s.subs = append(s.subs, ns)
		s.mu.Unlock()
	}
	if err := s.nc.FlushTimeout(10 * time.Second); err != nil {
		s.Close()
		return fmt.Errorf("scheduler: flush: %w", err)
	}
	if err := s.nc.Publish(s.subj.Announce(), nil); err != nil {
		s.Close()
		return fmt.Errorf("scheduler: announce: %w", err)
	}
	if s.cfg.LostCheck > 0 {
		s.loadKnownNodes(ctx)
		s.wg.Add(1)
		go s.watchLoss()
	}
	return nil
}

// Close unsubscribes and waits for in-flight requests. Safe to call twice.
func (s *Scheduler) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	subs := s.subs
	s.subs = nil
	s.mu.Unlock()
	for _, x := range subs {
		_ = x.Unsubscribe()
	}
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
}

// A message JetStream delivered onto a command subject, or one that is
// no request (a JetStream API response aimed here), is dropped unanswered
// (auth.RequireReply): no handler sees it, and an answer to a $JS.ACK
// reply would acknowledge it.
func (s *Scheduler) async(h func(ctx context.Context, m *nats.Msg)) nats.MsgHandler {
	return func(m *nats.Msg) {
		if err := auth.RequireReply(m); err != nil {
			s.logger.Warn("not a command: dropped", "subject", m.Subject, "err", err)
			return
		}
		s.spawn(func() { h(tracing.Extract(s.ctx, m.Header), m) })
	}
}

// spawn runs fn on a goroutine Close waits for, unless the scheduler is
// closed.
func (s *Scheduler) spawn(fn func()) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		fn()
	}()
}

// handleHeartbeat records a node's heartbeat. Only that node may publish
// on its heartbeat subject; what JetStream delivers there (a consumer's
// deliver subject, a pull or direct get aimed at it) is dropped, and a
// JetStream API response aimed at it names no node, so fails the check
// below.
func (s *Scheduler) handleHeartbeat(m *nats.Msg) {
	if err := auth.Delivered(m); err != nil {
		s.logger.Warn("not a heartbeat: dropped", "subject", m.Subject, "err", err)
		return
	}
	var info events.NodeInfo
	if err := json.Unmarshal(m.Data, &info); err != nil || commands.CheckToken("node", info.Node) != nil {
		s.logger.Warn("bad heartbeat", "subject", m.Subject)
		return
	}
	// A node speaks for itself only: permissions may let it publish on its
	// own heartbeat subject, and nothing in the body should widen that.
	if m.Subject != s.subj.Heartbeat(info.Node) {
		s.logger.Warn("heartbeat names another node than its subject", "subject", m.Subject, "node", info.Node)
		return
	}
	s.mu.Lock()
	s.heard = time.Now()
	s.nodes[info.Node] = nodeRecord{info: info, lastSeen: s.heard}
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// Reads says how many session reads (lookups, resumes) the sessions
// projection answered and how many needed a fold of the session's events
// because the projection lagged behind them or was not there.
func (s *Scheduler) Reads() (projected, folded int64) {
	return s.stats.projected.Load(), s.stats.folds.Load()
}

// Sweeps says how many times the scheduler has looked through the
// sessions for lost ones to resume (with AutoResume).
func (s *Scheduler) Sweeps() int64 { return s.stats.sweeps.Load() }

// Nodes returns the nodes the scheduler counts as up, sorted by id.
func (s *Scheduler) Nodes() []events.NodeInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []events.NodeInfo
	for _, r := range s.nodes {
		if time.Since(r.lastSeen) <= s.cfg.NodeTTL && r.info.Status == "up" {
			out = append(out, r.info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// want is what a placement asks of a node: a runtime ("" any) and labels
// the node must carry.
type want struct {
	runtime string
	labels  map[string]string
	// image, for a create, is the image it asks for: a node with a free
	// warm-pool sandbox of it is preferred.
	image string
}

func (w want) String() string {
	what := "any runtime"
	if w.runtime != "" {
		what = "runtime " + w.runtime
	}
	if len(w.labels) > 0 {
		keys := make([]string, 0, len(w.labels))
		for k, v := range w.labels {
			keys = append(keys, k+"="+v)
		}
		sort.Strings(keys)
		what += " and labels " + strings.Join(keys, ",")
	}
	return what
}

// fits reports whether node n can take the placement: it is not
// cordoned, has room (on a disk that is not critically full), offers the
// runtime and carries every label.
func (w want) fits(n events.NodeInfo) bool {
	if n.Cordoned || n.Sessions >= n.Capacity || n.DiskCritical() {
		return false
	}
	if w.runtime != "" && !contains(n.Runtimes, w.runtime) {
		return false
	}
	for k, v := range w.labels {
		if got, ok := n.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// pick returns, among the nodes that are up and fit w (skipping those in
// tried), one with a free warm-pool sandbox of w's image if any has one,
// and the least loaded (sessions over capacity) of those.
func (s *Scheduler) pick(w want, tried map[string]bool) (events.NodeInfo, bool) {
	var best events.NodeInfo
	found := false
	warm := func(n events.NodeInfo) bool { return w.image != "" && n.Pools[w.image] > 0 }
	for _, n := range s.Nodes() {
		if tried[n.Node] || !w.fits(n) {
			continue
		}
		switch {
		case !found, warm(n) && !warm(best):
			best, found = n, true
		case warm(n) != warm(best):
		case n.Sessions*best.Capacity < best.Sessions*n.Capacity:
			best = n
		}
	}
	return best, found
}

// claim picks a node for w (as pick does) and counts a placement of
// tenant on it, in one step: placements decided at the same moment see
// each other's counts, and spread over the nodes instead of all taking
// the one that was least loaded before them.
func (s *Scheduler) claim(w want, tried map[string]bool, tenant string) (events.NodeInfo, bool) {
	s.claimMu.Lock()
	defer s.claimMu.Unlock()
	n, ok := s.pick(w, tried)
	if ok {
		s.countSession(n.Node, tenant, 1)
	}
	return n, ok
}

// await waits up to the configured bound for a suitable node, and claims
// it for a placement of tenant (see claim).
func (s *Scheduler) await(ctx context.Context, w want, tried map[string]bool, tenant string) (events.NodeInfo, bool) {
	deadline := time.NewTimer(s.cfg.WaitForNode)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		if n, ok := s.claim(w, tried, tenant); ok {
			return n, true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return events.NodeInfo{}, false
		case <-ctx.Done():
			return events.NodeInfo{}, false
		}
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func (s *Scheduler) respond(m *nats.Msg, data []byte) {
	if m.Reply == "" {
		return
	}
	if err := m.Respond(data); err != nil {
		s.logger.Warn("reply failed", "subject", m.Subject, "err", err)
	}
}

// decodeTenant reads the tenant of a tenant-level subject and the request
// with its validated args; on an error it answers m and returns false.
func (s *Scheduler) decodeTenant(m *nats.Msg, args interface{ Validate() error }) (string, commands.Request, bool) {
	tenant, ok := s.subj.ParseTenant(m.Subject)
	if !ok {
		return "", commands.Request{}, false
	}
	err := commands.CheckToken("tenant", tenant)
	var req commands.Request
	if err == nil {
		req, err = commands.DecodeRequest(m.Data, args)
	}
	if err == nil {
		err = args.Validate()
	}
	if err == nil {
		var caller auth.Caller
		if caller, err = auth.CallerOf(m); err == nil {
			req.Actor, err = caller.Authorize(tenant, req.Actor)
		}
		if err != nil {
			s.logger.Warn("command refused", "subject", m.Subject, "account", caller.Account, "user", caller.User, "err", err)
		}
	}
	if err != nil {
		s.respond(m, commands.ErrorReply(err))
		return "", req, false
	}
	return tenant, req, true
}

func (s *Scheduler) handleCreate(ctx context.Context, m *nats.Msg) {
	var spec commands.CreateArgs
	tenant, req, ok := s.decodeTenant(m, &spec)
	if !ok {
		return
	}
	id := spec.SessionID
	switch {
	case id != "":
	case req.CommandID != "":
		// A retry of this create, through any scheduler, names the same
		// session: the node finds the first attempt instead of making a
		// second sandbox.
		id = commands.SessionIDFor(tenant, req.CommandID)
	default:
		id = uuid.NewString()
	}
	spec.SessionID = ""
	ctx, span := s.startSpan(ctx, "create", tenant, id, req)
	release, err := s.reserve(tenant)
	if err != nil {
		s.respondSpan(m, span, commands.ErrorReply(err))
		return
	}
	defer release()
	image := spec.Image
	if image == "" && spec.Runtime != "local" {
		image = commands.DefaultImage
	}
	s.respondSpan(m, span, s.place(ctx, want{spec.Runtime, spec.NodeLabels, image}, "create", tenant, forward(req, commands.Placement{Tenant: tenant, SessionID: id, Spec: spec})))
}

// forward re-encodes req with args for a node: the scheduler speaks its
// own contract version to the node, whatever the client spoke.
func forward(req commands.Request, args any) []byte {
	req.Version = commands.Version
	req.Args, _ = json.Marshal(args)
	body, _ := json.Marshal(req)
	return body
}

// placeOnNode sends body to the node op subject of a node that is up with the
// runtime and room, trying another when one turns out gone or full, and
// returns the node's reply (or an error reply).
func (s *Scheduler) placeOnNode(ctx context.Context, w want, op, tenant string, body []byte) []byte {
	tried := map[string]bool{}
	var full []byte // the last no_capacity reply of a node
	for attempt := 0; attempt < 3; attempt++ {
		n, ok := s.await(ctx, w, tried, tenant)
		if !ok && full != nil {
			return full // the nodes tried were full, or the tenant at its share of them
		}
		if !ok {
			return commands.ErrorReply(errcode.New(errcode.NoCapacity, "no node is up, not cordoned, with %s and room for a session", w))
		}
		tried[n.Node] = true
		// Counted when claimed, before the forward, and taken back unless
		// the node took the session: placements in flight at once then
		// spread over the nodes.
		fctx, cancel := context.WithTimeout(ctx, s.cfg.ForwardTimeout)
		reply, err := client.Requester{Conn: s.nc}.Send(fctx, s.subj.Node(n.Node, op), tracing.Inject(fctx, nil), body)
		cancel()
		if errors.Is(err, nats.ErrNoResponders) {
			s.countSession(n.Node, tenant, -1)
			s.forgetNode(n.Node) // the node is gone; try another
			continue
		}
		if err != nil {
			// Outcome unknown (the node may have taken it): the count
			// stays until the node's next heartbeat says.
			return commands.ErrorReply(errcode.Wrap(errcode.Unavailable, err, "forward "+op+" to node "+n.Node))
		}
		rep, err := client.DecodeReply(reply.Data)
		switch {
		case err != nil:
			s.countSession(n.Node, tenant, -1)
		case rep.Error == nil:
			s.takePooled(n.Node, w.image)
		case rep.Error.Code == errcode.NoCapacity:
			// The node is fuller than its last heartbeat said (or
			// lacks the runtime after all): try another.
			s.countSession(n.Node, tenant, -1)
			s.countSession(n.Node, "", n.Capacity)
			full = reply.Data
			continue
		case rep.Error.Code == errcode.QuotaExceeded:
			// The tenant is at its share of this node: another node
			// may have room for it.
			s.countSession(n.Node, tenant, -1)
			full = reply.Data
			continue
		default:
			s.countSession(n.Node, tenant, -1)
		}
		return reply.Data
	}
	if full != nil {
		return full
	}
	return commands.ErrorReply(errcode.New(errcode.Unavailable, "no node answered the %s", op))
}

// forgetNode stops placing on a node that did not answer until it
// heartbeats again; its loss is declared NodeTTL after its last heartbeat.
func (s *Scheduler) forgetNode(id string) {
	s.mu.Lock()
	if r, ok := s.nodes[id]; ok {
		r.info.Status = "gone"
		s.nodes[id] = r
	}
	s.mu.Unlock()
}

// countSession adds n sessions (at most up to its capacity; n < 0 takes
// them back, down to none) to what the scheduler knows of a node, until
// its next heartbeat says how many it holds: creates sent faster than
// nodes heartbeat then spread over the nodes instead of all going to the
// one that was least loaded at its last heartbeat.
func (s *Scheduler) countSession(id, tenant string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.nodes[id]
	if !ok {
		return
	}
	r.info.Sessions = max(0, min(r.info.Sessions+n, max(r.info.Capacity, r.info.Sessions)))
	if tenant != "" {
		// A copy: the heartbeat's map may be read elsewhere.
		t := make(map[string]int, len(r.info.Tenants)+1)
		for k, v := range r.info.Tenants {
			t[k] = v
		}
		t[tenant] = max(0, t[tenant]+n)
		r.info.Tenants = t
	}
	s.nodes[id] = r
}

// takePooled counts a warm-pool sandbox of image as taken on node id
// until its next heartbeat says how many it has.
func (s *Scheduler) takePooled(id, image string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.nodes[id]
	if !ok || image == "" || r.info.Pools[image] == 0 {
		return
	}
	p := make(map[string]int, len(r.info.Pools)) // a copy: the heartbeat's map may be read elsewhere
	for k, v := range r.info.Pools {
		p[k] = v
	}
	p[image]--
	r.info.Pools = p
	s.nodes[id] = r
}

// reserve counts one placement of tenant in flight, or refuses it with
// quota_exceeded when the tenant's sessions on the nodes that are up, with
// the placements in flight, are at Config.TenantSessions. release ends the
// reservation (a placement that succeeded is counted on its node by then).
func (s *Scheduler) reserve(tenant string) (release func(), err error) {
	if s.cfg.TenantSessions == 0 {
		return func() {}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	held := s.placing[tenant]
	for _, r := range s.nodes {
		if time.Since(r.lastSeen) <= s.cfg.NodeTTL {
			held += r.info.Tenants[tenant]
		}
	}
	if held >= s.cfg.TenantSessions {
		s.reject("create", errcode.QuotaExceeded)
		return nil, errcode.New(errcode.QuotaExceeded, "tenant %s holds %d sessions across the deployment, its limit of %d; retry when one is deleted", tenant, held, s.cfg.TenantSessions)
	}
	s.placing[tenant]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.placing[tenant]--; s.placing[tenant] == 0 {
			delete(s.placing, tenant)
		}
	}, nil
}

func (s *Scheduler) handleLookup(ctx context.Context, m *nats.Msg) {
	var args commands.LookupArgs
	tenant, req, ok := s.decodeTenant(m, &args)
	if !ok {
		return
	}
	ctx, span := s.startSpan(ctx, "lookup", tenant, args.SessionID, req)
	res, err := s.Lookup(ctx, tenant, args.SessionID)
	s.respondResult(m, span, res, err)
}

// Lookup reports a session's status and node. A session with no events,
// or deleted, is session_not_found.
func (s *Scheduler) Lookup(ctx context.Context, tenant, session string) (commands.LookupResult, error) {
	st, err := s.session(ctx, tenant, session)
	if err != nil {
		return commands.LookupResult{}, err
	}
	return commands.LookupResult{Status: string(st.Status), Node: st.Node}, nil
}
