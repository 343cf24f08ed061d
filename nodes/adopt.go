package nodes

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

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
	h       history
}

// judge reads the session's events and decides whether this node owns a
// live session on fd.
func (a *Agent) judge(ctx context.Context, fd runtime.Found) judged {
	h, fresh, err := a.readHistory(ctx, fd.Tenant, fd.SessionID)
	switch {
	case err != nil && len(h.evs) == 0:
		return judged{verdict: keep, why: fmt.Sprintf("events unreadable: %v", err)}
	case len(h.evs) == 0:
		return judged{verdict: orphan, why: "no events for the session"}
	case err != nil:
		return judged{verdict: orphan, why: err.Error(), h: h}
	case h.node != a.cfg.ID:
		return judged{verdict: orphan, why: fmt.Sprintf("the session belongs to node %s", h.node), h: h}
	case h.epoch != fd.Epoch:
		return judged{verdict: orphan, why: fmt.Sprintf("the session is at epoch %d, the sandbox at %d", h.epoch, fd.Epoch), h: h}
	case h.state.Status != projection.StatusRunning && h.state.Status != projection.StatusStopped:
		return judged{verdict: orphan, why: fmt.Sprintf("the session is %s", h.state.Status), h: h}
	case !fresh:
		return judged{verdict: keep, why: "the session's events changed while they were read"}
	}
	return judged{verdict: adopt, h: h}
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
		if err := a.adoptOne(ctx, fd, j.h); err != nil {
			a.logger.Warn("cannot reattach session", "tenant", fd.Tenant, "session", fd.SessionID, "err", err)
		}
	})
}

// adoptOne serves the session on fd again: the session is rebuilt from its
// history (secret values come back from the sandbox's environment), the
// operations the restart cut short are recorded as failed, and then its
// subject is served.
func (a *Agent) adoptOne(ctx context.Context, fd runtime.Found, h history) error {
	secrets := map[string]string{}
	for _, k := range h.create.SecretEnvKeys {
		if v, ok := fd.Env[k]; ok {
			secrets[k] = v
		}
	}
	s := a.newSession(fd.Tenant, fd.SessionID, h.create, secrets, fd.Epoch)
	s.takeUp(h)
	if held, err := a.hold(s); err != nil {
		if held != nil || errcode.Of(err) == errcode.Unavailable {
			return nil // held meanwhile, or draining
		}
		return err
	}
	if err := a.finishInFlight(ctx, s, h); err != nil {
		a.forget(s)
		return err
	}
	// The events are the truth: a session they say is running runs again
	// (its container may have stopped with the host).
	if h.state.Status == projection.StatusRunning && !fd.Running {
		if err := fd.Sandbox.Start(ctx); err != nil {
			a.logger.Warn("reattached session's sandbox does not start", "tenant", s.tenant, "session", s.id, "err", err)
		}
	}
	if err := a.attach(s, fd.Sandbox); err != nil {
		a.forget(s)
		if errcode.Of(err) == errcode.Unavailable {
			return nil // draining
		}
		return err
	}
	if s.getStatus() == projection.StatusRunning {
		if err := a.openEgress(ctx, s, fd.Sandbox); err != nil {
			a.logger.Warn("reattached session's egress proxy does not open; its sandbox reaches nothing", "tenant", s.tenant, "session", s.id, "err", err)
		}
	}
	a.logger.Info("reattached session", "tenant", s.tenant, "session", s.id, "status", s.getStatus(), "seq", s.lastSeq())
	return nil
}

// finishInFlight appends a failed finish for each operation of s that
// started but never finished because its node stopped under it, so that
// every start has its finish, and remembers it under its command id.
func (a *Agent) finishInFlight(ctx context.Context, s *session, h history) error {
	lost := projection.LiveProcesses(h.evs)
	for _, ev := range h.evs {
		if ev.Phase != events.PhaseStart {
			continue
		}
		if _, open := h.state.InFlight[ev.SpanID]; !open {
			continue
		}
		ok, retry := false, errcode.Unavailable.Retryable()
		fin := events.Event{
			Version: events.Version, EventID: uuid.NewString(), TS: time.Now().UTC(),
			Tenant: s.tenant, SessionID: s.id, Op: ev.Op, Phase: events.PhaseFinish,
			CommandID: ev.CommandID, SpanID: ev.SpanID, ParentSpanID: ev.ParentSpanID, TraceID: ev.TraceID,
			Node: a.cfg.ID, Actor: ev.Actor, OK: &ok,
			ErrorCode: string(errcode.Unavailable), ErrorType: "errcode.Error", ErrorRetryable: &retry,
			ErrorMessage: fmt.Sprintf("node %s stopped while the operation ran; its outcome is unknown (send a new command id to run it again)", h.node),
		}
		if err := a.appendEvent(ctx, s, &fin); err != nil {
			return fmt.Errorf("record the end of %s %s: %w", ev.Op, ev.SpanID, err)
		}
		s.memory.recordFinish(fin)
	}
	// The processes the history started and never ended ran under a node
	// that is gone (or restarted): nobody holds their streams any more.
	for _, id := range lost {
		a.recordExit(s, id, nil, ProcLost, 0)
	}
	return nil
}

// closeDangling records the end of a create that the node's stop cut
// short, so that the session's history is whole; the reaper removes the
// sandbox later.
func (a *Agent) closeDangling(ctx context.Context, fd runtime.Found, j judged) {
	h := j.h
	if len(h.evs) == 0 || h.state.Status != projection.StatusCreating || h.node != a.cfg.ID || len(h.state.InFlight) == 0 {
		return
	}
	s := a.newSession(fd.Tenant, fd.SessionID, h.create, nil, h.epoch)
	s.takeUp(h)
	if err := a.finishInFlight(ctx, s, h); err != nil {
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
			if err := a.adoptOne(ctx, fd, j.h); err != nil {
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
