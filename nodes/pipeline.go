package nodes

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/tracing"
)

// Every operation, whichever subject brings it (a session's subject, the
// node's create or resume placement, or the node itself: idle stop,
// lifetime, a process's exit), runs through one handler wrapped in layers,
// composed once in New (outermost first):
//
//	idempotent → traced → measured → recorded → runtimeSpan → recovered → invoke
//
//	idempotent   a command id the session has seen gets the first reply and
//	             runs nothing; a create whose session another writer made
//	             first is answered from the history
//	traced       the op's span, whose ids the events name
//	measured     the op's metrics, from the finish event
//	recorded     the start event, then the finish event (exactly one once
//	             the start is recorded), then out.after
//	runtimeSpan  the span of the runtime's part
//	recovered    a panic becomes an internal failure, logged with its stack
//	invoke       the op itself
//
// The order is the one the node had before it had layers: a repeated
// command gets no span and no events; the span covers both events; a
// panic is recorded like any other failure.

// call is one operation on its way through the pipeline: what the layers
// are given, and what they leave for the layers around them.
type call struct {
	s     *session
	req   commands.Request
	op    commands.Op
	start any                                        // the start event's data
	run   func(ctx context.Context) (outcome, error) // the op
	// fromHistory, when set, answers a command whose start found the
	// session's history begun by another writer (create: someone created
	// the session first).
	fromHistory func(ctx context.Context) []byte

	ids tracing.IDs // the op's span (traced)
	// spanErr is what the op's span ends with (recorded).
	spanErr error
	// out and err are the op's outcome (invoke, recovered).
	out outcome
	err error
	// startErr says why the start event was not recorded (nothing ran).
	startErr error
	// finish is the finish event as built, recorded says it was appended;
	// took is how long the op ran (recorded).
	finish   *events.Event
	recorded bool
	took     time.Duration
}

// handler answers a call with its reply.
type handler func(ctx context.Context, c *call) []byte

// layer wraps a handler in one concern.
type layer func(next handler) handler

// pipeline composes the layers around invoke, the first outermost.
func pipeline(layers ...layer) handler {
	h := handler(invoke)
	for i := len(layers) - 1; i >= 0; i-- {
		h = layers[i](h)
	}
	return h
}

// newPipeline returns the agent's one op handler.
func (a *Agent) newPipeline() handler {
	return pipeline(a.idempotent, a.traced, a.measured, a.recorded, a.runtimeSpan, a.recovered)
}

// perform runs one operation on s through the pipeline and returns its
// reply.
func (a *Agent) perform(ctx context.Context, s *session, req commands.Request, op commands.Op, startData any, fn func(ctx context.Context) (outcome, error)) []byte {
	return a.handle(ctx, &call{s: s, req: req, op: op, start: startData, run: fn})
}

// invoke runs the op and keeps its outcome in c; the reply is the op's
// result (an error reply is the recorded layer's, once the finish is).
func invoke(ctx context.Context, c *call) []byte {
	c.out, c.err = c.run(ctx)
	if c.err != nil {
		return nil
	}
	var reply []byte
	reply, c.err = commands.ResultReply(c.out.result)
	return reply
}

// idempotent answers a command id the session has seen with the first
// outcome, waiting for it while it runs, and runs nothing. A command
// whose start was not recorded is forgotten, so that a retry runs it.
func (a *Agent) idempotent(next handler) handler {
	return func(ctx context.Context, c *call) []byte {
		if c.req.CommandID == "" {
			return a.orHistory(ctx, c, next(ctx, c))
		}
		slot, seen, err := c.s.memory.claim(c.req.CommandID, c.op, argsDigest(c.req.Args))
		if err != nil {
			return commands.ErrorReply(err)
		}
		if seen {
			return slot.await(ctx, a.cfg.ID)
		}
		reply := a.orHistory(ctx, c, next(ctx, c))
		var fin *events.Event
		if c.recorded {
			fin = c.finish
		}
		c.s.memory.settle(c.req.CommandID, slot, reply, fin, c.startErr == nil)
		return reply
	}
}

// orHistory returns reply, unless the call's start found the session's
// history begun by another writer and the call can be answered from it.
func (a *Agent) orHistory(ctx context.Context, c *call, reply []byte) []byte {
	if c.fromHistory != nil && errcode.Of(c.startErr) == errcode.ConcurrencyConflict {
		return c.fromHistory(ctx)
	}
	return reply
}

// traced runs the call in the op's span, whose ids its events name
// (package tracing).
func (a *Agent) traced(next handler) handler {
	return func(ctx context.Context, c *call) []byte {
		op := string(c.op)
		ctx, span, ids := a.tracer.Start(ctx, "paddock.node "+op, trace.SpanKindServer, c.req.TraceID, c.req.ParentSpanID, a.tracer.OpAttrs(c.s.tenant, c.s.id, op, a.cfg.ID)...)
		defer func() { tracing.End(span, string(errcode.Of(c.spanErr)), c.spanErr) }()
		c.ids = ids
		return next(ctx, c)
	}
}

// measured records the op in the node's metrics, by its finish event (a
// call whose start was not recorded ran nothing and is not counted).
func (a *Agent) measured(next handler) handler {
	return func(ctx context.Context, c *call) []byte {
		reply := next(ctx, c)
		if c.finish != nil {
			a.observeOp(c.s, c.op, c.finish, c.took)
		}
		return reply
	}
}

// recorded appends the start event, runs the call, appends the finish
// event and returns the reply. When the start cannot be appended nothing
// runs or is recorded, and c.startErr says why; once it is, the call ends
// with exactly one finish event.
func (a *Agent) recorded(next handler) handler {
	return func(ctx context.Context, c *call) []byte {
		s, op := c.s, c.op
		defer s.working()() // an op is activity: the session is not idle while it runs
		base := events.Event{
			Version: events.Version, Tenant: s.tenant, SessionID: s.id, Op: string(op),
			CommandID: c.req.CommandID, SpanID: c.ids.SpanID, ParentSpanID: c.ids.ParentSpanID,
			TraceID: c.ids.TraceID, Node: a.cfg.ID, Actor: c.req.Actor,
		}
		start := base
		start.EventID = uuid.NewString()
		start.TS = time.Now().UTC()
		start.Phase = events.PhaseStart
		start.Data = a.encodeData(s, op, start.Phase, c.start)
		if err := a.appendEvent(ctx, s, &start); err != nil {
			a.letGoIfMoved(s)
			c.spanErr, c.startErr = err, err
			return commands.ErrorReply(err)
		}

		began := time.Now()
		reply := next(context.WithValue(context.WithValue(ctx, startSeqKey{}, start.Seq), commandIDKey{}, c.req.CommandID), c)
		out, opErr := c.out, c.err
		dur := float64(time.Since(began).Microseconds()) / 1000

		f := base
		f.EventID = uuid.NewString()
		f.TS = time.Now().UTC()
		f.Phase = events.PhaseFinish
		f.DurationMS = &dur
		ok := opErr == nil
		if opErr != nil {
			e := a.wireError(s, op, opErr)
			opErr = e
			retry := e.Code.Retryable()
			f.ErrorCode, f.ErrorType, f.ErrorMessage, f.ErrorRetryable = string(e.Code), "errcode.Error", e.Message, &retry
		} else {
			if out.ok != nil {
				ok = *out.ok
			}
			f.Data = a.encodeData(s, op, f.Phase, out.data)
			f.ExitCode = out.exitCode
			if lim := a.cfg.Capture.Limit; lim > 0 {
				f.Stdout, f.StdoutEncoding, f.StdoutTruncated = capture(out.stdout, out.outTrunc, lim)
				f.Stderr, f.StderrEncoding, f.StderrTruncated = capture(out.stderr, out.errTrunc, lim)
			}
		}
		f.OK = &ok
		c.finish, c.took = &f, time.Since(began)
		// The finish is appended even when the agent is being cancelled: an
		// operation that ran must be recorded as ended.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := a.appendEvent(fctx, s, &f); err != nil {
			a.letGoIfMoved(s)
			a.logger.Error("finish event not recorded", "tenant", s.tenant, "session", s.id, "op", op, "err", err)
			c.spanErr = err
			return commands.ErrorReply(errcode.Wrap(errcode.Unavailable, err, "the operation ran but its finish event was not recorded"))
		}
		c.recorded = true
		if opErr != nil {
			c.spanErr = opErr
			return commands.ErrorReply(opErr)
		}
		if out.after != nil {
			out.after()
		}
		return reply
	}
}

// runtimeSpan runs the op in a child span: the runtime's part of it.
func (a *Agent) runtimeSpan(next handler) handler {
	return func(ctx context.Context, c *call) []byte {
		ctx, span := a.tracer.Child(ctx, "paddock.runtime "+string(c.op), a.tracer.RuntimeAttrs(c.s.runtime)...)
		reply := next(ctx, c)
		tracing.End(span, string(errcode.Of(c.err)), c.err)
		return reply
	}
}

// recovered turns a panic of the op into an internal failure, logged with
// its stack, so that one bad op cannot take the node and its sessions
// down.
func (a *Agent) recovered(next handler) handler {
	return func(ctx context.Context, c *call) (reply []byte) {
		defer func() {
			if r := recover(); r != nil {
				a.logger.Error("operation panicked", "tenant", c.s.tenant, "session", c.s.id, "op", c.op, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				reply, c.out, c.err = nil, outcome{}, errcode.New(errcode.Internal, "internal error in %s; the node's log has the cause", c.op)
			}
		}()
		return next(ctx, c)
	}
}
