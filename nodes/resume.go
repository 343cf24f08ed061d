package nodes

import (
	"context"
	"encoding/json"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/projection"
)

// handleResumePlacement takes over a session whose node no longer serves
// it (the scheduler chose this node): it rebuilds the session from its
// events, records the operations its old node left open as failed,
// creates a fresh sandbox at the next epoch, restores the last snapshot
// into it and serves the session from then on. The old node, should it
// come back, finds its sandbox placed elsewhere and reaps it.
func (a *Agent) handleResumePlacement(ctx context.Context, m *nats.Msg) {
	var p commands.ResumePlacement
	req, err := commands.DecodeRequest(m.Data, &p)
	if err == nil {
		err = commands.CheckToken("tenant", p.Tenant)
	}
	if err == nil {
		err = commands.CheckToken("session_id", p.SessionID)
	}
	if err != nil {
		a.respond(m, commands.ErrorReply(err))
		return
	}
	s, err := a.takeOver(ctx, p)
	if err != nil {
		a.respond(m, commands.ErrorReply(err))
		return
	}
	snap := s.snapshot()
	a.run(ctx, m, s, req, commands.OpResume, nil, func(ctx context.Context) (outcome, error) {
		sb, err := a.recreate(ctx, s, p.SecretEnv)
		if err != nil {
			return outcome{}, err
		}
		if _, err := a.restore(ctx, s, sb, snap.ID, ""); err != nil {
			_ = sb.Shutdown(context.WithoutCancel(ctx))
			return outcome{}, err
		}
		sub, err := a.subscribeSession(s)
		if err != nil {
			_ = sb.Shutdown(context.WithoutCancel(ctx))
			return outcome{}, err
		}
		epoch := s.getEpoch() + 1
		s.mu.Lock()
		s.sb, s.sub, s.epoch, s.status = sb, sub, epoch, projection.StatusRunning
		s.mu.Unlock()
		d := resumeData{Status: projection.StatusRunning, Node: a.cfg.ID, Epoch: epoch, Restored: true, SnapshotID: snap.ID}
		r := commands.ResumeResult{Status: string(d.Status), Node: d.Node, Epoch: d.Epoch, Restored: true, SnapshotID: snap.ID}
		return outcome{result: r, data: d}, nil
	})
	if s.sandbox() == nil {
		a.forget(s)
	}
}

// takeOver registers a session rebuilt from its events, ready for the
// resume operation, after recording the old node's open operations as
// failed.
func (a *Agent) takeOver(ctx context.Context, p commands.ResumePlacement) (*session, error) {
	evs, err := a.log.Session(ctx, p.Tenant, p.SessionID)
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, errcode.New(errcode.SessionNotFound, "session %s does not exist", p.SessionID)
	}
	st, _ := projection.Fold(evs)
	if st.Status == projection.StatusDeleted {
		return nil, errcode.New(errcode.SessionNotFound, "session %s was deleted", p.SessionID)
	}
	snap := lastSnapshot(evs)
	if snap == nil {
		return nil, errcode.New(errcode.InvalidState, "session %s has no snapshot to resume from", p.SessionID)
	}
	tail, err := a.log.Last(ctx, p.Tenant, p.SessionID)
	if err != nil {
		return nil, err
	}
	var cs createData
	_ = json.Unmarshal(evs[0].Data, &cs)
	if _, ok := a.runtimes[cs.Runtime]; !ok {
		return nil, errcode.New(errcode.NoCapacity, "node %s has no %s runtime", a.cfg.ID, cs.Runtime)
	}
	if cs.WorkspaceRoot == "" {
		cs.WorkspaceRoot = runtime.DefaultWorkspaceRoot
	}
	secrets := map[string]string{}
	env := map[string]string{}
	for k, v := range cs.Env {
		env[k] = v
	}
	for _, k := range cs.SecretEnvKeys {
		if v, ok := p.SecretEnv[k]; ok {
			secrets[k], env[k] = v, v
		}
	}
	_, epoch := placement(evs)
	s := &session{
		tenant: p.Tenant, id: p.SessionID, runtime: cs.Runtime, root: cs.WorkspaceRoot,
		redact: newRedactor(secrets), status: st.Status, results: map[string]*cmdResult{},
		seq: st.LastSeq, lastStreamSeq: tail.StreamSeq, lastHash: tail.Hash,
		epoch: epoch, lastSnap: snap, ephemeral: ephemeralPaths(cs.Manifest),
		spec: runtime.Spec{
			Tenant: p.Tenant, SessionID: p.SessionID, Node: a.cfg.ID, Epoch: epoch, Image: cs.Image,
			Env: env, Labels: cs.Labels, CPUs: cs.CPUs, MemoryBytes: cs.MemoryBytes, WorkspaceRoot: cs.WorkspaceRoot,
			Network: cs.Network, User: cs.User, PidsLimit: cs.PidsLimit,
		},
	}
	key := sessionKey(p.Tenant, p.SessionID)
	a.mu.Lock()
	switch {
	case a.draining:
		a.mu.Unlock()
		return nil, errcode.New(errcode.Unavailable, "node %s is draining", a.cfg.ID)
	case a.sessions[key] != nil:
		a.mu.Unlock()
		return nil, errcode.New(errcode.InvalidState, "node %s already serves session %s; send resume to the session", a.cfg.ID, p.SessionID)
	case len(a.sessions) >= a.cfg.Capacity:
		a.mu.Unlock()
		return nil, errcode.New(errcode.NoCapacity, "node %s is full", a.cfg.ID)
	}
	a.sessions[key] = s
	a.mu.Unlock()
	j := judged{state: st, evs: evs, tail: tail}
	if err := a.finishInFlight(ctx, s, j); err != nil {
		a.forget(s)
		return nil, err
	}
	return s, nil
}
