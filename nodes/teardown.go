package nodes

import (
	"context"

	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/projection"
)

// A session's parts end in one place, teardown, whoever ends them: a
// stop, shutdown or delete op, the node letting a session go (delete's
// end, release, a failed create or take-over, another writer taking the
// session over), and the agent closing. It runs the agent's teardown
// hooks, registered once in New, in this order:
//
//	processes → sandbox → status → registration → subscription → ports → egress
//
// The order matters where it is written down:
//   - processes end first, while the sandbox still runs: their exits are
//     recorded as the node stopping them, not as the sandbox dying under
//     them;
//   - the sandbox next, and a failure ends the teardown: a session whose
//     sandbox did not stop keeps its status, its forwards and its egress
//     proxy (it still runs, and stays reachable);
//   - the status before ports and egress: an op port that checks the
//     status after it sees the session not running, and a forward opened
//     before is closed by the ports hook (the same for egress);
//   - a session the node lets go leaves the agent's table first, then
//     stops being served, so that nothing finds it half gone.
//
// Streams (streaming execs' output) are not torn down: each drops itself
// once read or unread for StreamIdleTimeout. The idle and lifetime checks
// are the agent's loops over the sessions it holds, which a session that
// leaves the table is out of.

// ending says why a session's parts end and how far: each field names a
// hook's part, and a hook whose part is not asked for does nothing.
type ending struct {
	// why is told to the processes, which end with reason proc
	// (ProcStopped, ProcLost); "" leaves them.
	why, proc string
	// sandbox stops or shuts the sandbox down; nil leaves it as it is.
	sandbox func(ctx context.Context, sb runtime.Sandbox) error
	// status is the session's status from now on ("": unchanged).
	status projection.Status
	// leave: the node lets the session go (it forgets it and stops
	// serving its subject).
	leave bool
}

// teardownHook ends one part of a session; an error ends the teardown.
type teardownHook struct {
	name string
	run  func(ctx context.Context, s *session, e ending) error
}

// teardownHooks returns the agent's teardown hooks, in the order they run.
func (a *Agent) teardownHooks() []teardownHook {
	return []teardownHook{
		// First, as it cannot fail: a tracker is always safe to drop (the
		// next scan is full) and its watcher's goroutine must end.
		{"dirty tracking", func(_ context.Context, s *session, _ ending) error { s.content.track.drop(); return nil }},
		{"processes", endProcesses},
		{"sandbox", endSandbox},
		{"status", endStatus},
		{"registration", a.unregister},
		{"subscription", a.unsubscribe},
		{"ports", func(_ context.Context, s *session, _ ending) error { s.closePorts(); return nil }},
		{"egress", func(_ context.Context, s *session, _ ending) error { s.closeEgress(); return nil }},
	}
}

// teardown runs the agent's teardown hooks on s in order, and returns the
// error of the first that fails (the rest do not run).
func (a *Agent) teardown(ctx context.Context, s *session, e ending) error {
	for _, h := range a.teardowns {
		if err := h.run(ctx, s, e); err != nil {
			return err
		}
	}
	return nil
}

// endProcesses kills the session's processes and waits until ctx ends for
// each to be told ended; new processes are refused until the session runs
// again.
func endProcesses(ctx context.Context, s *session, e ending) error {
	if e.why != "" {
		s.procs.end(ctx, e.why, e.proc)
	}
	return nil
}

// endSandbox stops or shuts down the session's sandbox.
func endSandbox(ctx context.Context, s *session, e ending) error {
	if e.sandbox == nil {
		return nil
	}
	return e.sandbox(ctx, s.sandbox())
}

// endStatus sets the session's status.
func endStatus(_ context.Context, s *session, e ending) error {
	if e.status != "" {
		s.setStatus(e.status)
	}
	return nil
}

// unregister drops a session the node lets go from the agent's table.
func (a *Agent) unregister(_ context.Context, s *session, e ending) error {
	if !e.leave {
		return nil
	}
	a.mu.Lock()
	if a.sessions[sessionKey(s.tenant, s.id)] == s {
		delete(a.sessions, sessionKey(s.tenant, s.id))
	}
	a.mu.Unlock()
	return nil
}

// unsubscribe stops serving the subject of a session the node lets go.
func (a *Agent) unsubscribe(_ context.Context, s *session, e ending) error {
	if !e.leave {
		return nil
	}
	s.mu.Lock()
	sub := s.sub
	s.sub = nil
	s.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe()
		_ = a.nc.Flush()
	}
	return nil
}

// forget drops s from the agent and stops serving its subject.
func (a *Agent) forget(s *session) {
	// Letting go runs no hook that waits: no context is needed.
	_ = a.teardown(context.Background(), s, ending{leave: true})
}

func stopSandbox(ctx context.Context, sb runtime.Sandbox) error     { return sb.Stop(ctx) }
func shutDownSandbox(ctx context.Context, sb runtime.Sandbox) error { return sb.Shutdown(ctx) }
