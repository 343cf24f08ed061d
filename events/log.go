package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/storage"
)

// Log appends events to, and reads them from, the events stream.
type Log struct {
	js       jetstream.JetStream
	stream   string
	subjects Subjects
	// signer signs appended events (nil: unsigned); see Signed.
	signer    Signer
	signerKey string
	// part is the one partition this log reads (Partition), or -1.
	part int
	// disc learns the deployment's partitions on first use (NewLog); nil
	// once they are known (OpenLog, WithPartitions).
	disc *discovery
}

// NewLog returns a Log on the named stream (DefaultStream when empty) with
// subjects under prefix (default sbx). It learns how many partitions the
// deployment has on its first use (see partition.go); until then, and on
// an unpartitioned deployment, it is the one stream.
func NewLog(js jetstream.JetStream, stream, prefix string) *Log {
	if stream == "" {
		stream = DefaultStream
	}
	return &Log{js: js, stream: stream, subjects: Subjects{Prefix: prefix}, part: -1, disc: &discovery{}}
}

// Subjects returns the log's subject builder: for as many partitions as
// the log knows of (a log of NewLog learns them on its first use; Read
// takes an unpartitioned filter on a partitioned log too).
func (l *Log) Subjects() Subjects {
	s := l.subjects
	if l.disc != nil {
		l.disc.mu.Lock()
		s.Partitions = max(s.Partitions, l.disc.n)
		l.disc.mu.Unlock()
	}
	return s
}

// Append publishes a session event, but only if the last event of its
// session in the stream has stream sequence expectLast (0: the session has
// no events yet). It returns the new event's stream sequence.
//
// A stale expectLast, meaning another writer appended first, is a
// concurrency_conflict error; a duplicate event id within the stream's
// dedup window returns the original sequence.
func (l *Log) Append(ctx context.Context, ev *Event, expectLast uint64) (uint64, error) {
	data, err := json.Marshal(ev)
	if err != nil {
		return 0, fmt.Errorf("encode event: %w", err)
	}
	return l.AppendRaw(ctx, ev, data, expectLast)
}

// AppendRaw is Append for an event already encoded as data (callers that
// post-process the JSON, such as redaction). ev supplies the subject and id.
func (l *Log) AppendRaw(ctx context.Context, ev *Event, data []byte, expectLast uint64) (uint64, error) {
	l, err := l.resolved(ctx)
	if err != nil {
		return 0, err
	}
	hdr, err := l.SignatureHeader(data)
	if err != nil {
		return 0, err
	}
	msg := &nats.Msg{Subject: l.subjects.Session(ev.Tenant, ev.SessionID, ev.Op, ev.Phase), Data: data, Header: hdr}
	ack, err := l.js.PublishMsg(ctx, msg,
		jetstream.WithMsgID(ev.EventID),
		jetstream.WithExpectLastSequenceForSubject(expectLast, l.subjects.SessionFilter(ev.Tenant, ev.SessionID)),
	)
	if err != nil {
		switch {
		case IsWrongLastSequence(err):
			return 0, errcode.Wrap(errcode.ConcurrencyConflict, err, fmt.Sprintf("session %s/%s has another writer", ev.Tenant, ev.SessionID))
		case errors.Is(err, nats.ErrMaxPayload):
			return 0, errcode.Wrap(errcode.PayloadTooLarge, err, fmt.Sprintf("the %s %s event encodes to %d bytes, over the server's message limit", ev.Op, ev.Phase, len(data)))
		}
		return 0, l.appendErr(ctx, l.streamOf(ev.Tenant, ev.SessionID), err, len(data), "append event")
	}
	return ack.Sequence, nil
}

// AppendNode publishes a node lifecycle event (no sequence guard).
func (l *Log) AppendNode(ctx context.Context, ev *NodeEvent) error {
	l, err := l.resolved(ctx)
	if err != nil {
		return err
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode node event: %w", err)
	}
	hdr, err := l.SignatureHeader(data)
	if err != nil {
		return err
	}
	msg := &nats.Msg{Subject: l.subjects.Node(ev.Node, ev.Kind), Data: data, Header: hdr}
	if _, err := l.js.PublishMsg(ctx, msg, jetstream.WithMsgID(ev.EventID)); err != nil {
		return l.appendErr(ctx, l.stream, err, len(data), "append node event")
	}
	return nil
}

// msgOverhead bounds what a stored event takes beside its data: subject,
// headers (event id, signature) and the store's record.
const msgOverhead = 1024

// appendErr is the error of a failed append of size bytes to stream:
// storage_quota_exceeded when the store or the stream is full (the stream
// only when its state shows the event does not fit: a server's write error
// has the same code), else unavailable.
func (l *Log) appendErr(ctx context.Context, stream string, err error, size int, what string) error {
	switch {
	case storage.StoreFull(err):
		return errcode.Wrap(errcode.StorageQuotaExceeded, err, "the JetStream store is full, so no event can be recorded: free space (engine snapshot rm) or give the server more (max_file_store)")
	case storage.StreamRefused(err):
		// A bound of its own: ctx may be what ran out.
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		s, ierr := l.js.Stream(ictx, stream)
		if ierr != nil {
			break
		}
		info := s.CachedInfo()
		if max := info.Config.MaxBytes; max > 0 && info.Config.Discard == jetstream.DiscardNew && info.State.Bytes+uint64(size)+msgOverhead >= uint64(max) {
			return errcode.Wrap(errcode.StorageQuotaExceeded, err, fmt.Sprintf("the events stream %s holds %d of its reserved %d bytes, so no event can be recorded: raise --events-max-bytes, or let it drop its oldest events (--events-drop-oldest)", stream, info.State.Bytes, max))
		}
	}
	return errcode.Wrap(errcode.Unavailable, err, what)
}

// IsWrongLastSequence reports whether err is JetStream's refusal of a
// publish whose expected last sequence was stale (10071 on R1 streams,
// 10071 or 10164 on replicated ones).
func IsWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// Tail is the last event of a session as stored.
type Tail struct {
	// Event is nil when the session has no events.
	Event *Event
	// StreamSeq is the event's sequence in the stream: the expected last
	// sequence for the session's next append.
	StreamSeq uint64
	// Hash is Hash of the event's stored bytes: the next event's PrevHash.
	Hash string
	// Signed reports whether the event carries a signature that verifies
	// (by any key: who may sign for which node is audit's question), and
	// Signer is the key that made it.
	Signed bool
	Signer string
}

// Last returns the last event of a session; a session with no events gives
// a zero Tail.
func (l *Log) Last(ctx context.Context, tenant, session string) (Tail, error) {
	l, err := l.resolved(ctx)
	if err != nil {
		return Tail{}, err
	}
	s, err := l.js.Stream(ctx, l.streamOf(tenant, session))
	if err != nil {
		return Tail{}, errcode.Wrap(errcode.Unavailable, err, "events stream")
	}
	msg, err := s.GetLastMsgForSubject(ctx, l.subjects.SessionFilter(tenant, session))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Tail{}, nil
	}
	if err != nil {
		return Tail{}, errcode.Wrap(errcode.Unavailable, err, "last event")
	}
	return tailOf(&StoredMsg{Subject: msg.Subject, Seq: msg.Sequence, Data: msg.Data}, msg.Header)
}

// LastFromLeader is Last as the leader of the session's stream has it (see
// LeaderGet): what the next append's expected last sequence is checked
// against. Last may be answered by a follower a few events behind; an
// append refused for its expected last sequence reads the tail so.
func (l *Log) LastFromLeader(ctx context.Context, tenant, session string) (Tail, error) {
	l, err := l.resolved(ctx)
	if err != nil {
		return Tail{}, err
	}
	m, err := LeaderGet(ctx, l.js, l.streamOf(tenant, session), map[string]any{"last_by_subj": l.subjects.SessionFilter(tenant, session)})
	if err != nil {
		return Tail{}, errcode.Wrap(errcode.Unavailable, err, "last event, from the stream's leader")
	}
	if m == nil {
		return Tail{}, nil
	}
	return tailOf(m, nil)
}

// Msg is an event as read from the stream.
type Msg struct {
	// StreamSeq is the event's sequence in the stream.
	StreamSeq uint64
	// Stream is the stream (the partition) that holds the event: a
	// sequence is unique within one stream only.
	Stream  string
	Subject string
	// Data is the event's JSON, as stored.
	Data []byte
	// Time is when the stream stored the event.
	Time time.Time
	// Signer and Sig are the event's signature headers (SignerHeader,
	// SigHeader); empty for an unsigned event.
	Signer, Sig string
}

// VerifySignature checks the message's signature over its data; see the
// package function.
func (m Msg) VerifySignature() error { return VerifySignature(m.Signer, m.Sig, m.Data) }

// Decode decodes the message as a session event and checks its version.
func (m Msg) Decode() (Event, error) {
	ev, err := Parse(m.Data)
	if err != nil {
		return ev, fmt.Errorf("decode event at stream seq %d: %w", m.StreamSeq, err)
	}
	return ev, nil
}

// ReadOptions select what Read delivers.
type ReadOptions struct {
	// Filters are subject filters (default: every session event).
	Filters []string
	// StartSeq starts at this stream sequence (default: the first).
	StartSeq uint64
	// StartTime starts at the first event at or after this time.
	StartTime time.Time
	// After resumes a read: for each stream named (Msg.Stream), it starts
	// after that sequence, the last one delivered, whatever StartSeq and
	// StartTime say; a stream not named starts as they say. A read across
	// partitions that a passing fault cut short goes on this way from
	// where each partition was.
	After map[string]uint64
	// Follow keeps delivering new events until ctx ends; otherwise Read
	// returns once it has delivered what the stream held when it began.
	Follow bool
	// Consumer, when set, reads through a consumer of this name (created
	// for the read, deleted after) instead of an ordered consumer with a
	// generated name: an auditor's permissions allow only its own name.
	// It takes exactly one filter.
	Consumer string
	// Provision, when set, makes the named consumer instead of a consumer
	// create of the reader's own: an auditor may create no consumer (its
	// request could name a deliver subject), so the engine makes it.
	Provision Provisioner
}

// ConsumerSpec is a named pull consumer a reader asks for: what it reads
// and from where. Durable consumers acknowledge explicitly and stay;
// others acknowledge nothing and go by themselves once idle.
type ConsumerSpec struct {
	// Stream is the partition's stream the consumer is on (empty: the
	// first, the only one of an unpartitioned log).
	Stream    string
	Name      string
	Filter    string
	StartSeq  uint64
	StartTime time.Time
	Durable   bool
}

// Provisioner makes (or updates) the consumer spec names on the events
// stream; its errors carry errcode codes.
type Provisioner func(ctx context.Context, spec ConsumerSpec) error

// ConsumerConfig is the pull consumer a spec names: no deliver subject,
// whoever makes it.
func (c ConsumerSpec) ConsumerConfig() jetstream.ConsumerConfig {
	cfg := jetstream.ConsumerConfig{Name: c.Name, FilterSubject: c.Filter, AckPolicy: jetstream.AckNonePolicy}
	switch {
	case c.StartSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, c.StartSeq
	case !c.StartTime.IsZero():
		t := c.StartTime
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	}
	if c.Durable {
		cfg.Durable, cfg.AckPolicy, cfg.Description = c.Name, jetstream.AckExplicitPolicy, "Paddock audit consumer"
	} else {
		cfg.InactiveThreshold = time.Minute // a killed reader's consumer goes by itself
	}
	return cfg
}

// namedConsumer makes spec's consumer on the stream: through provision
// when set, else with a consumer create of its own.
func (l *Log) namedConsumer(ctx context.Context, stream string, provision Provisioner, spec ConsumerSpec) (jetstream.Consumer, error) {
	if stream != l.stream {
		spec.Stream = stream
	}
	if provision == nil {
		return l.js.CreateOrUpdateConsumer(ctx, stream, spec.ConsumerConfig())
	}
	if err := provision(ctx, spec); err != nil {
		return nil, err
	}
	return l.js.Consumer(ctx, stream, spec.Name)
}

// Read delivers events in stream order to fn through an ordered consumer.
// It stops at the first error fn returns, and returns it. On a log over
// several partitions it reads every partition a filter can match (see
// readPartitions): in order within each partition, so within each session.
func (l *Log) Read(ctx context.Context, opts ReadOptions, fn func(Msg) error) error {
	l, err := l.resolved(ctx)
	if err != nil {
		return err
	}
	stream := l.readStream()
	if stream == "" {
		return l.readPartitions(ctx, opts, fn)
	}
	if l.Partitions() > 1 && len(opts.Filters) > 0 {
		// One partition of several: the filters as they apply to it.
		opts.Filters = l.subjects.partitionFilters(opts.Filters)[l.part]
		if len(opts.Filters) == 0 {
			return nil // none matches in this partition
		}
	}
	if seq, ok := opts.After[stream]; ok {
		opts.StartSeq, opts.StartTime = seq+1, time.Time{}
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: opts.Filters}
	if len(cfg.FilterSubjects) == 0 {
		cfg.FilterSubjects = []string{l.subjects.PartitionSessions(max(l.part, 0))}
	}
	switch {
	case opts.StartSeq > 0:
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = opts.StartSeq
	case !opts.StartTime.IsZero():
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		t := opts.StartTime
		cfg.OptStartTime = &t
	}
	var cons jetstream.Consumer
	if opts.Consumer != "" {
		if len(cfg.FilterSubjects) != 1 {
			return errcode.New(errcode.InvalidRequest, "a named events consumer takes one filter, not %d", len(cfg.FilterSubjects))
		}
		cons, err = l.namedConsumer(ctx, stream, opts.Provision, ConsumerSpec{
			Name: opts.Consumer, Filter: cfg.FilterSubjects[0], StartSeq: opts.StartSeq, StartTime: opts.StartTime,
		})
		var coded *errcode.Error
		if errors.As(err, &coded) {
			return err // the engine's answer to a provisioning request
		}
		if err == nil {
			defer func() {
				// The read is over, whatever ctx says: delete with a bound of its own.
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				_ = l.js.DeleteConsumer(dctx, stream, opts.Consumer)
			}()
		}
	} else {
		// A reader killed before it deletes its consumer leaves it for the
		// server to drop a minute later (nats.go's default is five).
		cfg.InactiveThreshold = time.Minute
		cons, err = l.js.OrderedConsumer(ctx, stream, cfg)
		if err == nil {
			// nats.go leaves an ordered consumer on the server when its
			// reader stops; a caller reading in a loop would fill the
			// stream's consumer limit. Delete the one in use at the end
			// (one a reset replaced, nats.go deletes itself).
			defer func() {
				info := cons.CachedInfo()
				if info == nil {
					return
				}
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				_ = l.js.DeleteConsumer(dctx, stream, info.Name)
			}()
		}
	}
	if err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "events consumer")
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "events consumer info")
	}
	if !opts.Follow && info.NumPending == 0 {
		return nil
	}
	return deliver(ctx, cons, opts.Follow, false, fn)
}

// ReadStallTimeout is the longest a read of what the stream holds (not a
// follow) waits for its next event before it gives up with
// ErrReadStalled.
const ReadStallTimeout = 10 * time.Second

// ErrReadStalled is a read that got no event for ReadStallTimeout while
// events were pending: the consumer could not be (re)created, as on a
// cluster that is settling. Reading again may succeed.
var ErrReadStalled = errors.New("events: no event arrived while some were pending")

// deliver hands cons's messages to fn until ctx ends, fn fails, or (unless
// follow) nothing more is pending; with ack it acknowledges each message
// fn accepted.
func deliver(ctx context.Context, cons jetstream.Consumer, follow, ack bool, fn func(Msg) error) error {
	it, err := cons.Messages()
	if err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "events consumer")
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	// A read of what is there must end: a consumer that delivers nothing
	// while events are pending (an ordered consumer resetting for ever on
	// a cluster that is settling) is a stalled read, which the caller may
	// try again.
	var stalled atomic.Bool
	var watchdog *time.Timer
	if !follow {
		watchdog = time.AfterFunc(ReadStallTimeout, func() { stalled.Store(true); it.Stop() })
		defer watchdog.Stop()
	}
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if stalled.Load() {
				return errcode.Wrap(errcode.Unavailable, ErrReadStalled, "read events")
			}
			return errcode.Wrap(errcode.Unavailable, err, "read events")
		}
		if watchdog != nil {
			watchdog.Reset(ReadStallTimeout)
		}
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("event metadata: %w", err)
		}
		h := m.Headers()
		if err := fn(Msg{StreamSeq: meta.Sequence.Stream, Stream: meta.Stream, Subject: m.Subject(), Data: m.Data(), Time: meta.Timestamp, Signer: h.Get(SignerHeader), Sig: h.Get(SigHeader)}); err != nil {
			return err
		}
		if ack {
			if err := m.Ack(); err != nil {
				return errcode.Wrap(errcode.Unavailable, err, "ack event")
			}
		}
		if !follow && meta.NumPending == 0 {
			return nil
		}
	}
}

// Session returns every event of one session, in order.
func (l *Log) Session(ctx context.Context, tenant, session string) ([]Event, error) {
	var out []Event
	err := l.Read(ctx, ReadOptions{Filters: []string{l.subjects.SessionFilter(tenant, session)}}, func(m Msg) error {
		ev, err := m.Decode()
		if err != nil {
			return err
		}
		out = append(out, ev)
		return nil
	})
	return out, err
}
