package projector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
)

// Checkpoint is a projector's progress, as stored under CheckpointKey: every
// event up to StreamSeq has been taken into the buckets.
type Checkpoint struct {
	StreamSeq uint64    `json:"stream_seq"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Stats are a projector's counters since it started.
type Stats struct {
	// Taken counts events taken into a record: applied, or recorded as a
	// problem. Problems counts the latter.
	Taken    uint64
	Problems uint64
	// Skipped counts events delivered again that were taken already.
	Skipped uint64
	// Position is the stream sequence of the last event handled; every
	// event before it was handled too. Checkpoint is the last one stored.
	Position   uint64
	Checkpoint uint64
}

// Projector folds the events stream into the projection's buckets. Start
// it, then Close it.
type Projector struct {
	js     jetstream.JetStream
	cfg    Config
	logger *slog.Logger
	subj   events.Subjects

	buckets  Buckets
	sessions *table[projection.SessionRecord]
	nodes    *table[projection.NodeRecord]
	stray    *table[projection.Ledger]

	in chan delivery // reader → run loop

	// gen counts the iterators subscribe installed; a delivery of an older
	// one is dropped (the consumer was reset and delivers it again).
	gen atomic.Uint64
	// resetAt is the stream sequence the consumer was last reset to
	// because of a gap, and resets how many times in a row it was reset
	// there (run loop only): each reset at the same place waits longer.
	resetAt, resets uint64

	// quit stops taking new events; work bounds the writes of the events
	// taken (Close cancels it only when its own bound runs out).
	quit, work   context.Context
	stop, abort  context.CancelFunc
	wg           sync.WaitGroup // main (setup, then the run loop) and the reader
	ready        atomic.Bool    // set up and projecting
	lastSaved    time.Time      // main only (then Close, after it ended)
	position     atomic.Uint64
	checkpoint   atomic.Uint64
	taken, skips atomic.Uint64
	problems     atomic.Uint64

	// subMu serialises subscribe: the run loop's reset after a gap, and
	// the reader's subscribe when its consumer went away (as the reset's
	// delete makes it do). Two at once would pull from the one consumer
	// on two iterators and lose what the stopped one was sent.
	subMu sync.Mutex

	mu      sync.Mutex // guards the fields below
	it      jetstream.MessagesContext
	started bool
	closed  bool
}

// New returns a projector that reads the events stream through js. It fails
// on an invalid config.
func New(js jetstream.JetStream, cfg Config, logger *slog.Logger) (*Projector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	return &Projector{
		js: js, cfg: cfg, logger: logger.With("component", "projector", "name", cfg.Name),
		subj: events.Subjects{Prefix: cfg.Prefix, Partitions: cfg.Partitions},
		in:   make(chan delivery, cfg.Batch),
	}, nil
}

// Start starts the projector and returns: it sets itself up in the
// background (ensures the buckets, reads its checkpoint, points the durable
// consumer at the event after it), retrying until the events stream and
// the buckets can be reached, then projects until Close. Lag fails until
// the setup is done. Start fails only when called twice.
func (p *Projector) Start(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started || p.closed {
		return errors.New("projector: already started")
	}
	p.started = true
	// The loops outlive Start's ctx: Close ends them.
	p.quit, p.stop = context.WithCancel(context.Background())
	p.work, p.abort = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.main()
	return nil
}

// main sets up, then runs the reader and the run loop until quit.
func (p *Projector) main() {
	defer p.wg.Done()
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(p.quit, 10*time.Second)
		err := p.setup(ctx)
		cancel()
		if err == nil {
			break
		}
		if p.quit.Err() != nil {
			return
		}
		if attempt == 1 || attempt%20 == 0 {
			p.logger.Warn("projector setup failed, will retry", "attempt", attempt, "err", err)
		}
		if !p.pause(attempt) {
			return
		}
	}
	p.lastSaved = time.Now()
	p.ready.Store(true)
	p.logger.Info("projector started", "checkpoint", p.checkpoint.Load())
	p.wg.Add(1)
	go p.read()
	p.run()
}

// setup ensures the buckets, reads the checkpoint and subscribes.
func (p *Projector) setup(ctx context.Context) error {
	b, err := EnsureBuckets(ctx, p.js, p.cfg)
	if err != nil {
		return err
	}
	cp, err := ReadCheckpoint(ctx, b.State, p.cfg.Name)
	if err != nil {
		return err
	}
	s, err := p.js.Stream(ctx, p.cfg.Stream)
	if err != nil {
		return fmt.Errorf("events stream %s: %w", p.cfg.Stream, err)
	}
	last := s.CachedInfo().State.LastSeq
	if cp.StreamSeq > last {
		p.logger.Error("the checkpoint is past the end of the events stream: was the stream recreated? delete the projection's buckets to rebuild them", "checkpoint", cp.StreamSeq, "stream_last", last)
	}
	if p.cfg.Resume {
		if cp, err = p.furthest(ctx, b.State, cp, last); err != nil {
			return err
		}
	}
	p.buckets = b
	p.sessions = newTable(b.Sessions, projection.SessionRecord.Take, func(r *projection.SessionRecord) *projection.Ledger { return &r.Ledger })
	p.nodes = newTable(b.Nodes, projection.NodeRecord.Take, func(r *projection.NodeRecord) *projection.Ledger { return &r.Ledger })
	p.stray = newTable(b.State, projection.Ledger.Take, func(l *projection.Ledger) *projection.Ledger { return l })
	p.position.Store(cp.StreamSeq)
	p.checkpoint.Store(cp.StreamSeq)
	return p.subscribe(ctx)
}

// furthest is the furthest checkpoint of the projectors of this one's
// partition that is past own and not past last, the stream's end (own
// when there is none).
func (p *Projector) furthest(ctx context.Context, state jetstream.KeyValue, own Checkpoint, last uint64) (Checkpoint, error) {
	cps, err := ReadAll[Checkpoint](ctx, state, CheckpointKey("*"))
	if err != nil {
		return own, fmt.Errorf("projector: read the checkpoints: %w", err)
	}
	best, from := own, p.cfg.Name
	for key, cp := range cps {
		name := strings.TrimPrefix(key, CheckpointKey(""))
		if NamePartition(name) == NamePartition(p.cfg.Name) && cp.StreamSeq > best.StreamSeq && cp.StreamSeq <= last {
			best, from = cp, name
		}
	}
	if from != p.cfg.Name {
		p.logger.Info("resuming from another projector's checkpoint of the partition", "from", from, "checkpoint", best.StreamSeq, "own", own.StreamSeq)
	}
	return best, nil
}

// subscribe creates or updates the durable consumer, resets it to the
// event after the position (dropping whatever an earlier process was
// delivered and never acknowledged, so that it comes again in order), and
// installs a new message iterator.
func (p *Projector) subscribe(ctx context.Context) error {
	cfg := jetstream.ConsumerConfig{
		Durable:       p.cfg.Name,
		Description:   "Paddock projector: SBX_EVENTS into sbx_sessions and sbx_nodes",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 8 * p.cfg.Batch,
		// No subject filter: the stream holds session and node events only
		// (<prefix>.evt.> and <prefix>.nodeevt.>), and a consumer with
		// wildcard filters costs the server a subject-tree walk per message
		// (measured: several times slower on a stream of 100k sessions).
		// Anything else found there is recorded as stray.
	}
	cons, err := p.js.CreateOrUpdateConsumer(ctx, p.cfg.Stream, cfg)
	if err != nil {
		// A consumer of that name with settings that cannot be updated
		// (another deliver policy): its position is the checkpoint's
		// business, so replace it.
		if derr := p.js.DeleteConsumer(ctx, p.cfg.Stream, p.cfg.Name); derr == nil {
			cons, err = p.js.CreateOrUpdateConsumer(ctx, p.cfg.Stream, cfg)
		}
		if err != nil {
			return fmt.Errorf("projector: consumer %s: %w", p.cfg.Name, err)
		}
	}
	if _, err := p.js.ResetConsumerToSequence(ctx, p.cfg.Stream, p.cfg.Name, p.position.Load()+1); err != nil {
		return fmt.Errorf("projector: reset consumer %s: %w", p.cfg.Name, err)
	}
	// A pull request lives 10s (heartbeats every 5s): when the server
	// loses it (JetStream restarted, as after a full disk: broker/heal.go)
	// the iterator notices the missing heartbeats and pulls again within
	// seconds, not the default's 30.
	it, err := cons.Messages(jetstream.PullMaxMessages(2*p.cfg.Batch), jetstream.PullExpiry(10*time.Second))
	if err != nil {
		return fmt.Errorf("projector: consumer %s: %w", p.cfg.Name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		it.Stop()
		return errors.New("projector: closed")
	}
	if p.it != nil {
		p.it.Stop()
	}
	p.it = it
	p.gen.Add(1)
	return nil
}

// delivery is a message with the generation of the iterator it came from.
type delivery struct {
	m   jetstream.Msg
	gen uint64
}

// read moves messages from the iterator to the run loop until quit,
// subscribing again when the consumer goes away under it.
func (p *Projector) read() {
	defer p.wg.Done()
	for failures := 0; ; {
		p.mu.Lock()
		it, gen := p.it, p.gen.Load()
		p.mu.Unlock()
		m, err := it.Next()
		if p.quit.Err() != nil {
			return
		}
		if err == nil {
			failures = 0
			select {
			case p.in <- delivery{m, gen}:
			case <-p.quit.Done():
				return
			}
			continue
		}
		p.mu.Lock()
		replaced := p.it != it
		p.mu.Unlock()
		if replaced {
			continue // the run loop reset the consumer: read the new iterator
		}
		failures++
		if !errors.Is(err, jetstream.ErrMsgIteratorClosed) && !errors.Is(err, jetstream.ErrConsumerDeleted) && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			if failures == 1 || failures%100 == 0 {
				p.logger.Warn("reading events", "err", err)
			}
			if !p.pause(failures) {
				return
			}
			continue
		}
		for {
			if !p.pause(failures) {
				return
			}
			done, err := p.resubscribe(it)
			if done {
				break
			}
			failures++
			p.logger.Warn("subscribing again", "err", err)
		}
	}
}

// resubscribe subscribes again for the reader, whose iterator it stopped
// delivering because its consumer went away, unless the run loop has
// replaced that iterator meanwhile (its reset after a gap deletes the
// consumer). done reports that the reader has an iterator to read.
func (p *Projector) resubscribe(it jetstream.MessagesContext) (done bool, err error) {
	p.subMu.Lock()
	defer p.subMu.Unlock()
	p.mu.Lock()
	replaced := p.it != it
	p.mu.Unlock()
	if replaced {
		return true, nil
	}
	p.logger.Warn("events consumer gone, subscribing again from the position", "position", p.position.Load())
	ctx, cancel := context.WithTimeout(p.quit, 10*time.Second)
	defer cancel()
	if err := p.subscribe(ctx); err != nil {
		return false, err
	}
	return true, nil
}

// pause waits a backoff for the n-th failure in a row; false means quit.
func (p *Projector) pause(n int) bool {
	d := time.Duration(50<<min(n, 6)) * time.Millisecond // up to 3.2s
	select {
	case <-time.After(d):
		return true
	case <-p.quit.Done():
		return false
	}
}

// run applies the events in rounds of up to Batch, and saves the
// checkpoint when it has caught up or CheckpointInterval has passed.
func (p *Projector) run() {
	batch := make([]jetstream.Msg, 0, p.cfg.Batch)
	current := func(d delivery) bool { return d.gen == p.gen.Load() }
	for {
		select {
		case d := <-p.in:
			if !current(d) {
				continue
			}
			batch = append(batch[:0], d.m)
		case <-p.quit.Done():
			return
		}
	fill:
		for len(batch) < p.cfg.Batch {
			select {
			case d := <-p.in:
				if current(d) {
					batch = append(batch, d.m)
				}
			default:
				break fill
			}
		}
		caughtUp, gap, err := p.apply(batch)
		if err != nil {
			return // aborted by Close: nothing of this round was acknowledged
		}
		if gap {
			p.resetAfterGap()
			continue
		}
		if caughtUp || time.Since(p.lastSaved) >= p.cfg.CheckpointInterval {
			p.saveCheckpoint(p.work)
		}
	}
}

type group struct {
	kind byte // 's'ession, 'n'ode, 'x' stray
	key  string
	msgs []events.Msg
}

// resetAfterGap points a new consumer at the event after the position
// (the run loop saw a delivery past a gap: events before it were
// delivered to a request a server took down with it, and would come again
// only after the ack wait, behind later ones). It retries until it
// succeeds or the projector closes.
func (p *Projector) resetAfterGap() {
	at := p.position.Load() + 1
	if at == p.resetAt {
		p.resets++
	} else {
		p.resetAt, p.resets = at, 1
	}
	// A gap at the same place again: acceptGap found its events in the
	// stream, so something takes their deliveries (a server that goes
	// down with them, a reader of the consumer's name). Wait longer each
	// time.
	if p.resets > 1 && !p.pause(int(p.resets)) {
		return
	}
	p.subMu.Lock()
	defer p.subMu.Unlock()
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(p.quit, 10*time.Second)
		// A reset keeps the deliveries awaiting their acks (the missing
		// events among them) until the ack wait: the consumer is made
		// anew, with nothing pending, instead.
		err := p.js.DeleteConsumer(ctx, p.cfg.Stream, p.cfg.Name)
		if err == nil || errors.Is(err, jetstream.ErrConsumerNotFound) {
			err = p.subscribe(ctx)
		}
		cancel()
		if err == nil || p.quit.Err() != nil {
			return
		}
		p.logger.Warn("resetting the consumer after a gap, will retry", "attempt", attempt, "err", err)
		if !p.pause(attempt) {
			return
		}
	}
}

// acceptGap reports whether the projector may go on past a gap in the
// stream sequences it was delivered (from the event after last to seq):
// yes when the stream's leader says those events are gone from the stream
// (removed, or never there), no when it has one of them or cannot be
// asked. Only the leader is asked: a consumer, or a follower catching up
// after a restart, can miss events that the stream has, and an event
// skipped here would never be applied.
func (p *Projector) acceptGap(last, seq uint64) bool {
	ctx, cancel := context.WithTimeout(p.quit, 5*time.Second)
	defer cancel()
	next, found, err := firstFrom(ctx, p.js, p.cfg.Stream, last+1)
	switch {
	case err != nil:
		p.logger.Warn("a gap in the events delivered; the stream's leader could not say whether it has them, so the consumer is reset", "from", last+1, "to", seq-1, "err", err)
		return false
	case found && next < seq:
		return false // they are there: a reset delivers them
	}
	p.logger.Warn("events missing from the stream are skipped", "from", last+1, "to", seq-1)
	return true
}

// apply takes one round of events into the buckets: it groups them by
// record, writes each record once (up to Workers at a time, each retried
// until it succeeds or Close aborts), and only then acknowledges them. It
// reports whether the stream had nothing more pending, and whether it
// stopped at a gap in the stream sequences delivered: the events up to
// the gap are taken in, the rest are left unacknowledged for the run loop
// to reset the consumer to the first missing one, so that events are
// always taken in in stream order.
func (p *Projector) apply(batch []jetstream.Msg) (caughtUp, gap bool, err error) {
	pos := p.position.Load()
	last := pos
	groups := map[string]*group{}
	var order []*group
	fresh := make([]jetstream.Msg, 0, len(batch))
	for _, m := range batch {
		meta, err := m.Metadata()
		if err != nil {
			p.logger.Warn("message without JetStream metadata", "subject", m.Subject(), "err", err)
			continue
		}
		seq := meta.Sequence.Stream
		caughtUp = meta.NumPending == 0
		if seq <= last {
			p.skips.Add(1)
			_ = m.Ack()
			continue
		}
		if seq > last+1 && !p.acceptGap(last, seq) {
			gap, caughtUp = true, false
			break
		}
		last = seq
		fresh = append(fresh, m)
		msg := events.Msg{StreamSeq: seq, Subject: m.Subject(), Data: m.Data(), Time: meta.Timestamp}
		g := group{kind: 'x', key: StrayKey}
		if ref, ok := p.subj.Parse(msg.Subject); ok && ref.IsSession() {
			g = group{kind: 's', key: projection.SessionKey(ref.Tenant, ref.Session)}
		} else if ok {
			g = group{kind: 'n', key: projection.NodeKey(ref.Node)}
		}
		id := string(g.kind) + g.key
		if groups[id] == nil {
			groups[id] = &g
			order = append(order, &g)
		}
		groups[id].msgs = append(groups[id].msgs, msg)
	}
	if len(order) == 1 {
		err = p.write(order[0])
	} else {
		errs := make([]error, len(order))
		sem := make(chan struct{}, p.cfg.Workers)
		var wg sync.WaitGroup
		for i, g := range order {
			sem <- struct{}{}
			wg.Add(1)
			go func() { // bounded by sem, waited for below
				defer wg.Done()
				defer func() { <-sem }()
				errs[i] = p.write(g)
			}()
		}
		wg.Wait()
		err = errors.Join(errs...)
	}
	if err != nil {
		return false, false, err
	}
	for _, m := range fresh {
		_ = m.Ack()
	}
	p.position.Store(last)
	return caughtUp, gap, nil
}

// write decodes a group's events (the workers decode in parallel) and
// takes them into its record, retrying failures until it succeeds or work
// is cancelled.
func (p *Projector) write(g *group) error {
	items := make([]projection.Decoded, len(g.msgs))
	for i, m := range g.msgs {
		items[i] = projection.Decode(p.subj, m)
	}
	for attempt := 1; ; attempt++ {
		var res result
		var err error
		switch g.kind {
		case 's':
			res, err = p.sessions.apply(p.work, g.key, items, p.logger)
		case 'n':
			res, err = p.nodes.apply(p.work, g.key, items, p.logger)
		default:
			res, err = p.stray.apply(p.work, g.key, items, p.logger)
		}
		if err == nil {
			p.taken.Add(uint64(res.taken))
			p.skips.Add(uint64(len(items) - res.taken))
			for _, pr := range res.problems {
				p.problems.Add(1)
				p.logger.Warn("event not applied", "key", g.key, "stream_seq", pr.StreamSeq, "seq", pr.Seq, "kind", pr.Kind, "detail", pr.Detail)
			}
			return nil
		}
		if p.work.Err() != nil {
			return p.work.Err()
		}
		if attempt == 1 || attempt%20 == 0 {
			p.logger.Warn("writing the projection, will retry", "key", g.key, "attempt", attempt, "err", err)
		}
		select {
		case <-time.After(time.Duration(50<<min(attempt, 5)) * time.Millisecond):
		case <-p.work.Done():
			return p.work.Err()
		}
	}
}

// saveCheckpoint stores the position, if it moved.
func (p *Projector) saveCheckpoint(ctx context.Context) {
	p.lastSaved = time.Now()
	pos := p.position.Load()
	if pos <= p.checkpoint.Load() {
		return
	}
	data, _ := json.Marshal(Checkpoint{StreamSeq: pos, UpdatedAt: time.Now().UTC()})
	if _, err := p.buckets.State.Put(ctx, CheckpointKey(p.cfg.Name), data); err != nil {
		p.logger.Warn("saving the checkpoint", "err", err)
		return
	}
	p.checkpoint.Store(pos)
}

// Close stops taking events, lets the round in progress finish until ctx
// ends (then abandons it unacknowledged: it comes again next time), saves
// the checkpoint and returns. It is safe to call twice.
func (p *Projector) Close(ctx context.Context) error {
	p.mu.Lock()
	if !p.started || p.closed || p.quit == nil {
		p.closed = true
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	it := p.it
	p.mu.Unlock()

	p.stop()
	if it != nil {
		it.Stop()
	}
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }() // ends when both loops have
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		p.abort()
		<-done
		err = fmt.Errorf("projector: round abandoned at the close bound: %w", ctx.Err())
	}
	if p.ready.Load() {
		// The checkpoint is worth a moment even when ctx has ended.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		p.saveCheckpoint(sctx)
		cancel()
	}
	p.abort()
	s := p.Stats()
	p.logger.Info("projector stopped", "position", s.Position, "checkpoint", s.Checkpoint, "taken", s.Taken, "problems", s.Problems, "skipped", s.Skipped)
	return err
}

// Stats returns the projector's counters.
func (p *Projector) Stats() Stats {
	return Stats{
		Taken: p.taken.Load(), Problems: p.problems.Load(), Skipped: p.skips.Load(),
		Position: p.position.Load(), Checkpoint: p.checkpoint.Load(),
	}
}

// Lag returns how many stream sequences the projector is behind the
// events stream's last event. It fails if the stream cannot be reached.
func (p *Projector) Lag(ctx context.Context) (uint64, error) {
	if !p.ready.Load() {
		return 0, errors.New("projector: not set up yet")
	}
	s, err := p.js.Stream(ctx, p.cfg.Stream)
	if err != nil {
		return 0, fmt.Errorf("projector: events stream: %w", err)
	}
	last, pos := s.CachedInfo().State.LastSeq, p.position.Load()
	if last <= pos {
		return 0, nil
	}
	return last - pos, nil
}

// SumLag is the sum of the projectors' Lag (0 for none). It fails as the
// first Lag that fails.
func SumLag(ctx context.Context, ps []*Projector) (uint64, error) {
	var sum uint64
	for _, p := range ps {
		l, err := p.Lag(ctx)
		if err != nil {
			return 0, err
		}
		sum += l
	}
	return sum, nil
}

// ReadCheckpoint returns the named projector's checkpoint from the state
// bucket (zero when it has none). It fails if the bucket cannot be read or
// holds something else under the key.
func ReadCheckpoint(ctx context.Context, state jetstream.KeyValue, name string) (Checkpoint, error) {
	var cp Checkpoint
	e, err := state.Get(ctx, CheckpointKey(name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return cp, nil
	}
	if err != nil {
		return cp, fmt.Errorf("projector: read checkpoint: %w", err)
	}
	if err := json.Unmarshal(e.Value(), &cp); err != nil {
		return cp, fmt.Errorf("projector: checkpoint %s: %w", CheckpointKey(name), err)
	}
	return cp, nil
}
