package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/tracing"
)

// Every op runs through one path:
//
//	decode → validate → remember the command id → START event → run →
//	FINISH event → reply
//
// A request refused by decode or validate is answered and not recorded
// (it is not an operation). Everything past the start event ends with
// exactly one finish event, also when the op panics: the panic is
// recovered, logged with its stack, recorded as an internal failure, and
// the node goes on serving every other session.

// outcome is what an op reports for its finish event and reply.
type outcome struct {
	result   any    // the reply's result
	data     any    // the finish event's data
	exitCode *int   // exec only
	ok       *bool  // overrides ok (exec: false for a non-zero exit)
	stdout   []byte // exec only: kept output, redacted and cut
	stderr   []byte //
	outTrunc bool   //
	errTrunc bool   //
	after    func() // runs after the finish event, before the reply
}

// serve decodes m as op d on s and answers it.
func (a *Agent) serve(ctx context.Context, m *nats.Msg, s *session, d opDef) {
	args := d.newArgs()
	req, err := commands.DecodeRequest(m.Data, args)
	if err == nil {
		err = validate(args)
	}
	if err != nil {
		a.respond(m, commands.ErrorReply(err))
		return
	}
	caller, err := auth.CallerOf(m)
	if err == nil {
		req.Actor, err = caller.Authorize(s.tenant, req.Actor)
	}
	if err != nil {
		a.respond(m, a.refuse(ctx, s, req, d.op, caller, err))
		return
	}
	a.respond(m, a.perform(ctx, s, req, d.op, d.start(a, s, args), func(ctx context.Context) (outcome, error) {
		return d.run(ctx, a, s, args)
	}))
}

// refuse records a command its sender may not send (a start and a
// permission_denied finish, with the sender as actor) and returns the
// error reply. The command id is dropped: a refused sender must not claim
// an id the session's own tenant may use later.
func (a *Agent) refuse(ctx context.Context, s *session, req commands.Request, op commands.Op, caller auth.Caller, cause error) []byte {
	req.CommandID = ""
	req.Actor = caller.User
	if caller.Account != "" {
		req.Actor = caller.Account + "/" + caller.User
	}
	reply, _, _ := a.execute(ctx, s, req, op, nil, func(context.Context) (outcome, error) { return outcome{}, cause })
	return reply
}

// validate calls args' Validate method, if it has one.
func validate(args any) error {
	if v, ok := args.(interface{ Validate() error }); ok {
		return v.Validate()
	}
	return nil
}

// perform runs one operation on s unless its command id has been seen:
// then it answers with the first outcome and runs nothing.
func (a *Agent) perform(ctx context.Context, s *session, req commands.Request, op commands.Op, startData any, fn func(ctx context.Context) (outcome, error)) []byte {
	if req.CommandID == "" {
		reply, _, _ := a.execute(ctx, s, req, op, startData, fn)
		return reply
	}
	slot, seen, err := s.memory.claim(req.CommandID, op, argsDigest(req.Args))
	if err != nil {
		return commands.ErrorReply(err)
	}
	if seen {
		return slot.await(ctx, a.cfg.ID)
	}
	reply, fin, startErr := a.execute(ctx, s, req, op, startData, fn)
	s.memory.settle(req.CommandID, slot, reply, fin, startErr == nil)
	return reply
}

// execute appends the start event, runs fn, appends the finish event and
// returns the reply and the finish event. When the start cannot be
// appended nothing runs or is recorded, and startErr says why.
func (a *Agent) execute(ctx context.Context, s *session, req commands.Request, op commands.Op, startData any, fn func(ctx context.Context) (outcome, error)) (reply []byte, fin *events.Event, startErr error) {
	// The op's span is the one its events name (package tracing).
	ctx, span, ids := a.tracer.Start(ctx, "paddock.node "+string(op), trace.SpanKindServer, req.TraceID, req.ParentSpanID, a.tracer.OpAttrs(s.tenant, s.id, string(op), a.cfg.ID)...)
	var spanErr error
	defer func() { tracing.End(span, string(errcode.Of(spanErr)), spanErr) }()
	defer s.working()() // an op is activity: the session is not idle while it runs
	base := events.Event{
		Version: events.Version, Tenant: s.tenant, SessionID: s.id, Op: string(op),
		CommandID: req.CommandID, SpanID: ids.SpanID, ParentSpanID: ids.ParentSpanID,
		TraceID: ids.TraceID, Node: a.cfg.ID, Actor: req.Actor,
	}
	start := base
	start.EventID = uuid.NewString()
	start.TS = time.Now().UTC()
	start.Phase = events.PhaseStart
	start.Data = a.encodeData(s, op, start.Phase, startData)
	if err := a.appendEvent(ctx, s, &start); err != nil {
		a.letGoIfMoved(s)
		spanErr = err
		return commands.ErrorReply(err), nil, err
	}

	began := time.Now()
	rctx, rspan := a.tracer.Child(ctx, "paddock.runtime "+string(op), a.tracer.RuntimeAttrs(s.runtime)...)
	out, opErr := a.guard(s, op, func() (outcome, error) {
		return fn(context.WithValue(context.WithValue(rctx, startSeqKey{}, start.Seq), commandIDKey{}, req.CommandID))
	})
	tracing.End(rspan, string(errcode.Of(opErr)), opErr)
	if opErr == nil {
		reply, opErr = commands.ResultReply(out.result)
	}
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
	a.observeOp(s, op, &f, time.Since(began))
	// The finish is appended even when the agent is being cancelled: an
	// operation that ran must be recorded as ended.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := a.appendEvent(fctx, s, &f); err != nil {
		a.letGoIfMoved(s)
		a.logger.Error("finish event not recorded", "tenant", s.tenant, "session", s.id, "op", op, "err", err)
		spanErr = err
		return commands.ErrorReply(errcode.Wrap(errcode.Unavailable, err, "the operation ran but its finish event was not recorded")), nil, nil
	}
	if opErr != nil {
		spanErr = opErr
		return commands.ErrorReply(opErr), &f, nil
	}
	if out.after != nil {
		out.after()
	}
	return reply, &f, nil
}

// letGoIfMoved stops serving s once another writer took its history
// over: the session's subject is unsubscribed, so the next command finds
// no responder and the client asks the engine (lookup, resume), and the
// sandbox is left to the reaper, which removes it as an orphan (its
// history no longer places it here).
func (a *Agent) letGoIfMoved(s *session) {
	if !s.moved.Load() || !s.letGo.CompareAndSwap(false, true) {
		return
	}
	a.logger.Warn("session taken over by another writer; letting it go", "tenant", s.tenant, "session", s.id)
	// Its processes are killed without waiting for their proc_exit: this
	// node can record nothing more for the session.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	s.procs.end(done, "taken over by another writer", ProcLost)
	a.forget(s)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// guard runs fn and turns a panic into an internal error, logged with its
// stack, so that one bad op cannot take the node and its sessions down.
func (a *Agent) guard(s *session, op commands.Op, fn func() (outcome, error)) (out outcome, err error) {
	defer func() {
		if r := recover(); r != nil {
			a.logger.Error("operation panicked", "tenant", s.tenant, "session", s.id, "op", op, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			out, err = outcome{}, errcode.New(errcode.Internal, "internal error in %s; the node's log has the cause", op)
		}
	}()
	return fn()
}

// wireError returns err as it is recorded and answered: its code, and a
// message with secret values redacted. An error without a code is
// internal; its text is logged here and never leaves the node.
func (a *Agent) wireError(s *session, op commands.Op, err error) *errcode.Error {
	var e *errcode.Error
	if !errors.As(err, &e) {
		a.logger.Error("operation failed without an error code", "tenant", s.tenant, "session", s.id, "op", op, "err", err)
		return errcode.New(errcode.Internal, "internal error in %s; the node's log has the cause", op)
	}
	if e.Err != nil {
		a.logger.Debug("operation failed", "tenant", s.tenant, "session", s.id, "op", op, "err", e)
	}
	return &errcode.Error{Code: e.Code, Message: s.redactor().string(e.Message)}
}

// encodeData encodes an event's data with secret values redacted from
// every string in it; a value that cannot be encoded is a bug, logged, and
// recorded as no data.
func (a *Agent) encodeData(s *session, op commands.Op, phase events.Phase, v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err == nil {
		b, err = s.redactor().data(b)
	}
	if err != nil {
		a.logger.Error("event data does not encode", "tenant", s.tenant, "session", s.id, "op", op, "phase", phase, "err", err)
		return nil
	}
	return b
}

// startSeqKey carries the seq of an operation's start event to the
// operation (persist records it with the snapshot).
type startSeqKey struct{}

// commandIDKey carries the running operation's command id (a streaming
// exec is read by it).
type commandIDKey struct{}

// commandID returns the running operation's command id.
func commandID(ctx context.Context) string {
	id, _ := ctx.Value(commandIDKey{}).(string)
	return id
}

// startSeq returns the seq of the running operation's start event.
func startSeq(ctx context.Context) uint64 {
	seq, _ := ctx.Value(startSeqKey{}).(uint64)
	return seq
}

// capture applies the capture policy to kept output: at most limit bytes
// (never cut inside a UTF-8 sequence), encoded by the output rule.
func capture(b []byte, truncated bool, limit int) (text, encoding string, cut bool) {
	kept := commands.CutUTF8(b, limit)
	text, encoding = commands.EncodeOutput(kept)
	return text, encoding, truncated || len(kept) < len(b)
}
