package nodes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/projection"
)

// maxRemembered bounds the per-session memory of command results.
const maxRemembered = 1024

// session is one session the agent owns.
type session struct {
	tenant  string
	id      string
	runtime string
	root    string // workspace root as the sandbox sees it
	redact  redactor
	// ephemeral lists the manifest's ephemeral paths (clean, relative):
	// persist leaves them out. Set before the session is served.
	ephemeral []string

	sub *nats.Subscription // set once, before the session is served

	// appendMu serialises event appends; it guards seq, lastStreamSeq and
	// lastHash.
	appendMu      sync.Mutex
	seq           uint64
	lastStreamSeq uint64
	lastHash      string // events.Hash of the last event's stored bytes

	mu       sync.Mutex // guards the fields below
	sb       runtime.Sandbox
	spec     runtime.Spec       // as the sandbox was created (secret values included; never recorded)
	epoch    uint64             // the placement's epoch
	lastSnap *commands.Snapshot // the newest workspace snapshot, nil before the first
	status   projection.Status
	results  map[string]*cmdResult // by command id
	order    []string              // command ids, oldest first
}

// cmdResult is the reply to a command id, remembered so that a retry gets
// the first result instead of running the command again.
type cmdResult struct {
	done  chan struct{}
	reply []byte
}

// remember returns the result slot for id and whether it already existed.
func (s *session) remember(id string) (*cmdResult, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.results[id]; ok {
		return r, true
	}
	r := &cmdResult{done: make(chan struct{})}
	s.results[id] = r
	s.order = append(s.order, id)
	if len(s.order) > maxRemembered {
		delete(s.results, s.order[0])
		s.order = s.order[1:]
	}
	return r, false
}

func (s *session) getStatus() projection.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

func (s *session) setStatus(st projection.Status) {
	s.mu.Lock()
	s.status = st
	s.mu.Unlock()
}

func (s *session) snapshot() *commands.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastSnap
}

func (s *session) setSnapshot(snap *commands.Snapshot) {
	s.mu.Lock()
	s.lastSnap = snap
	s.mu.Unlock()
}

func (s *session) getEpoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

func (s *session) sandbox() runtime.Sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sb
}

// redactor replaces secret values wherever they might appear.
type redactor struct {
	secrets [][]byte
	json    [][]byte // each secret as it appears inside a JSON string
}

const redacted = "[REDACTED]"

func newRedactor(secretEnv map[string]string) redactor {
	var r redactor
	for _, v := range secretEnv {
		if v == "" {
			continue
		}
		r.secrets = append(r.secrets, []byte(v))
		q, _ := json.Marshal(v)
		r.json = append(r.json, q[1:len(q)-1])
	}
	return r
}

func (r redactor) bytes(b []byte) []byte {
	for _, s := range r.secrets {
		if bytes.Contains(b, s) {
			b = bytes.ReplaceAll(b, s, []byte(redacted))
		}
	}
	return b
}

func (r redactor) string(s string) string {
	if len(r.secrets) == 0 {
		return s
	}
	return string(r.bytes([]byte(s)))
}

func (r redactor) encoded(b []byte) []byte {
	for _, s := range r.json {
		if bytes.Contains(b, s) {
			b = bytes.ReplaceAll(b, s, []byte(redacted))
		}
	}
	return b
}

// outcome is what an op reports for its finish event and reply.
type outcome struct {
	result   any    // the reply's result
	data     any    // the finish event's data
	exitCode *int   // exec only
	stdout   []byte // exec only: kept output, already redacted
	stderr   []byte //
	outTrunc bool   //
	errTrunc bool   //
	after    func() // runs after the finish event, before the reply
}

// appendEvent appends one event of s under its append lock, assigning seq.
func (a *Agent) appendEvent(ctx context.Context, s *session, ev *events.Event) error {
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	ev.Seq = s.seq + 1
	ev.PrevHash = s.lastHash
	data, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	data = s.redact.encoded(data)
	var seq uint64
	// A finish must not be lost to a passing fault: retry what is retryable
	// within a bound. The event id makes a retried publish idempotent.
	for attempt := 0; ; attempt++ {
		seq, err = a.log.AppendRaw(ctx, ev, data, s.lastStreamSeq)
		if err == nil || errcode.Of(err) != errcode.Unavailable || attempt == 4 || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(50<<attempt) * time.Millisecond):
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

// run executes one operation on s: it appends the start event, runs fn,
// appends the finish event and answers m. A command id seen before gets the
// first reply without running anything.
func (a *Agent) run(ctx context.Context, m *nats.Msg, s *session, req commands.Request, op commands.Op, startData any, fn func(ctx context.Context) (outcome, error)) {
	var slot *cmdResult
	if req.CommandID != "" {
		r, seen := s.remember(req.CommandID)
		if seen {
			select {
			case <-r.done:
				a.respond(m, r.reply)
			case <-ctx.Done():
				a.respond(m, commands.ErrorReply(errcode.New(errcode.Unavailable, "node %s is shutting down", a.cfg.ID)))
			}
			return
		}
		slot = r
	}
	reply := a.execute(ctx, s, req, op, startData, fn)
	if slot != nil {
		slot.reply = reply
		close(slot.done)
	}
	a.respond(m, reply)
}

func (a *Agent) execute(ctx context.Context, s *session, req commands.Request, op commands.Op, startData any, fn func(ctx context.Context) (outcome, error)) []byte {
	spanID := newSpanID()
	base := events.Event{
		Version: events.Version, Tenant: s.tenant, SessionID: s.id, Op: string(op),
		CommandID: req.CommandID, SpanID: spanID, ParentSpanID: req.ParentSpanID,
		TraceID: req.TraceID, Node: a.cfg.ID, Actor: req.Actor,
	}
	start := base
	start.EventID = uuid.NewString()
	start.TS = time.Now().UTC()
	start.Phase = events.PhaseStart
	start.Data = mustJSON(startData)
	if err := a.appendEvent(ctx, s, &start); err != nil {
		if op == commands.OpCreate && errcode.Of(err) == errcode.ConcurrencyConflict {
			return commands.ErrorReply(errcode.New(errcode.AlreadyExists, "session %s already exists", s.id))
		}
		return commands.ErrorReply(err)
	}

	began := time.Now()
	out, opErr := fn(context.WithValue(ctx, startSeqKey{}, start.Seq))
	dur := float64(time.Since(began).Microseconds()) / 1000

	fin := base
	fin.EventID = uuid.NewString()
	fin.TS = time.Now().UTC()
	fin.Phase = events.PhaseFinish
	fin.DurationMS = &dur
	ok := opErr == nil
	fin.OK = &ok
	if opErr != nil {
		var e *errcode.Error
		if !errors.As(opErr, &e) {
			e = &errcode.Error{Code: errcode.Internal, Message: opErr.Error()}
		}
		msg := s.redact.string(e.Message)
		opErr = &errcode.Error{Code: e.Code, Message: msg}
		retry := e.Code.Retryable()
		fin.ErrorCode, fin.ErrorType, fin.ErrorMessage, fin.ErrorRetryable = string(e.Code), "errcode.Error", msg, &retry
	} else {
		fin.Data = mustJSON(out.data)
		fin.ExitCode = out.exitCode
		if a.cfg.Capture.Limit > 0 {
			fin.Stdout, fin.StdoutTruncated = capture(out.stdout, out.outTrunc, a.cfg.Capture.Limit)
			fin.Stderr, fin.StderrTruncated = capture(out.stderr, out.errTrunc, a.cfg.Capture.Limit)
		}
	}
	// The finish is appended even when the agent is being cancelled: an
	// operation that ran must be recorded as ended.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := a.appendEvent(fctx, s, &fin); err != nil {
		a.logger.Error("finish event not recorded", "tenant", s.tenant, "session", s.id, "op", op, "err", err)
		return commands.ErrorReply(errcode.Wrap(errcode.Of(err), err, "operation ran but its finish event was not recorded"))
	}
	if out.after != nil {
		out.after()
	}
	if opErr != nil {
		return commands.ErrorReply(opErr)
	}
	b, err := commands.ResultReply(out.result)
	if err != nil {
		return commands.ErrorReply(err)
	}
	return b
}

// startSeqKey carries the seq of an operation's start event to the
// operation (persist records it with the snapshot).
type startSeqKey struct{}

// startSeq returns the seq of the running operation's start event.
func startSeq(ctx context.Context) uint64 {
	seq, _ := ctx.Value(startSeqKey{}).(uint64)
	return seq
}

func capture(b []byte, truncated bool, limit int) (string, bool) {
	if len(b) > limit {
		return string(b[:limit]), true
	}
	return string(b), truncated
}

func mustJSON(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

func newSpanID() string {
	u := uuid.New()
	return fmt.Sprintf("%x", u[:8])
}
