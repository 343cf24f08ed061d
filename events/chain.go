package events

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/errcode"
)

// A session's history is one hash chain with one writer at a time. Chain
// is that writer's side of it: every event it appends gets the next seq
// and the previous event's hash, and is appended only if the session's
// last event is still the one the chain knows (the expected last stream
// sequence: fencing). The writer is a node serving the session, or an
// engine closing the history of a session no node serves.
//
//	Append ─► seq, prev_hash, encode ─► AppendRaw(expect last)
//	             ▲                          │
//	             │     unknown outcome ◄────┤ (resent until Patience)
//	             │                          │ conflict: read the tail
//	             ├── this very event ───────┤ (its ack was lost): done
//	             ├── own unconfirmed event ─┤ take it up (close a start)
//	             ├── forged / unsigned ─────┤ chain past it (logged)
//	             └── another writer, signed ─► *TakenOverError

// Position is where a session's chain stands: its last event's session
// seq, stream sequence and hash (the zero Position: no events yet).
type Position struct {
	// Seq is the session seq of the last event.
	Seq uint64
	// StreamSeq is its sequence in the stream: the expected last sequence
	// of the next append.
	StreamSeq uint64
	// Hash is Hash of its stored bytes: the next event's PrevHash.
	Hash string
}

// Position returns where the chain stands after t (the zero Position for
// a session with no events).
func (t Tail) Position() Position {
	if t.Event == nil {
		return Position{}
	}
	return Position{Seq: t.Event.Seq, StreamSeq: t.StreamSeq, Hash: t.Hash}
}

// ChainConfig is a chain writer's policy.
type ChainConfig struct {
	// Patience is how long an append whose outcome is unknown
	// (unavailable: no ack, a leader lost, a timeout) is sent again before
	// it fails; 0 sends it once.
	Patience time.Duration
	// Attempt bounds one attempt of an append (default
	// DefaultAppendAttempt).
	Attempt time.Duration
	// Prepare, when set, runs on every event the caller appends, after its
	// seq and prev_hash are set and before it is encoded (redaction).
	Prepare func(*Event)
	// Logger receives the events the chain takes up or chains past
	// (default: none).
	Logger *slog.Logger
	// ConflictsStand makes every refusal of an append the caller's to
	// handle: the chain neither takes up an event it finds at the end as
	// its own nor chains past one. An engine writes so: several engines
	// share one identity and key, so an event "of this writer" may be
	// another engine's, and the engine reads the history again instead.
	ConflictsStand bool
}

// DefaultAppendAttempt bounds one attempt of an append: a leader that went
// away with the request is given up on quickly, and the next attempt
// reaches the new one.
const DefaultAppendAttempt = 2 * time.Second

// maxForged is how many events the chain chains past in one append before
// the conflict stands.
const maxForged = 3

// Chain appends the events of one session as its writer. It is safe for
// concurrent use: appends are serialised.
type Chain struct {
	log             *Log
	tenant, session string
	writer          string // recorded as the events' node; with log's key, what makes an event the chain's own
	cfg             ChainConfig

	// mu serialises appends and is held across one (its I/O included):
	// the position it guards must not move while an append is in flight.
	mu sync.Mutex
	at Position
}

// NewChain returns the chain of tenant/session written by writer (a node
// id or an engine name) with log's signing key, continuing after at.
func NewChain(log *Log, tenant, session, writer string, at Position, cfg ChainConfig) *Chain {
	if cfg.Attempt <= 0 {
		cfg.Attempt = DefaultAppendAttempt
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Chain{log: log, tenant: tenant, session: session, writer: writer, cfg: cfg, at: at}
}

// Position returns where the chain stands.
func (c *Chain) Position() Position {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

// Seq returns the session seq of the last event.
func (c *Chain) Seq() uint64 { return c.Position().Seq }

// MoveTo makes the chain continue after p (a history taken up again).
func (c *Chain) MoveTo(p Position) {
	c.mu.Lock()
	c.at = p
	c.mu.Unlock()
}

// TakenOverError is an append refused because another writer's signed
// event follows the chain's last one: that writer owns the session's
// history now, and nothing this writer appends is recorded. It wraps the
// concurrency_conflict error of the refused append.
type TakenOverError struct {
	// Tail is the session's last event: the other writer's.
	Tail Tail
	// Err is the refusal.
	Err error
}

func (e *TakenOverError) Error() string {
	return fmt.Sprintf("session %s/%s taken over by %q (%s %s, seq %d): %v",
		e.Tail.Event.Tenant, e.Tail.Event.SessionID, e.Tail.Event.Node, e.Tail.Event.Op, e.Tail.Event.Phase, e.Tail.Event.Seq, e.Err)
}

func (e *TakenOverError) Unwrap() error { return e.Err }

// Append appends ev as the session's next event. It sets what ev leaves
// empty of the chain's identity (version, tenant, session, node as the
// writer, a new event id, the time) and always its seq and prev_hash.
//
// An append whose outcome is unknown is sent again until Patience has
// passed (the event id makes the server drop a copy it stored; the
// expected last sequence refuses a second append after it). When the
// session has another event at its end, Append looks at it: this very
// event (an earlier attempt's ack was lost) is success; an event of this
// writer it counted as not appended is taken into the chain, and closed
// with a failed finish when it opened an operation; an event nobody
// signed, or one that claims this writer without its key, is forged and
// chained past (at most three times). A signed event of another writer
// fails with *TakenOverError. Other failures carry errcode codes
// (concurrency_conflict, unavailable, payload_too_large, ...); the chain
// stays where it was.
func (c *Chain) Append(ctx context.Context, ev *Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stamp(ev)
	ev.Seq = c.at.Seq + 1
	ev.PrevHash = c.at.Hash
	if c.cfg.Prepare != nil {
		c.cfg.Prepare(ev)
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	var seq uint64
	for skipped := 0; ; skipped++ {
		seq, err = c.appendRetrying(ctx, ev, data)
		if err == nil || errcode.Of(err) != errcode.ConcurrencyConflict || skipped == maxForged || c.cfg.ConflictsStand {
			break
		}
		// Someone else appended to the session. Another writer's signed
		// event means that writer owns the session now: the conflict
		// stands. An event nobody signed, or one that claims this writer
		// but is not signed with its key, was forged by someone with
		// stream rights: chain past it, so that it cannot stall the
		// session, and leave it to audit verify, which names it.
		// Read from the leader: it refused the append, and a follower
		// a few events behind (Last may be answered by one) would show
		// this writer's own last events as not there.
		tail, terr := c.log.LastFromLeader(ctx, c.tenant, c.session)
		if terr != nil || tail.Event == nil {
			break
		}
		if tail.StreamSeq == c.at.StreamSeq {
			// The end is where the chain stands after all: what was
			// refused was in flight (another writer's append, not yet
			// stored) or the refusing leader's, since replaced. Send it
			// again: a second refusal finds what is there then.
			continue
		}
		own := tail.Signed && tail.Signer == c.log.SigningKey() && tail.Event.Node == c.writer
		if own && tail.Event.EventID == ev.EventID {
			// This very event landed; an earlier attempt's ack was lost.
			seq, err = tail.StreamSeq, nil
			break
		}
		if own {
			// An event of this writer that it counted as not appended
			// (its outcome stayed unknown past Patience): take it into
			// the chain, and close it if it opened an operation, which
			// never ran.
			c.cfg.Logger.Warn("an event this writer could not confirm is in the session's history; taking it up", "tenant", c.tenant, "session", c.session, "seq", tail.Event.Seq, "op", tail.Event.Op, "phase", tail.Event.Phase)
			c.at = tail.Position()
			if tail.Event.Phase == PhaseStart {
				if ferr := c.closeUnconfirmed(ctx, *tail.Event); ferr != nil {
					err = ferr
					break
				}
			}
			ev.Seq, ev.PrevHash = c.at.Seq+1, c.at.Hash
			if data, err = json.Marshal(ev); err != nil {
				return fmt.Errorf("encode event: %w", err)
			}
			continue
		}
		forged := !tail.Signed || tail.Event.Node == c.writer && tail.Signer != c.log.SigningKey()
		if !forged {
			// Another writer's signed event: an engine that declared a
			// node lost, or a node that resumed the session. That writer
			// owns the session's history now (fencing: this append is
			// refused, so nothing the caller would run is recorded).
			err = &TakenOverError{Tail: tail, Err: err}
			break
		}
		c.cfg.Logger.Warn("an event this writer did not write, in the session's history; chaining past it (audit verify names it)",
			"tenant", c.tenant, "session", c.session, "seq", tail.Event.Seq, "stream_seq", tail.StreamSeq, "signer", tail.Signer)
		ev.Seq = max(c.at.Seq, tail.Event.Seq) + 1
		ev.PrevHash = tail.Hash
		c.at = Position{Seq: ev.Seq - 1, StreamSeq: tail.StreamSeq, Hash: tail.Hash}
		if data, err = json.Marshal(ev); err != nil {
			return fmt.Errorf("encode event: %w", err)
		}
	}
	if err != nil {
		return err
	}
	c.at = Position{Seq: ev.Seq, StreamSeq: seq, Hash: Hash(data)}
	return nil
}

// stamp sets what ev leaves empty of the chain's identity. c.mu is held.
func (c *Chain) stamp(ev *Event) {
	if ev.Version == 0 {
		ev.Version = Version
	}
	if ev.EventID == "" {
		ev.EventID = uuid.NewString()
	}
	if ev.TS.IsZero() {
		ev.TS = time.Now().UTC()
	}
	if ev.Tenant == "" {
		ev.Tenant = c.tenant
	}
	if ev.SessionID == "" {
		ev.SessionID = c.session
	}
	if ev.Node == "" {
		ev.Node = c.writer
	}
}

// appendRetrying appends data after the chain's last event, sending it
// again while the outcome is unknown, each attempt bounded, until Patience
// has passed: a start whose outcome stays unknown would leave its command
// unanswerable, and a finish must not be lost to a passing fault. c.mu is
// held.
func (c *Chain) appendRetrying(ctx context.Context, ev *Event, data []byte) (uint64, error) {
	giveUp := time.Now().Add(c.cfg.Patience)
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, c.cfg.Attempt)
		seq, err := c.log.AppendRaw(actx, ev, data, c.at.StreamSeq)
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

// closeUnconfirmed appends a failed finish for a start of this writer it
// could not confirm it had appended, and answered as failed: the
// operation never ran. c.mu is held and c.at is the start.
func (c *Chain) closeUnconfirmed(ctx context.Context, start Event) error {
	ok, retry := false, errcode.Unavailable.Retryable()
	fin := Event{
		Version: Version, EventID: uuid.NewString(), TS: time.Now().UTC(),
		Tenant: c.tenant, SessionID: c.session, Seq: c.at.Seq + 1, Op: start.Op, Phase: PhaseFinish,
		CommandID: start.CommandID, SpanID: start.SpanID, ParentSpanID: start.ParentSpanID, TraceID: start.TraceID,
		Node: c.writer, Actor: start.Actor, PrevHash: c.at.Hash, OK: &ok,
		ErrorCode: string(errcode.Unavailable), ErrorType: "errcode.Error", ErrorRetryable: &retry,
		ErrorMessage: "the node could not confirm this start was recorded and answered the command as failed; it did not run",
	}
	data, err := json.Marshal(&fin)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	seq, err := c.appendRetrying(ctx, &fin, data)
	if err != nil {
		return err
	}
	c.at = Position{Seq: fin.Seq, StreamSeq: seq, Hash: Hash(data)}
	return nil
}
