package nodes

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/projection"
)

// finder is a runtime that can find again the sandboxes it made for this
// node, after the agent restarted (the Docker runtime, by labels).
type finder interface {
	FindSandboxes(ctx context.Context) ([]runtime.Found, error)
}

// verdict is what the agent does with a sandbox it found.
type verdict int

const (
	keep   verdict = iota // cannot tell now (events unreadable): leave it
	adopt                 // the events say this node owns a live session on it
	orphan                // no live session of this node owns it: reap it
)

// judged is a found sandbox with what its session's events say about it.
type judged struct {
	verdict verdict
	why     string
	state   projection.Session
	evs     []events.Event
	tail    events.Tail
}

// judge reads the session's events and decides whether this node owns a
// live session on fd.
func (a *Agent) judge(ctx context.Context, fd runtime.Found) judged {
	evs, err := a.log.Session(ctx, fd.Tenant, fd.SessionID)
	if err != nil {
		return judged{verdict: keep, why: fmt.Sprintf("events unreadable: %v", err)}
	}
	if len(evs) == 0 {
		return judged{verdict: orphan, why: "no events for the session"}
	}
	st, ferr := projection.Fold(evs)
	switch {
	case ferr != nil:
		return judged{verdict: orphan, why: fmt.Sprintf("the session's history is inconsistent: %v", ferr)}
	}
	node, epoch := placement(evs)
	switch {
	case node != a.cfg.ID:
		return judged{verdict: orphan, why: fmt.Sprintf("the session belongs to node %s", node)}
	case epoch != fd.Epoch:
		return judged{verdict: orphan, why: fmt.Sprintf("the session is at epoch %d, the sandbox at %d", epoch, fd.Epoch)}
	case st.Status != projection.StatusRunning && st.Status != projection.StatusStopped:
		return judged{verdict: orphan, why: fmt.Sprintf("the session is %s", st.Status), state: st, evs: evs}
	}
	tail, err := a.log.Last(ctx, fd.Tenant, fd.SessionID)
	if err != nil {
		return judged{verdict: keep, why: fmt.Sprintf("events unreadable: %v", err)}
	}
	if tail.Event == nil || tail.Event.Seq != st.LastSeq {
		return judged{verdict: keep, why: "the session's events changed while they were read"}
	}
	return judged{verdict: adopt, state: st, evs: evs, tail: tail}
}

// eachUnheld calls fn for every sandbox that the agent's runtimes find
// for this node and that no session of the agent holds.
func (a *Agent) eachUnheld(ctx context.Context, fn func(rtName string, fd runtime.Found)) {
	for _, name := range a.order {
		f, ok := a.runtimes[name].(finder)
		if !ok {
			continue
		}
		found, err := f.FindSandboxes(ctx)
		if err != nil {
			a.logger.Warn("cannot list the runtime's sandboxes", "runtime", name, "err", err)
			continue
		}
		for _, fd := range found {
			a.mu.Lock()
			_, held := a.sessions[sessionKey(fd.Tenant, fd.SessionID)]
			a.mu.Unlock()
			if !held {
				fn(name, fd)
			}
		}
	}
}

// adoptAll serves again the sandboxes whose sessions this node owns.
// Orphans are left to the reaper, which removes them once they are older
// than ReapGrace.
func (a *Agent) adoptAll(ctx context.Context) {
	a.eachUnheld(ctx, func(rtName string, fd runtime.Found) {
		j := a.judge(ctx, fd)
		if j.verdict != adopt {
			a.logger.Info("found a sandbox no live session of this node owns", "tenant", fd.Tenant, "session", fd.SessionID, "why", j.why)
			a.closeDangling(ctx, fd, j)
			return
		}
		if err := a.adoptOne(ctx, rtName, fd, j); err != nil {
			a.logger.Warn("cannot reattach session", "tenant", fd.Tenant, "session", fd.SessionID, "err", err)
		}
	})
}

// placement returns the node and epoch a session's events place it at:
// its create, or the latest resume that placed it anew.
func placement(evs []events.Event) (string, uint64) {
	var node string
	var epoch uint64
	for _, ev := range evs {
		switch {
		case ev.Op == "create" && ev.Phase == events.PhaseStart:
			var d createData
			_ = json.Unmarshal(ev.Data, &d)
			node, epoch = ev.Node, d.Epoch
		case ev.Op == "resume" && ev.Phase == events.PhaseFinish && ev.OK != nil && *ev.OK:
			var d resumeData
			if json.Unmarshal(ev.Data, &d) == nil && d.Node != "" {
				node, epoch = d.Node, d.Epoch
			}
		}
	}
	return node, epoch
}

// ephemeralPaths returns the ephemeral paths of a recorded manifest.
func ephemeralPaths(m []manifestRecord) []string {
	var out []string
	for _, r := range m {
		if r.Ephemeral {
			out = append(out, path.Clean(r.Path))
		}
	}
	return out
}

// lastSnapshot returns the newest snapshot a session's events recorded.
func lastSnapshot(evs []events.Event) *commands.Snapshot {
	var last *commands.Snapshot
	for _, ev := range evs {
		if ev.Phase != events.PhaseFinish || ev.OK == nil || !*ev.OK || (ev.Op != "persist" && ev.Op != "stop") {
			continue
		}
		var r commands.SnapshotResult
		if json.Unmarshal(ev.Data, &r) == nil && r.Snapshot != nil {
			last = r.Snapshot
		}
	}
	return last
}

// adoptOne serves the session on fd again: it restores the session's
// sequence and redaction from the events and the sandbox, records the
// operations the restart cut short as failed, and subscribes.
func (a *Agent) adoptOne(ctx context.Context, rtName string, fd runtime.Found, j judged) error {
	var cs createData
	_ = json.Unmarshal(j.evs[0].Data, &cs) // the fold checked evs[0] is the create start
	if cs.WorkspaceRoot == "" {
		cs.WorkspaceRoot = runtime.DefaultWorkspaceRoot
	}
	secrets := make(map[string]string, len(cs.SecretEnvKeys))
	for _, k := range cs.SecretEnvKeys {
		secrets[k] = fd.Env[k]
	}
	env := map[string]string{}
	for k, v := range cs.Env {
		env[k] = v
	}
	for k, v := range secrets {
		env[k] = v
	}
	s := &session{
		tenant: fd.Tenant, id: fd.SessionID, runtime: rtName, root: cs.WorkspaceRoot,
		redact: newRedactor(secrets), status: j.state.Status, results: map[string]*cmdResult{},
		seq: j.state.LastSeq, lastStreamSeq: j.tail.StreamSeq, lastHash: j.tail.Hash, sb: fd.Sandbox,
		epoch: fd.Epoch, lastSnap: lastSnapshot(j.evs), ephemeral: ephemeralPaths(cs.Manifest),
		spec: runtime.Spec{
			Tenant: fd.Tenant, SessionID: fd.SessionID, Node: a.cfg.ID, Epoch: fd.Epoch, Image: cs.Image,
			Env: env, Labels: cs.Labels, CPUs: cs.CPUs, MemoryBytes: cs.MemoryBytes, WorkspaceRoot: cs.WorkspaceRoot,
			Network: cs.Network, User: cs.User, PidsLimit: cs.PidsLimit,
		},
	}
	key := sessionKey(fd.Tenant, fd.SessionID)
	a.mu.Lock()
	if a.sessions[key] != nil || a.draining {
		a.mu.Unlock()
		return nil
	}
	a.sessions[key] = s
	a.mu.Unlock()

	if err := a.finishInFlight(ctx, s, j); err != nil {
		a.forget(s)
		return err
	}
	// The events are the truth: a session they say is running runs again
	// (its container may have stopped with the host).
	if j.state.Status == projection.StatusRunning && !fd.Running {
		if err := fd.Sandbox.Start(ctx); err != nil {
			a.logger.Warn("reattached session's sandbox does not start", "tenant", s.tenant, "session", s.id, "err", err)
		}
	}
	sub, err := a.subscribeSession(s)
	if err != nil {
		a.forget(s)
		return err
	}
	// Set the subscription under a.mu so that Close either sees it or has
	// already begun draining (then it is dropped here).
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
		return nil
	}
	a.logger.Info("reattached session", "tenant", s.tenant, "session", s.id, "status", s.getStatus(), "seq", s.seq)
	return nil
}

// finishInFlight appends a failed finish for each operation of s that
// started but never finished because the node stopped under it, so that
// every start has its finish.
func (a *Agent) finishInFlight(ctx context.Context, s *session, j judged) error {
	for _, ev := range j.evs {
		if ev.Phase != events.PhaseStart {
			continue
		}
		if _, open := j.state.InFlight[ev.SpanID]; !open {
			continue
		}
		ok, retry := false, errcode.Unavailable.Retryable()
		fin := events.Event{
			Version: events.Version, EventID: uuid.NewString(), TS: time.Now().UTC(),
			Tenant: s.tenant, SessionID: s.id, Op: ev.Op, Phase: events.PhaseFinish,
			CommandID: ev.CommandID, SpanID: ev.SpanID, ParentSpanID: ev.ParentSpanID, TraceID: ev.TraceID,
			Node: a.cfg.ID, Actor: ev.Actor, OK: &ok,
			ErrorCode: string(errcode.Unavailable), ErrorType: "errcode.Error", ErrorRetryable: &retry,
			ErrorMessage: fmt.Sprintf("node %s stopped while the operation ran; its outcome is unknown", a.cfg.ID),
		}
		if err := a.appendEvent(ctx, s, &fin); err != nil {
			return fmt.Errorf("record the end of %s %s: %w", ev.Op, ev.SpanID, err)
		}
	}
	return nil
}

// closeDangling records the end of a create that the node's stop cut
// short, so that the session's history is whole; the reaper removes the
// sandbox later.
func (a *Agent) closeDangling(ctx context.Context, fd runtime.Found, j judged) {
	if j.state.Status != projection.StatusCreating || j.state.Node != a.cfg.ID || len(j.state.InFlight) == 0 {
		return
	}
	tail, err := a.log.Last(ctx, fd.Tenant, fd.SessionID)
	if err != nil {
		return
	}
	s := &session{tenant: fd.Tenant, id: fd.SessionID, seq: j.state.LastSeq, lastStreamSeq: tail.StreamSeq, lastHash: tail.Hash}
	if err := a.finishInFlight(ctx, s, j); err != nil {
		a.logger.Warn("cannot record the end of an interrupted create", "tenant", fd.Tenant, "session", fd.SessionID, "err", err)
	}
}

// reap runs one reaper pass: it removes the sandboxes of this node that no
// live session owns and that are older than ReapGrace (as Nomad's docker
// driver reaps dangling containers). It returns how many it removed.
func (a *Agent) reap(ctx context.Context) int {
	n := 0
	a.eachUnheld(ctx, func(rtName string, fd runtime.Found) {
		a.mu.Lock()
		draining := a.draining
		a.mu.Unlock()
		if draining || time.Since(fd.Created) < a.cfg.ReapGrace {
			return
		}
		j := a.judge(ctx, fd)
		switch j.verdict {
		case keep:
			return
		case adopt:
			// A sandbox that startup could not reattach (a passing fault):
			// serve it now rather than remove a live session.
			if err := a.adoptOne(ctx, rtName, fd, j); err != nil {
				a.logger.Warn("cannot reattach session", "tenant", fd.Tenant, "session", fd.SessionID, "err", err)
			}
			return
		}
		a.closeDangling(ctx, fd, j)
		if err := fd.Sandbox.Shutdown(ctx); err != nil {
			a.logger.Warn("reaper cannot remove sandbox", "tenant", fd.Tenant, "session", fd.SessionID, "err", err)
			return
		}
		n++
		a.logger.Info("reaped orphaned sandbox", "tenant", fd.Tenant, "session", fd.SessionID, "why", j.why)
	})
	return n
}
