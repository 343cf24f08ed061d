package nodes

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/projection"
)

// opDef is one op of the table every session subject is served from.
type opDef struct {
	op commands.Op
	// newArgs returns a pointer to a new value of the op's args type.
	newArgs func() any
	// start returns the start event's data for args.
	start func(a *Agent, s *session, args any) any
	// run does the op.
	run func(ctx context.Context, a *Agent, s *session, args any) (outcome, error)
}

// def builds an opDef with typed args A (struct{} for ops without any).
func def[A any](op commands.Op, start func(a *Agent, s *session, args *A) any, run func(ctx context.Context, a *Agent, s *session, args *A) (outcome, error)) opDef {
	return opDef{
		op:      op,
		newArgs: func() any { return new(A) },
		start: func(a *Agent, s *session, args any) any {
			if start == nil {
				return nil
			}
			return start(a, s, args.(*A))
		},
		run: func(ctx context.Context, a *Agent, s *session, args any) (outcome, error) {
			return run(ctx, a, s, args.(*A))
		},
	}
}

// none is the args type of ops that take none.
type none struct{}

// sessionOps returns the table of the ops served on a session's subject.
func sessionOps() map[commands.Op]opDef {
	m := map[commands.Op]opDef{}
	for _, d := range []opDef{
		def(commands.OpExec, execStart, runExec),
		def(commands.OpRead, readStart, runRead),
		def(commands.OpWrite, writeStart, runWrite),
		def(commands.OpLs, lsStart, runLs),
		def(commands.OpRm, rmStart, runRm),
		def(commands.OpMkdir, mkdirStart, runMkdir),
		def[none](commands.OpRunning, nil, runRunning),
		def[none](commands.OpStart, nil, runStart),
		def[none](commands.OpStop, nil, runStop),
		def[none](commands.OpShutdown, nil, runShutdown),
		def[none](commands.OpDelete, nil, runDelete),
		def[none](commands.OpPersist, nil, runPersist),
		def(commands.OpHydrate, hydrateStart, runHydrate),
		def(commands.OpResume, resumeStart, runResume),
		def(commands.OpProcStart, procStartData, runProcStart),
		def(commands.OpProcWrite, procWriteData, runProcWrite),
		def(commands.OpProcRead, procReadData, runProcRead),
		def(commands.OpProcResize, procResizeData, runProcResize),
		def(commands.OpProcSignal, procSignalData, runProcSignal),
		def[none](commands.OpProcList, nil, runProcList),
		def(commands.OpExecRead, execReadStart, runExecRead),
		def(commands.OpPort, portStart, runPort),
		def(commands.OpFork, forkStart, runFork),
		def(commands.OpCheckpoint, checkpointStart, runCheckpoint),
	} {
		m[d.op] = d
	}
	return m
}

// sessionHandler serves every op on s's subject.
func (a *Agent) sessionHandler(s *session) func(ctx context.Context, m *nats.Msg) {
	return func(ctx context.Context, m *nats.Msg) {
		_, _, op, ok := a.cmdSubj.ParseSession(m.Subject)
		d, known := a.ops[op]
		if !ok || !known {
			a.respond(m, commands.ErrorReply(errcode.New(errcode.UnknownOp, "unknown op %q", clipOp(op))))
			return
		}
		if s.getStatus() == projection.StatusDeleted {
			a.respond(m, commands.ErrorReply(errcode.New(errcode.SessionNotFound, "session %s was deleted", s.id)))
			return
		}
		a.serve(ctx, m, s, d)
	}
}

// clipOp shortens an op name for an error message.
func clipOp(op commands.Op) string {
	if len(op) > 32 {
		return string(op[:32]) + "..."
	}
	return string(op)
}

// requireStatus returns invalid_state unless s is in one of the statuses.
func requireStatus(s *session, op commands.Op, want ...projection.Status) error {
	st := s.getStatus()
	for _, w := range want {
		if st == w {
			return nil
		}
	}
	return errcode.New(errcode.InvalidState, "%s: session %s is %s", op, s.id, st)
}
