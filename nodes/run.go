package nodes

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
)

// Every op runs through one path:
//
//	decode → validate → remember the command id → START event → run →
//	FINISH event → reply
//
// A request refused by decode or validate is answered and not recorded
// (it is not an operation). What follows is the pipeline's (pipeline.go):
// everything past the start event ends with exactly one finish event,
// also when the op panics: the panic is recovered, logged with its stack,
// recorded as an internal failure, and the node goes on serving every
// other session.

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
	if err == nil && d.op == commands.OpFork {
		// Only the scheduler records a fork: it places the children the
		// fork names.
		err = caller.Operator()
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
	return a.perform(ctx, s, req, op, nil, func(context.Context) (outcome, error) { return outcome{}, cause })
}

// validate calls args' Validate method, if it has one.
func validate(args any) error {
	if v, ok := args.(interface{ Validate() error }); ok {
		return v.Validate()
	}
	return nil
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
	_ = a.teardown(done, s, ending{why: "taken over by another writer", proc: ProcLost, leave: true})
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
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
