package nodes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/egress"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/projection"
)

// session is one session the agent serves.
//
// Lock order: Agent.mu, then the session's chain (its append lock), then
// session.mu. Only the chain's lock is held across I/O (an event append:
// the seq it guards must not move while one is in flight); Agent.mu and
// session.mu never are.
type session struct {
	tenant  string
	id      string
	runtime string
	root    string // workspace root as the sandbox sees it
	// ephemeral lists the manifest's ephemeral paths (clean, relative):
	// persist leaves them out. Set before the session is served.
	ephemeral []string
	// secretKeys names the session's secret variables (the create's).
	secretKeys map[string]struct{}
	// expires is when the session's lifetime ends (zero: never).
	expires time.Time

	// chain appends the session's events (seq, prev_hash, fencing).
	chain *events.Chain
	// moved is set once another writer's signed event ended this node's
	// hold on the session's history (fencing); letGo once the node has
	// let the session go.
	moved, letGo atomic.Bool

	mu       sync.Mutex // guards the fields below
	sub      *nats.Subscription
	sb       runtime.Sandbox
	spec     runtime.Spec // as the sandbox was created (secret values included; never recorded)
	redact   redactor     // rebuilt whenever secret values are given
	epoch    uint64       // the placement's epoch
	lastSnap *commands.Snapshot
	// snaps are every snapshot the session recorded, oldest first (resume
	// --at picks one); lastSnap is the newest.
	snaps []commands.Snapshot
	// tarContent is the content digest (tarContentSum) of the tar snapshot
	// this node last stored for the session, which lets an unchanged
	// workspace's persist keep that one (issue 26).
	tarContent struct{ id, sum string }
	status     projection.Status
	memory     memory

	// idle is the session's idle timeout (0: none); lastActive (unix
	// nanoseconds) is when an op last began or ended, active how many run
	// now; stoppedAt is when it was last stopped (under mu).
	idle       time.Duration
	lastActive atomic.Int64
	active     atomic.Int32
	stoppedAt  time.Time

	// exposed are the sandbox's ports op port may forward (the create's);
	// ports the forwards open now, by sandbox port.
	exposed []int
	ports   map[int]*portForward

	// egress is the session's egress policy (the create's, or the last
	// resume's that changed it); proxy serves it while the sandbox runs.
	egress commands.Egress
	proxy  *egress.Proxy
	// proxyPort is where the sandbox reaches its proxy (0: the runtime
	// enforces no egress policy).
	proxyPort int

	// procs are the session's processes, streams its streaming execs'
	// output (each with its own lock).
	procs   procs
	streams streams

	// content is the node's content-addressed state of the workspace:
	// its hash cache and last manifest (snapshots.go).
	content contentState
}

// newSession returns a session of tenant/id as its create record cs
// describes it, to run on this node at epoch with the given secret values
// (never recorded, so the caller has them from the create request, the
// sandbox's environment or a resume). It is the one constructor of every
// session: a create, a reattach after a restart and a take-over by resume
// all start here, and the two latter then take up the history.
func (a *Agent) newSession(tenant, id string, cs events.CreateStart, secrets map[string]string, epoch uint64) *session {
	root := cs.WorkspaceRoot
	if root == "" {
		root = runtime.DefaultWorkspaceRoot
	}
	env := maps.Clone(cs.Env)
	if env == nil {
		env = map[string]string{}
	}
	kept := map[string]string{}
	keys := map[string]struct{}{}
	for _, k := range cs.SecretEnvKeys {
		keys[k] = struct{}{}
		if v, ok := secrets[k]; ok {
			env[k], kept[k] = v, v
		}
	}
	proxyPort := 0
	if rt, ok := a.runtimes[cs.Runtime]; ok {
		if e, ok := rt.(egressEnforcer); ok && e.EnforcesEgress() {
			proxyPort = a.cfg.Egress.Port
		}
	}
	s := &session{
		tenant: tenant, id: id, runtime: cs.Runtime, root: root,
		proxyPort:  proxyPort,
		ephemeral:  ephemeralPaths(cs.Manifest),
		secretKeys: keys,
		redact:     newRedactor(kept),
		epoch:      epoch,
		status:     projection.StatusCreating,
		exposed:    slices.Clone(cs.ExposedPorts),
		idle:       time.Duration(cs.IdleTimeoutS) * time.Second,
		spec: runtime.Spec{
			Tenant: tenant, SessionID: id, Node: a.cfg.ID, Epoch: epoch, Image: cs.Image,
			Env: env, Labels: cs.Labels, CPUs: cs.CPUs, MemoryBytes: cs.MemoryBytes, WorkspaceRoot: root,
			User: cs.User, PidsLimit: cs.PidsLimit, DiskBytes: cs.DiskBytes,
		},
	}
	s.chain = events.NewChain(a.log, tenant, id, a.cfg.ID, events.Position{}, events.ChainConfig{
		Patience: a.cfg.AppendPatience,
		Prepare:  func(ev *events.Event) { s.redactor().event(ev) },
		Logger:   a.logger,
	})
	s.setEgressLocked(commands.EffectiveEgress(cs.Network, cs.Egress)) // not yet shared
	if cs.ExpiresAt != nil {
		s.expires = *cs.ExpiresAt
	}
	s.procs.limit = a.cfg.MaxProcesses
	if cs.MaxProcesses > 0 {
		s.procs.limit = cs.MaxProcesses
	}
	s.memory.init()
	s.lastActive.Store(time.Now().UnixNano())
	return s
}

// takeUp sets what the session's history says: its status, its place in
// the event chain, its last snapshot and the outcomes of its commands.
// It runs before the session is served.
func (s *session) takeUp(h history) {
	s.chain.MoveTo(events.Position{Seq: h.state.LastSeq, StreamSeq: h.tail.StreamSeq, Hash: h.tail.Hash})
	s.mu.Lock()
	s.status, s.lastSnap, s.snaps = h.state.Status, h.snap, h.snaps
	if h.egress != nil {
		s.setEgressLocked(*h.egress)
	}
	s.mu.Unlock()
	s.memory.seed(h.evs)
}

// setEgressLocked makes eg the session's egress policy (s.mu held): a
// sandbox made from now on has an open network exactly when eg is open.
func (s *session) setEgressLocked(eg commands.Egress) {
	s.egress = eg
	s.spec.Network = eg.Mode == egress.ModeOpen
	if s.proxyPort == 0 {
		return
	}
	if s.spec.Network {
		s.spec.Env = withoutProxyEnv(s.spec.Env, s.proxyPort)
	} else {
		s.spec.Env = proxyEnv(s.spec.Env, s.proxyPort)
	}
}

// ephemeralPaths returns the ephemeral paths of a recorded manifest.
func ephemeralPaths(m []events.ManifestRecord) []string {
	var out []string
	for _, r := range m {
		if r.Ephemeral {
			out = append(out, path.Clean(r.Path))
		}
	}
	return out
}

func (s *session) getStatus() projection.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

func (s *session) setStatus(st projection.Status) {
	s.mu.Lock()
	if st == projection.StatusStopped && s.status != st {
		s.stoppedAt = time.Now()
	}
	s.status = st
	s.mu.Unlock()
	if st == projection.StatusRunning {
		s.procs.reopen() // a stop refused new processes until now
	}
	// A session that stops running is no longer reachable: its teardown
	// (teardown.go) closes its forwards and its egress proxy.
}

func (s *session) snapshot() *commands.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastSnap
}

// setSnapshot makes snap the session's newest snapshot (a persist's,
// or the same one again when nothing changed).
func (s *session) setSnapshot(snap *commands.Snapshot) {
	s.mu.Lock()
	s.lastSnap = snap
	if snap != nil && (len(s.snaps) == 0 || s.snaps[len(s.snaps)-1].ID != snap.ID) {
		s.snaps = append(s.snaps, *snap)
	}
	s.mu.Unlock()
}

// snapshotAt returns the last snapshot the session recorded at or before
// seq: not_found when there is none.
func (s *session) snapshotAt(seq uint64) (*commands.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best *commands.Snapshot
	for i := range s.snaps {
		if sn := &s.snaps[i]; sn.Seq <= seq && (best == nil || sn.Seq >= best.Seq) {
			best = sn
		}
	}
	if best == nil {
		return nil, errcode.New(errcode.NotFound, "session %s recorded no snapshot at or before seq %d", s.id, seq)
	}
	snap := *best
	return &snap, nil
}

func (s *session) getEpoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

func (s *session) sandbox() runtime.Sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sb
}

func (s *session) redactor() redactor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.redact
}

// lastSeq returns the seq of the session's last event.
func (s *session) lastSeq() uint64 {
	return s.chain.Seq()
}

// fenced returns err, an append's error, as the node answers it: when
// another writer's signed event took the session's history over (an engine
// that declared this node lost, or a node that resumed the session), that
// writer owns it now, nothing this node would run is recorded or run, and
// the session is marked moved (letGoIfMoved lets it go): session_moved.
func (a *Agent) fenced(s *session, err error) error {
	var taken *events.TakenOverError
	if !errors.As(err, &taken) {
		return err
	}
	s.moved.Store(true)
	ev := taken.Tail.Event
	return errcode.Wrap(errcode.SessionMoved, err, fmt.Sprintf("session %s was taken over (%s %s by %s): node %s no longer serves it and ran nothing; send the command again", s.id, ev.Op, ev.Phase, orNone(ev.Node), a.cfg.ID))
}

// history is what a session's stored events say about it: everything a
// node needs to serve it again.
type history struct {
	evs    []events.Event
	state  projection.Session
	create events.CreateStart
	// node and epoch are the placement: the create's, or that of the
	// latest resume that placed the session anew.
	node  string
	epoch uint64
	snap  *commands.Snapshot // the newest snapshot, nil before the first
	// snaps are every snapshot recorded, oldest first (an unchanged
	// persist's, which names the one before, once).
	snaps []commands.Snapshot
	// egress is the policy of the latest resume that changed it (nil:
	// the create's).
	egress *commands.Egress
	tail   events.Tail // the last stored event: where appends continue
}

// readHistory reads and folds a session's events. A session without
// events has a zero history (len(evs) == 0). fresh is false when events
// were appended while they were read: the caller should read again.
func (a *Agent) readHistory(ctx context.Context, tenant, id string) (h history, fresh bool, err error) {
	evs, err := a.log.Session(ctx, tenant, id)
	if err != nil || len(evs) == 0 {
		return history{}, true, err
	}
	h.evs = evs
	h.state, err = projection.Fold(evs)
	if err != nil {
		return h, true, fmt.Errorf("the session's history is inconsistent: %w", err)
	}
	h.create, err = events.DecodeData[events.CreateStart](evs[0]) // the fold checked evs[0] is the create start
	if err != nil {
		return h, true, err
	}
	h.node, h.epoch = evs[0].Node, h.create.Epoch
	resumed := map[string]*commands.Egress{} // resume starts that changed the policy, by span
	for _, ev := range evs {
		if ev.Op == string(commands.OpResume) && ev.Phase == events.PhaseStart {
			if d, err := events.DecodeData[events.ResumeStart](ev); err == nil && d.Egress != nil {
				resumed[ev.SpanID] = d.Egress
			}
		}
		if ev.Phase != events.PhaseFinish || ev.OK == nil || !*ev.OK {
			continue
		}
		switch commands.Op(ev.Op) {
		case commands.OpResume:
			if d, err := events.DecodeData[events.ResumeFinish](ev); err == nil && d.Node != "" {
				h.node, h.epoch = d.Node, d.Epoch
			}
			if eg := resumed[ev.SpanID]; eg != nil {
				h.egress = eg
			}
		case commands.OpPersist, commands.OpStop, commands.OpCheckpoint:
			if d, err := events.DecodeData[events.SnapshotFinish](ev); err == nil && d.Snapshot != nil {
				h.addSnapshot(d.Snapshot)
			}
		case commands.OpFork:
			// A fork that persisted first records its snapshot too.
			if d, err := events.DecodeData[events.ForkFinish](ev); err == nil && d.Snapshot != nil {
				h.addSnapshot(d.Snapshot)
			}
		}
	}
	h.tail, err = a.log.Last(ctx, tenant, id)
	if err != nil {
		return h, true, err
	}
	return h, h.tail.Event != nil && h.tail.Event.Seq == h.state.LastSeq, nil
}

// addSnapshot makes snap the history's newest snapshot (a persist of an
// unchanged workspace records the last one again: it is listed once).
func (h *history) addSnapshot(snap *commands.Snapshot) {
	h.snap = snap
	if n := len(h.snaps); n == 0 || h.snaps[n-1].ID != snap.ID {
		h.snaps = append(h.snaps, *snap)
	}
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
