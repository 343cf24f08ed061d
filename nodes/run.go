package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
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

// appendChained appends one event of s under its append lock, assigning seq
// and prev_hash.
func (a *Agent) appendChained(ctx context.Context, s *session, ev *events.Event) error {
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	ev.Seq = s.seq + 1
	ev.PrevHash = s.lastHash
	s.redactor().event(ev)
	data, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	var seq uint64
	for skipped := 0; ; skipped++ {
		seq, err = a.appendRetrying(ctx, s, ev, data)
		if err == nil || errcode.Of(err) != errcode.ConcurrencyConflict || skipped == 3 {
			break
		}
		// Someone else appended to the session. Another node's signed
		// write means that node owns the session now: the conflict stands.
		// An event nobody signed, or one that claims this node but is not
		// signed with its key, was forged by someone with stream rights:
		// chain past it, so that it cannot stall the session, and leave it
		// to audit verify, which names it.
		tail, terr := a.log.Last(ctx, s.tenant, s.id)
		if terr != nil || tail.Event == nil || tail.StreamSeq == s.lastStreamSeq {
			break
		}
		own := tail.Signed && tail.Signer == a.log.SigningKey() && tail.Event.Node == a.cfg.ID
		if own && tail.Event.EventID == ev.EventID {
			// This very event landed; an earlier attempt's ack was lost.
			seq, err = tail.StreamSeq, nil
			break
		}
		if own {
			// An event of this node that it counted as not appended (its
			// outcome stayed unknown past AppendPatience): take it into
			// the chain, and close it if it opened an operation, which
			// never ran.
			a.logger.Warn("an event this node could not confirm is in the session's history; taking it up", "tenant", s.tenant, "session", s.id, "seq", tail.Event.Seq, "op", tail.Event.Op, "phase", tail.Event.Phase)
			s.seq, s.lastStreamSeq, s.lastHash = tail.Event.Seq, tail.StreamSeq, tail.Hash
			if tail.Event.Phase == events.PhaseStart {
				if ferr := a.closeUnconfirmed(ctx, s, *tail.Event); ferr != nil {
					err = ferr
					break
				}
			}
			ev.Seq, ev.PrevHash = s.seq+1, s.lastHash
			if data, err = json.Marshal(ev); err != nil {
				return fmt.Errorf("encode event: %w", err)
			}
			continue
		}
		forged := !tail.Signed || tail.Event.Node == a.cfg.ID && tail.Signer != a.log.SigningKey()
		if !forged {
			// Another writer's signed event: an engine that declared this
			// node lost, or a node that resumed the session. That writer
			// owns the session's history now (fencing: this node's
			// append is refused, so nothing it would run is recorded or
			// run); this node lets the session go.
			s.moved.Store(true)
			err = errcode.Wrap(errcode.SessionMoved, err, fmt.Sprintf("session %s was taken over (%s %s by %s): node %s no longer serves it and ran nothing; send the command again", s.id, tail.Event.Op, tail.Event.Phase, orNone(tail.Event.Node), a.cfg.ID))
			break
		}
		a.logger.Warn("an event this node did not write, in the session's history; chaining past it (audit verify names it)",
			"tenant", s.tenant, "session", s.id, "seq", tail.Event.Seq, "stream_seq", tail.StreamSeq, "signer", tail.Signer)
		ev.Seq = max(s.seq, tail.Event.Seq) + 1
		ev.PrevHash = tail.Hash
		s.seq, s.lastStreamSeq, s.lastHash = ev.Seq-1, tail.StreamSeq, tail.Hash
		if data, err = json.Marshal(ev); err != nil {
			return fmt.Errorf("encode event: %w", err)
		}
	}
	if err != nil {
		return err
	}
	s.seq = ev.Seq
	s.lastStreamSeq = seq
	s.lastHash = events.Hash(data)
	return nil
}

// appendRetrying appends data, sending it again while the outcome is
// unknown (unavailable: no ack, a leader lost, a timeout), each attempt
// bounded, until AppendPatience has passed: a start whose outcome stays
// unknown would leave its command unanswerable, and a finish must not be
// lost to a passing fault. Sending again is safe: the event id makes the
// server drop a copy of an event it stored, and the expected last
// sequence refuses a second append after it (appendEvent then finds this
// very event at the end of the history).
func (a *Agent) appendRetrying(ctx context.Context, s *session, ev *events.Event, data []byte) (uint64, error) {
	giveUp := time.Now().Add(a.cfg.AppendPatience)
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, appendAttempt)
		seq, err := a.log.AppendRaw(actx, ev, data, s.lastStreamSeq)
		cancel()
		if err == nil || errcode.Of(err) != errcode.Unavailable || ctx.Err() != nil || time.Now().After(giveUp) {
			return seq, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(time.Duration(50<<min(attempt, 5))*time.Millisecond, time.Second)):
		}
	}
}

// appendAttempt bounds one attempt of an append: a leader that went away
// with the request is given up on quickly, and the next attempt reaches
// the new one.
const appendAttempt = 2 * time.Second

// closeUnconfirmed records a failed finish for a start this node could
// not confirm it had appended, and answered as failed: the operation never
// ran. s.appendMu is held.
func (a *Agent) closeUnconfirmed(ctx context.Context, s *session, start events.Event) error {
	ok, retry := false, errcode.Unavailable.Retryable()
	fin := events.Event{
		Version: events.Version, EventID: uuid.NewString(), TS: time.Now().UTC(),
		Tenant: s.tenant, SessionID: s.id, Seq: s.seq + 1, Op: start.Op, Phase: events.PhaseFinish,
		CommandID: start.CommandID, SpanID: start.SpanID, ParentSpanID: start.ParentSpanID, TraceID: start.TraceID,
		Node: a.cfg.ID, Actor: start.Actor, PrevHash: s.lastHash, OK: &ok,
		ErrorCode: string(errcode.Unavailable), ErrorType: "errcode.Error", ErrorRetryable: &retry,
		ErrorMessage: "the node could not confirm this start was recorded and answered the command as failed; it did not run",
	}
	data, err := json.Marshal(&fin)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	seq, err := a.appendRetrying(ctx, s, &fin, data)
	if err != nil {
		return err
	}
	s.seq, s.lastStreamSeq, s.lastHash = fin.Seq, seq, events.Hash(data)
	return nil
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
