package nodes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/projection"
)

// createRetryWait bounds how long a retried create waits for the first
// attempt (on this node or another) to finish.
const createRetryWait = 2 * time.Minute

// handleCreate serves a placement the scheduler sent to this node: it
// records the create, makes the sandbox, materialises the manifest and
// serves the session's subject from then on.
func (a *Agent) handleCreate(ctx context.Context, m *nats.Msg) {
	servePlaced(ctx, a, m, validatePlacement, func(p *commands.Placement) string { return p.Tenant }, a.create)
}

// servePlaced serves a request the scheduler sent to this node's own
// subject: it decodes the body into a P and validates it, takes one of the
// tenant's command slots for it, and answers with what run returns.
func servePlaced[P any](ctx context.Context, a *Agent, m *nats.Msg, check func(*P) error, tenant func(*P) string, run func(context.Context, commands.Request, *P) []byte) {
	if err := operator(m); err != nil {
		a.respond(m, commands.ErrorReply(err))
		return
	}
	var p P
	req, err := commands.DecodeRequest(m.Data, &p)
	if err == nil {
		err = check(&p)
	}
	if err != nil {
		a.respond(m, commands.ErrorReply(err))
		return
	}
	release, err := a.admit(tenant(&p))
	if err != nil {
		a.respond(m, commands.ErrorReply(err))
		return
	}
	defer release()
	a.respond(m, run(ctx, req, &p))
}

func validatePlacement(p *commands.Placement) error {
	if err := checkSessionIDs(p.Tenant, p.SessionID); err != nil {
		return err
	}
	if p.Parent != nil {
		if err := commands.CheckToken("parent session_id", p.Parent.SessionID); err != nil {
			return err
		}
		if err := commands.CheckToken("parent snapshot", p.Parent.Snapshot); err != nil {
			return err
		}
	}
	return p.Spec.Validate()
}

// checkSessionIDs checks the tenant and session id of a placement.
func checkSessionIDs(tenant, id string) error {
	if err := commands.CheckToken("tenant", tenant); err != nil {
		return err
	}
	return commands.CheckToken("session_id", id)
}

// createRecord is the create's start data for spec on runtime rtName.
func createRecord(spec commands.CreateArgs, rtName string) events.CreateStart {
	root := spec.WorkspaceRoot
	if root == "" {
		root = runtime.DefaultWorkspaceRoot
	}
	cs := events.CreateStart{
		Runtime: rtName, Image: spec.Image, Env: spec.Env, SecretEnvKeys: sortedKeys(spec.SecretEnv), Labels: spec.Labels, NodeLabels: spec.NodeLabels,
		CPUs: spec.CPUs, MemoryBytes: spec.MemoryBytes, DiskBytes: spec.DiskBytes, WorkspaceRoot: root, Epoch: 1,
		Network: spec.Network, User: spec.User, PidsLimit: spec.PidsLimit, MaxProcesses: spec.MaxProcesses,
		ExposedPorts: spec.ExposedPorts, Egress: spec.Egress,
	}
	for _, e := range spec.Manifest {
		r := events.ManifestRecord{Path: e.Path, Dir: e.Dir, Mode: e.Mode, Ephemeral: e.Ephemeral}
		if !e.Dir {
			r.Size, r.SHA256 = len(e.Content), digest(e.Content)
		}
		cs.Manifest = append(cs.Manifest, r)
	}
	return cs
}

// create runs a create and returns its reply. A create whose command id
// names a create already recorded (a retry, through any scheduler, of a
// create that named no session id: the scheduler derived the same id)
// gets that create's outcome; any other create of an existing session id
// is already_exists.
func (a *Agent) create(ctx context.Context, req commands.Request, p *commands.Placement) []byte {
	spec := p.Spec
	rtName := spec.Runtime
	if rtName == "" {
		rtName = a.order[0]
	}
	rt, ok := a.runtimes[rtName]
	if !ok {
		return commands.ErrorReply(errcode.New(errcode.NoCapacity, "node %s has no %s runtime", a.cfg.ID, rtName))
	}
	if isContainerRuntime(rtName) && spec.Image == "" {
		spec.Image = commands.DefaultImage // recorded as the image the session runs
	}
	cs := createRecord(spec, rtName)
	cs.Parent = p.Parent
	cs.IdleTimeoutS = int64((a.cfg.Policy.idleTimeout(spec.IdleTimeoutS) + time.Second - 1) / time.Second) // whole seconds, up
	if d := a.cfg.Policy.lifetime(spec.LifetimeS); d > 0 {
		t := time.Now().UTC().Add(d)
		cs.ExpiresAt = &t
	}
	s := a.newSession(p.Tenant, p.SessionID, cs, spec.SecretEnv, 1)
	if held, err := a.hold(s); err != nil {
		if held == nil {
			return commands.ErrorReply(err)
		}
		// A retry of the create that made the session this node holds gets
		// its outcome from the session's memory; any other create of it is
		// refused, recorded nowhere.
		return a.idempotent(refused(err))(ctx, &call{s: held, req: req, op: commands.OpCreate})
	}
	defer func() {
		if s.getStatus() == projection.StatusCreating {
			a.forget(s)
		}
	}()
	c := &call{s: s, req: req, op: commands.OpCreate, start: cs}
	// The session's events are not empty: someone created it first.
	c.fromHistory = func(ctx context.Context) []byte { return a.createRetry(ctx, p.Tenant, p.SessionID, req.CommandID) }
	c.run = func(ctx context.Context) (outcome, error) {
		if err := a.cfg.Policy.checkCreate(spec, rtName); err != nil {
			return outcome{}, err
		}
		if err := checkEgress(rt, commands.EffectiveEgress(spec.Network, spec.Egress)); err != nil {
			return outcome{}, err
		}
		if err := checkPorts(rt, spec.ExposedPorts); err != nil {
			return outcome{}, err
		}
		sb, err := a.makeChild(ctx, s, rt, spec, p.Parent)
		if err != nil {
			return outcome{}, err
		}
		if err := a.openEgress(ctx, s, sb); err != nil {
			_ = sb.Shutdown(context.WithoutCancel(ctx))
			return outcome{}, err
		}
		if err := a.attach(s, sb); err != nil {
			_ = sb.Shutdown(context.WithoutCancel(ctx))
			return outcome{}, err
		}
		s.setStatus(projection.StatusRunning)
		st := string(projection.StatusRunning)
		m := made(sb)
		if m.Pooled {
			a.cfg.Metrics.PoolClaim(spec.Image)
		}
		return outcome{
			result: commands.CreateResult{SessionID: p.SessionID, Node: a.cfg.ID, Runtime: rtName, Status: st},
			data:   events.StatusFinish{Status: st, ContainerID: containerID(sb), Made: m},
		}, nil
	}
	return a.handle(ctx, c)
}

// makeChild makes a created session's sandbox: a new one, materialised
// and filled with its parent's snapshot when it is a fork's child; a fork
// child of a memory checkpoint is that checkpoint restored.
func (a *Agent) makeChild(ctx context.Context, s *session, rt runtime.Runtime, spec commands.CreateArgs, parent *commands.Parent) (runtime.Sandbox, error) {
	if parent != nil && parent.Memory != nil {
		if len(spec.Manifest) > 0 {
			return nil, errcode.New(errcode.InvalidRequest, "a fork child of a memory checkpoint takes no manifest")
		}
		pt := memoryPoint{owner: parent.SessionID, id: parent.Snapshot, root: parent.RootSHA256, memory: parent.Memory}
		sb, _, err := a.restoreMemory(ctx, s, rt, pt, s.spec)
		return sb, err
	}
	sb, err := rt.Create(ctx, s.spec)
	if err != nil {
		return nil, err
	}
	if err := materialise(ctx, sb, spec.Manifest); err != nil {
		_ = sb.Shutdown(context.WithoutCancel(ctx))
		return nil, err
	}
	if parent != nil {
		if err := a.restoreParent(ctx, s, sb, *parent); err != nil {
			_ = sb.Shutdown(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	return sb, nil
}

// refused is a handler that runs nothing: it answers err, and the call's
// start counts as not recorded (a command id it claimed is forgotten).
func refused(err error) handler {
	return func(_ context.Context, c *call) []byte {
		c.startErr = err
		return commands.ErrorReply(err)
	}
}

// hold registers s with the agent, unless the agent is draining, full, or
// already holds the session (then it returns the session it holds).
func (a *Agent) hold(s *session) (*session, error) {
	key := sessionKey(s.tenant, s.id)
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.draining:
		return nil, errcode.New(errcode.Unavailable, "node %s is draining", a.cfg.ID)
	case a.sessions[key] != nil:
		return a.sessions[key], errcode.New(errcode.AlreadyExists, "session %s already exists", s.id)
	case len(a.sessions) >= a.cfg.Capacity:
		return nil, errcode.New(errcode.NoCapacity, "node %s holds %d sessions, its capacity", a.cfg.ID, a.cfg.Capacity)
	case a.diskFull() != nil:
		return nil, a.diskFull()
	case a.tenantSessions(s.tenant) >= a.cfg.TenantSessions:
		return nil, errcode.New(errcode.QuotaExceeded, "tenant %s holds %d sessions on node %s, its limit", s.tenant, a.cfg.TenantSessions, a.cfg.ID)
	}
	a.sessions[key] = s
	return nil, nil
}

// tenantSessions counts the sessions of tenant the agent holds; a.mu is
// held.
func (a *Agent) tenantSessions(tenant string) int {
	n := 0
	for _, s := range a.sessions {
		if s.tenant == tenant {
			n++
		}
	}
	return n
}

// createRetry answers a create whose session id already has events: the
// first create's outcome when it carried the same command id (waiting for
// its finish while it runs), else already_exists.
func (a *Agent) createRetry(ctx context.Context, tenant, id, commandID string) []byte {
	exists := commands.ErrorReply(errcode.New(errcode.AlreadyExists, "session %s already exists", id))
	if commandID == "" {
		return exists
	}
	evs, err := a.log.Session(ctx, tenant, id)
	if err != nil {
		return commands.ErrorReply(err)
	}
	if len(evs) == 0 || evs[0].Op != string(commands.OpCreate) || evs[0].Phase != events.PhaseStart || evs[0].CommandID != commandID {
		return exists
	}
	first := evs[0]
	for _, ev := range evs[1:] {
		if ev.Phase == events.PhaseFinish && ev.SpanID == first.SpanID {
			return replayReply(&first, ev)
		}
	}
	// The first attempt still runs: wait for its finish.
	wctx, cancel := context.WithTimeout(ctx, createRetryWait)
	defer cancel()
	subj := a.log.Subjects().Session(tenant, id, string(commands.OpCreate), events.PhaseFinish)
	var fin *events.Event
	errFound := errors.New("found")
	err = a.log.Read(wctx, events.ReadOptions{Filters: []string{subj}, Follow: true}, func(m events.Msg) error {
		ev, err := m.Decode()
		if err == nil && ev.SpanID == first.SpanID {
			fin = &ev
			return errFound
		}
		return nil
	})
	if fin != nil {
		return replayReply(&first, *fin)
	}
	return commands.ErrorReply(errcode.Wrap(errcode.Unavailable, fmt.Errorf("wait for create finish: %w", err), "the first create of this command id has not finished yet"))
}

// made says how the runtime made a sandbox: its disk limit (none on a
// runtime that does not say), and when the runtime says them (Docker) its
// supervisor and its warm pool.
func made(sb runtime.Sandbox) events.Made {
	m := events.Made{DiskLimit: &events.DiskLimit{Mechanism: runtime.DiskNone}}
	if d, ok := sb.(runtime.DiskLimiter); ok {
		m.DiskLimit.Bytes, m.DiskLimit.Mechanism = d.DiskLimit()
	}
	p, ok := sb.(interface {
		Provenance() (supervisor string, pooled bool, claim time.Duration)
	})
	if !ok {
		return m
	}
	sup, pooled, claim := p.Provenance()
	m.Supervisor, m.Pooled = sup, pooled
	if pooled {
		m.ClaimMS = float64(claim.Microseconds()) / 1000
	}
	return m
}

// containerID returns the runtime's id of a sandbox, when it has one.
func containerID(sb runtime.Sandbox) string {
	if c, ok := sb.(interface{ ContainerID() string }); ok {
		return c.ContainerID()
	}
	return ""
}

// materialise writes a create's manifest into a new sandbox.
func materialise(ctx context.Context, sb runtime.Sandbox, manifest []commands.ManifestEntry) error {
	for _, e := range manifest {
		if e.Dir {
			if err := sb.Mkdir(ctx, e.Path, true); err != nil {
				return fmt.Errorf("manifest %s: %w", e.Path, err)
			}
			continue
		}
		mode := fs.FileMode(e.Mode)
		if mode == 0 {
			mode = 0o644
		}
		if err := sb.WriteFile(ctx, e.Path, e.Content, mode); err != nil {
			return fmt.Errorf("manifest %s: %w", e.Path, err)
		}
	}
	return nil
}
