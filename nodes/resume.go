package nodes

import (
	"context"
	"fmt"
	"maps"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/projection"
)

// Resume has one path, whoever asks: the session's own subject (the node
// that serves it) or the scheduler's placement on this node of a session
// no node serves (handleResumePlacement, which first takes the session
// over from its history). Either way resume brings the session back:
//
//	last snapshot a memory checkpoint → the sandbox here (if any) shut
//	and the sandbox not running here   down; the checkpoint restored with
//	                                   its processes at the next epoch
//	                                   (checkpoint.go)
//	sandbox here, running or stopped → start it; restore the last snapshot
//	                                   unless the workspace still has its
//	                                   fingerprint
//	sandbox shut down, or none here  → create a fresh one at the next epoch
//	(taken over from another node,     and restore the last snapshot (none
//	or lost with it)                   yet: only with empty, which starts
//	                                   the workspace empty)

func resumeStart(_ *Agent, _ *session, args *commands.ResumeArgs) any {
	return events.ResumeStart{SecretEnvKeys: sortedKeys(args.SecretEnv), Empty: args.Empty, Egress: args.Egress, AtSeq: args.AtSeq}
}

func runResume(ctx context.Context, a *Agent, s *session, args *commands.ResumeArgs) (outcome, error) {
	return a.resume(ctx, s, args.SecretEnv, args.Empty, args.Egress, args.AtSeq)
}

// resume is the resume operation; secretEnv, when given, replaces the
// session's secret values (for the redaction of everything recorded from
// now on, and for a re-created sandbox). empty lets a session that has no
// snapshot come back with an empty workspace; a snapshot, when there is
// one, is restored all the same. eg, when given, is the session's egress
// policy from now on. atSeq, when not 0, names the point in time: the last
// snapshot recorded at or before it is the one restored (not_found when
// there is none), in place when the sandbox is still there.
func (a *Agent) resume(ctx context.Context, s *session, secretEnv map[string]string, empty bool, eg *commands.Egress, atSeq uint64) (out outcome, err error) {
	if err := checkLifetime(s, commands.OpResume); err != nil {
		return outcome{}, err
	}
	if err := s.setSecrets(secretEnv); err != nil {
		return outcome{}, err
	}
	snap := s.snapshot()
	if atSeq > 0 {
		if snap, err = s.snapshotAt(atSeq); err != nil {
			return outcome{}, err
		}
	}
	sb, st := s.sandbox(), s.getStatus()
	recreate := sb == nil || st == projection.StatusShutDown
	if eg != nil {
		undo, err := a.changeEgress(s, *eg, recreate)
		if err != nil {
			return outcome{}, err
		}
		defer func() {
			if err != nil {
				undo()
			}
		}()
	}
	d := events.ResumeFinish{Status: string(projection.StatusRunning), Node: a.cfg.ID, Epoch: s.getEpoch()}
	if snap != nil {
		d.SnapshotID, d.SnapshotSeq = snap.ID, snap.Seq
	}
	switch {
	case snap.IsMemory() && (recreate || st == projection.StatusStopped):
		if sb != nil {
			if err := sb.Shutdown(ctx); err != nil {
				return outcome{}, err
			}
		}
		nsb, chunks, err := a.resumeMemory(ctx, s, snap)
		if err != nil {
			return outcome{}, err
		}
		s.content.dropHashes() // the new sandbox's files are others
		d.Restored, d.Chunks, d.Memory = true, chunks, true
		if err := a.placeNew(ctx, s, sb, nsb, &d); err != nil {
			return outcome{}, err
		}
	case sb != nil && (st == projection.StatusRunning || st == projection.StatusStopped):
		if err := sb.Start(ctx); err != nil {
			return outcome{}, err
		}
		// A running sandbox's memory checkpoint is of its past: the
		// sandbox runs on, as it is.
		if snap != nil && !snap.IsMemory() {
			same, err := a.workspaceIs(ctx, s, sb, snap)
			if err != nil {
				return outcome{}, err
			}
			if !same {
				r, err := a.restoreFrom(ctx, s, sb, s.id, snap.ID)
				if err != nil {
					return outcome{}, err
				}
				d.Restored, d.Chunks = true, r.chunks
			}
		}
	case recreate:
		if snap == nil && !empty {
			return outcome{}, errNoSnapshot(s.id)
		}
		nsb, err := a.recreate(ctx, s)
		if err != nil {
			return outcome{}, err
		}
		s.content.dropHashes() // the new sandbox's files are others
		if snap != nil {
			r, err := a.restoreFrom(ctx, s, nsb, s.id, snap.ID)
			if err != nil {
				_ = nsb.Shutdown(context.WithoutCancel(ctx))
				return outcome{}, err
			}
			d.Restored, d.Chunks = true, r.chunks
		}
		if err := a.placeNew(ctx, s, sb, nsb, &d); err != nil {
			return outcome{}, err
		}
	default:
		return outcome{}, errcode.New(errcode.InvalidState, "resume: session %s is %s", s.id, st)
	}
	if err := a.openEgress(ctx, s, s.sandbox()); err != nil {
		return outcome{}, err
	}
	s.setStatus(projection.StatusRunning)
	r := commands.ResumeResult{Status: d.Status, Node: d.Node, Epoch: d.Epoch, Restored: d.Restored, SnapshotID: d.SnapshotID, Memory: d.Memory}
	return outcome{result: r, data: d}, nil
}

// placeNew makes nsb, made at the next epoch, s's sandbox in place of old
// (nil: taken over, so the session's subject is served from now on) and
// records it in d. On error nsb is shut down.
func (a *Agent) placeNew(ctx context.Context, s *session, old, nsb runtime.Sandbox, d *events.ResumeFinish) error {
	d.Epoch++
	d.ContainerID = containerID(nsb)
	d.Made = made(nsb)
	s.mu.Lock()
	s.epoch = d.Epoch
	s.mu.Unlock()
	if old == nil { // taken over: start serving the session's subject
		if err := a.attach(s, nsb); err != nil {
			_ = nsb.Shutdown(context.WithoutCancel(ctx))
			return err
		}
		return nil
	}
	s.mu.Lock()
	s.sb = nsb
	s.mu.Unlock()
	return nil
}

// errNoSnapshot refuses to bring back a session that was never persisted
// without the caller's explicit consent to an empty workspace.
func errNoSnapshot(id string) error {
	return errcode.New(errcode.InvalidState, "session %s has no snapshot to resume from; resume it with empty (engine sandbox resume --empty) to start it with an empty workspace", id)
}

// setSecrets replaces the values of the session's secret variables that
// secretEnv names; a name the create did not declare secret is
// invalid_request. The redactor then redacts the new values as well as
// every value it knew.
func (s *session) setSecrets(secretEnv map[string]string) error {
	if len(secretEnv) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range secretEnv {
		if _, declared := s.secretKeys[k]; !declared {
			return errcode.New(errcode.InvalidRequest, "%s is not a secret variable of session %s", k, s.id)
		}
	}
	env := maps.Clone(s.spec.Env)
	maps.Copy(env, secretEnv)
	s.spec.Env = env
	// A value given before stays secret: a rotated token is no less one.
	s.redact = s.redact.with(secretEnv)
	return nil
}

// recreate makes a fresh sandbox for s at the next epoch from the spec it
// was created with.
func (a *Agent) recreate(ctx context.Context, s *session) (runtime.Sandbox, error) {
	rt, ok := a.runtimes[s.runtime]
	if !ok {
		return nil, errcode.New(errcode.NoCapacity, "node %s has no %s runtime", a.cfg.ID, s.runtime)
	}
	s.mu.Lock()
	spec := s.spec
	s.mu.Unlock()
	spec.Epoch++
	spec.Node = a.cfg.ID
	sb, err := rt.Create(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("recreate sandbox: %w", err)
	}
	s.mu.Lock()
	s.spec = spec
	s.mu.Unlock()
	return sb, nil
}

// handleResumePlacement takes over a session whose node no longer serves
// it (the scheduler chose this node) and resumes it: it rebuilds the
// session from its events, records the operations its old node left open
// as failed, and runs the one resume path, which re-creates the sandbox
// at the next epoch, restores the last snapshot and serves the session
// from then on. The old node, should it come back, finds its sandbox
// placed elsewhere and reaps it.
func (a *Agent) handleResumePlacement(ctx context.Context, m *nats.Msg) {
	servePlaced(ctx, a, m, validateResumePlacement, func(p *commands.ResumePlacement) string { return p.Tenant }, a.resumePlaced)
}

// resumePlaced takes the session over and runs the one resume path.
func (a *Agent) resumePlaced(ctx context.Context, req commands.Request, p *commands.ResumePlacement) []byte {
	s, err := a.takeOver(ctx, p.Tenant, p.SessionID, p.SecretEnv, p.Empty)
	if err != nil {
		return commands.ErrorReply(err)
	}
	start := events.ResumeStart{SecretEnvKeys: sortedKeys(p.SecretEnv), Placed: true, Empty: p.Empty, Egress: p.Egress, AtSeq: p.AtSeq}
	reply := a.perform(ctx, s, req, commands.OpResume, start, func(ctx context.Context) (outcome, error) {
		return a.resume(ctx, s, nil, p.Empty, p.Egress, p.AtSeq)
	})
	sb := s.sandbox()
	switch {
	case sb == nil:
		a.forget(s)
	case s.letGo.Load():
		// Another writer took the session over while this resume ran, so
		// its finish was refused: the sandbox it made is named by no
		// history and serves nobody. It goes now, not at the reaper's
		// grace, and a resume sent again can make its epoch's sandbox.
		if err := sb.Shutdown(context.WithoutCancel(ctx)); err != nil {
			a.logger.Warn("cannot remove the sandbox of a resume that was fenced out; the reaper will", "tenant", s.tenant, "session", s.id, "err", err)
		}
	}
	return reply
}

func validateResumePlacement(p *commands.ResumePlacement) error {
	if err := checkSessionIDs(p.Tenant, p.SessionID); err != nil {
		return err
	}
	args := commands.ResumeArgs{SecretEnv: p.SecretEnv, Empty: p.Empty, Egress: p.Egress, AtSeq: p.AtSeq}
	return args.Validate()
}

// takeOver registers a session rebuilt from its events, with no sandbox
// yet, after recording the old node's open operations as failed. A
// session with no snapshot is taken over only when empty says its
// workspace may start empty.
func (a *Agent) takeOver(ctx context.Context, tenant, id string, secrets map[string]string, empty bool) (*session, error) {
	h, _, err := a.readHistory(ctx, tenant, id)
	switch {
	case err != nil && len(h.evs) == 0:
		return nil, err
	case len(h.evs) == 0:
		return nil, errcode.New(errcode.SessionNotFound, "session %s does not exist", id)
	case err != nil:
		return nil, errcode.Wrap(errcode.InvalidState, err, fmt.Sprintf("session %s has a history that does not fold", id))
	case h.state.Status == projection.StatusDeleted:
		return nil, errcode.New(errcode.SessionNotFound, "session %s was deleted", id)
	case h.snap == nil && !empty:
		return nil, errNoSnapshot(id)
	}
	if _, ok := a.runtimes[h.create.Runtime]; !ok {
		return nil, errcode.New(errcode.NoCapacity, "node %s has no %s runtime", a.cfg.ID, h.create.Runtime)
	}
	for k := range secrets {
		if !contains(h.create.SecretEnvKeys, k) {
			return nil, errcode.New(errcode.InvalidRequest, "%s is not a secret variable of session %s", k, id)
		}
	}
	s := a.newSession(tenant, id, h.create, secrets, h.epoch)
	s.takeUp(h)
	held, err := a.hold(s)
	if held != nil && h.state.Status == projection.StatusLost {
		// This node holds the session from before its loss (it was cut
		// off, declared lost, and is heard again) and has not appended
		// since, so it has not learnt that its hold is fenced out: the
		// history says the session is lost. Let the stale hold go, as a
		// fenced append would, and take the session up anew.
		// Its sandbox goes too: the resume restores the last snapshot
		// (what ran since is lost, as with any loss) into a new one.
		held.moved.Store(true)
		a.letGoIfMoved(held)
		if sb := held.sandbox(); sb != nil {
			if err := sb.Shutdown(context.WithoutCancel(ctx)); err != nil {
				return nil, errcode.Wrap(errcode.Unavailable, err, fmt.Sprintf("remove the sandbox node %s held of session %s before its loss", a.cfg.ID, id))
			}
		}
		held, err = a.hold(s)
	}
	if err != nil {
		if held != nil {
			return nil, errcode.New(errcode.InvalidState, "node %s already serves session %s; send resume to the session", a.cfg.ID, id)
		}
		return nil, err
	}
	if err := a.finishInFlight(ctx, s, h); err != nil {
		a.forget(s)
		return nil, err
	}
	return s, nil
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
