package nodes

import (
	"context"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
)

// The lifecycle ops. A session's statuses and their transitions are the
// projection's (see the projection package doc); the node checks the
// status an op needs before it runs.

func runRunning(ctx context.Context, _ *Agent, s *session, _ *none) (outcome, error) {
	running, err := s.sandbox().Running(ctx)
	if err != nil {
		return outcome{}, err
	}
	return outcome{result: commands.RunningResult{Running: running}, data: events.RunningFinish{Running: running}}, nil
}

// statusOutcome is the outcome of an op that moves s to status st.
func statusOutcome(s *session, st projection.Status) outcome {
	s.setStatus(st)
	return statusResult(st)
}

// statusResult is the outcome of an op that moved its session to st.
func statusResult(st projection.Status) outcome {
	return outcome{result: commands.StatusResult{Status: string(st)}, data: events.StatusFinish{Status: string(st)}}
}

func runStart(ctx context.Context, a *Agent, s *session, _ *none) (outcome, error) {
	if err := requireStatus(s, commands.OpStart, projection.StatusRunning, projection.StatusStopped); err != nil {
		return outcome{}, err
	}
	if err := checkLifetime(s, commands.OpStart); err != nil {
		return outcome{}, err
	}
	sb := s.sandbox()
	if err := sb.Start(ctx); err != nil {
		return outcome{}, err
	}
	if err := a.openEgress(ctx, s, sb); err != nil {
		return outcome{}, err
	}
	return statusOutcome(s, projection.StatusRunning), nil
}

// runStop persists the workspace and then stops the sandbox; when the
// persist fails the sandbox keeps running and nothing is lost.
func runStop(ctx context.Context, a *Agent, s *session, _ *none) (outcome, error) {
	if err := requireStatus(s, commands.OpStop, projection.StatusRunning, projection.StatusStopped); err != nil {
		return outcome{}, err
	}
	p, err := a.persistWorkspace(ctx, s)
	if err != nil {
		return outcome{}, err
	}
	if err := a.teardown(ctx, s, ending{why: "stopping", proc: ProcStopped, sandbox: stopSandbox, status: projection.StatusStopped}); err != nil {
		return outcome{}, err
	}
	st := string(projection.StatusStopped)
	return outcome{
		result: commands.SnapshotResult{Status: st, Snapshot: p.snap},
		data:   p.finish(st),
	}, nil
}

func runShutdown(ctx context.Context, a *Agent, s *session, _ *none) (outcome, error) {
	if err := a.teardown(ctx, s, ending{why: "shutting down", proc: ProcStopped, sandbox: shutDownSandbox, status: projection.StatusShutDown}); err != nil {
		return outcome{}, err
	}
	return statusResult(projection.StatusShutDown), nil
}

// runDelete shuts the sandbox down and forgets the session once its
// finish is recorded; the session id is never used again.
func runDelete(ctx context.Context, a *Agent, s *session, _ *none) (outcome, error) {
	if err := a.teardown(ctx, s, ending{why: "being deleted", proc: ProcStopped, sandbox: shutDownSandbox, status: projection.StatusDeleted}); err != nil {
		return outcome{}, err
	}
	out := statusResult(projection.StatusDeleted)
	out.after = func() { a.forget(s) }
	return out, nil
}
