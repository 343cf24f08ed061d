package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
)

// Node loss. Every scheduler watches the heartbeats; a node that has not
// been heard from for NodeTTL (and did not say it stopped) is declared
// lost:
//
//  1. a node event "lost" (signed by this engine, with the key it signs
//     with, so that audit verify can trust the session events it writes),
//     whose id is derived from the node and its last heartbeat, so that
//     engines declaring the same loss write it once;
//  2. on each session the projection places on that node, running,
//     stopped or being created: a failed finish (unavailable, retryable,
//     outcome unknown) for every operation the node left open, a
//     proc_exit "lost" for every process it ran, and a node_lost start
//     and finish that make the session lost. Each append expects the
//     session's last event, so when several engines race only one
//     history is written; the others find the session lost and move on,
//     and a node that comes back finds its appends refused (fencing) and
//     lets its sessions go.
//
// With AutoResume the engine that recorded a session's node_lost then
// resumes it on a node that is up (from its last snapshot); a session
// without a snapshot, or whose create declared secret variables (their
// values are never recorded, so only the client can give them again),
// stays lost, and node_lost's finish data says which snapshot a resume
// would restore.

// lostNodeSpace names the ids of lost events: one loss of one node (at
// its last heartbeat) has one id, whoever declares it.
var lostNodeSpace = uuid.MustParse("0f5a7d63-0d51-4f5c-b1d7-61f0b5d2a3c8")

// watchLoss is the scheduler's loss loop: every LostCheck it declares the
// nodes silent past NodeTTL lost. It runs until Close.
func (s *Scheduler) watchLoss() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.LostCheck)
	defer t.Stop()
	// The sweep reads the whole sessions projection: it runs every
	// LostSweep while losses are recent, and half as often after each
	// sweep that found nothing to do, down to once per 16 LostSweeps.
	swept, every := time.Now(), s.cfg.LostSweep
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if s.cfg.AutoResume && time.Since(swept) >= every {
			swept = time.Now()
			acted, err := s.sweepLost(s.ctx)
			switch {
			case err != nil:
				s.logger.Warn("cannot look for lost sessions to resume; will try again", "err", err)
			case acted:
				every = s.cfg.LostSweep
			default:
				every = min(2*every, 16*s.cfg.LostSweep)
			}
		}
		silent := s.silent()
		if len(silent) > 0 {
			every = s.cfg.LostSweep // a loss now: its sessions may need the sweep soon
		}
		for _, n := range silent {
			err := s.declareLost(s.ctx, n)
			if err != nil && !errors.Is(err, errTakingOver) && !errors.Is(err, errProjectionLagged) {
				s.logger.Warn("cannot declare node lost; will try again", "node", n.id, "err", err)
				continue
			}
			// Recorded; lost once no session is left to a node taking
			// it over and the projection named them all (else they are
			// looked at again next round).
			s.mu.Lock()
			if r, ok := s.nodes[n.id]; ok && r.lastSeen.Equal(n.lastSeen) {
				r.recorded, r.lost = true, err == nil
				s.nodes[n.id] = r
			}
			s.mu.Unlock()
		}
	}
}

type silentNode struct {
	id       string
	lastSeen time.Time
	recorded bool // its lost event is appended already
}

// silent returns the nodes not heard from for NodeTTL that neither said
// they stopped nor were declared lost since their last heartbeat, while
// other nodes were heard from well after them: an engine that was cut off
// from the bus (its server killed, say) heard nobody, and declares nobody
// lost for it. (One node alone is never declared lost: there would be
// nowhere to resume its sessions anyway.)
func (s *Scheduler) silent() []silentNode {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []silentNode
	for id, r := range s.nodes {
		if r.lost || r.info.Status == string(projection.NodeStopped) || time.Since(r.lastSeen) <= s.cfg.NodeTTL || s.heard.Sub(r.lastSeen) <= s.cfg.NodeTTL {
			continue
		}
		out = append(out, silentNode{id, r.lastSeen, r.recorded})
	}
	return out
}

// loadKnownNodes adds the nodes the nodes projection has up or draining,
// as heard from now: a node that died while no engine ran is declared
// lost NodeTTL after this engine started, unless it heartbeats by then.
func (s *Scheduler) loadKnownNodes(ctx context.Context) {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return
	}
	kv, err := js.KeyValue(ctx, projector.NodesBucket)
	if err != nil {
		return // no projector has run yet: nothing to know
	}
	recs, err := projector.ReadAll[projection.NodeRecord](ctx, kv, ">")
	if err != nil {
		s.logger.Warn("cannot read the nodes projection; nodes that died before this engine started are not declared lost", "err", err)
		return
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		if r.Status != projection.NodeUp && r.Status != projection.NodeDraining {
			continue
		}
		if _, ok := s.nodes[r.ID]; !ok {
			s.nodes[r.ID] = nodeRecord{info: events.NodeInfo{Node: r.ID, Status: "unknown"}, lastSeen: now}
		}
	}
}

// errTakingOver is a lost node's session that another node, one that is
// up, has begun to take over (its resume start is open): that node
// finishes it, and the session is looked at again on the next round.
var errTakingOver = errors.New("another node is taking the session over")

// errProjectionLagged is a loss declared while the sessions projection
// lagged: it may not have named every session of the node yet, so the
// node's sessions are looked at again on the next round.
var errProjectionLagged = errors.New("the sessions projection lagged: the node's sessions are looked at again")

// declareLost records that n is lost (heard last at n.lastSeen), unless
// an earlier round did, and closes the histories of its sessions. It
// returns errTakingOver when it left a session to a node taking it over,
// and errProjectionLagged when the projection may not have named them
// all.
func (s *Scheduler) declareLost(ctx context.Context, n silentNode) error {
	node, lastSeen := n.id, n.lastSeen
	lagged := s.waitProjection(ctx)
	if lagged != nil {
		s.logger.Warn("the sessions projection lags; declaring the node lost from what it holds, and looking again next round", "node", node, "err", lagged)
	}
	sessions, err := s.sessionsOn(ctx, node)
	if err != nil {
		return err
	}
	d, _ := json.Marshal(events.NodeLost{
		By: s.cfg.Name, SigningKey: s.log.SigningKey(), LastSeen: lastSeen.UTC(),
		TTLMS: s.cfg.NodeTTL.Milliseconds(), Sessions: len(sessions),
	})
	id := uuid.NewSHA1(lostNodeSpace, []byte(node+"\x00"+strconv.FormatInt(lastSeen.UnixNano(), 10)))
	if !n.recorded {
		if err := s.log.AppendNode(ctx, &events.NodeEvent{
			Version: events.Version, EventID: id.String(), TS: time.Now().UTC(),
			Node: node, Kind: projection.KindLost, Data: d,
		}); err != nil {
			return err
		}
		s.logger.Warn("node lost", "node", node, "last_seen", lastSeen.UTC(), "sessions", len(sessions))
	}
	var left error
	for _, k := range sessions {
		marked, res, err := s.closeLost(ctx, k.tenant, k.id, node, lastSeen)
		if errors.Is(err, errTakingOver) {
			left = err
			continue
		}
		if err != nil {
			return fmt.Errorf("session %s/%s: %w", k.tenant, k.id, err)
		}
		if marked && s.cfg.AutoResume {
			s.autoResume(k.tenant, k.id, res)
		}
	}
	if left == nil && lagged != nil {
		left = errProjectionLagged
	}
	return left
}

// up reports whether node was heard from within the TTL and not declared
// lost since.
func (s *Scheduler) up(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.nodes[node]
	return ok && !r.lost && time.Since(r.lastSeen) <= s.cfg.NodeTTL
}

// waitProjection waits, within a bound, until the projectors have taken
// in every event the streams held when it was called, so that the
// sessions projection names every session of the lost node. On a
// partitioned deployment each partition's stream has its own projectors:
// every partition must be caught up by one of its own.
func (s *Scheduler) waitProjection(ctx context.Context) error {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.NodeTTL)
	defer cancel()
	var want map[string]uint64 // stream -> the sequence to reach
	wait := 20 * time.Millisecond
	for {
		_, sts, err := projector.ReadStatus(ctx, js, "")
		if err == nil && len(sts) > 0 {
			if want == nil {
				want = map[string]uint64{}
				for _, st := range sts {
					want[st.Stream] = max(want[st.Stream], st.StreamSeq+st.Lag)
				}
			}
			if caughtUp(sts, want) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the projectors did not reach stream sequences %v: %w", want, errors.Join(err, ctx.Err()))
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// caughtUp reports whether, for every stream of want, one of the
// projectors of that stream has reached its sequence.
func caughtUp(sts []projector.Status, want map[string]uint64) bool {
	for stream, seq := range want {
		ok := false
		for _, st := range sts {
			if st.Stream == stream && st.StreamSeq >= seq {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

type sessionKey struct{ tenant, id string }

// sessionsOn returns the sessions the projection places on node that a
// loss concerns: running, stopped, or being created.
func (s *Scheduler) sessionsOn(ctx context.Context, node string) ([]sessionKey, error) {
	recs, err := s.sessionRecords(ctx)
	if err != nil {
		return nil, err
	}
	var out []sessionKey
	for _, r := range recs {
		if r.Node == node && lostWith(r.Status) {
			out = append(out, sessionKey{r.Tenant, r.ID})
		}
	}
	return out, nil
}

// lostWith reports whether a session in status is lost with its node.
func lostWith(st projection.Status) bool {
	return st == projection.StatusRunning || st == projection.StatusStopped || st == projection.StatusCreating
}

// lostSession is what closeLost learnt of a session it marked lost.
type lostSession struct {
	epoch      uint64 // the epoch the session was lost at
	runtime    string
	nodeLabels map[string]string
	snapshot   bool
	hasSecrets bool
}

// closeLost writes the end of a lost node's hold on one session: failed
// finishes for its open operations, proc_exit lost for its processes,
// then node_lost. It reports whether this call marked the session lost
// (false: it had moved, ended, or another engine marked it first).
func (s *Scheduler) closeLost(ctx context.Context, tenant, id, node string, lastSeen time.Time) (bool, lostSession, error) {
	for attempt := 0; ; attempt++ {
		tail, err := s.log.Last(ctx, tenant, id)
		if err != nil {
			return false, lostSession{}, err
		}
		if tail.Event == nil {
			return false, lostSession{}, nil
		}
		evs, err := s.log.Session(ctx, tenant, id)
		if err != nil {
			return false, lostSession{}, err
		}
		if len(evs) == 0 || evs[len(evs)-1].Seq != tail.Event.Seq {
			continue // an event landed between the two reads
		}
		st, ferr := projection.Fold(evs)
		if ferr != nil {
			s.logger.Warn("session history does not fold; its loss is recorded all the same", "tenant", tenant, "session", id, "err", ferr)
		}
		if st.Node != node || !lostWith(st.Status) {
			return false, lostSession{}, nil
		}
		if recordingLoss(evs, st) {
			// Another engine is writing this loss (its node_lost start is
			// open): its finish follows, and a second record would close
			// the first as failed.
			return false, lostSession{}, nil
		}
		if taker := takenUp(evs, st, node); taker != "" && s.up(taker) {
			return false, lostSession{}, errTakingOver
		}
		err = s.writeLoss(ctx, s.chain(tenant, id, tail), evs, st, node, lastSeen)
		if errcode.Of(err) == errcode.ConcurrencyConflict && attempt < 5 {
			continue // another writer: read the history again
		}
		if err != nil {
			return false, lostSession{}, err
		}
		create, _ := createOf(evs)
		res := lostSession{epoch: st.Epoch, runtime: st.Runtime, nodeLabels: st.NodeLabels, snapshot: st.LastSnapshot != nil, hasSecrets: len(create.SecretEnvKeys) > 0}
		return st.Status != projection.StatusCreating, res, nil
	}
}

// lossPatience is how long a node_lost start may stay open before another
// engine takes the one that wrote it for gone and records the loss again.
const lossPatience = 30 * time.Second

// recordingLoss reports whether a node_lost start is open and recent:
// another engine is recording the loss now.
func recordingLoss(evs []events.Event, st projection.Session) bool {
	for _, ev := range evs {
		if _, open := st.InFlight[ev.SpanID]; open && ev.Phase == events.PhaseStart &&
			ev.Op == string(commands.OpNodeLost) && time.Since(ev.TS) < lossPatience {
			return true
		}
	}
	return false
}

// takenUp returns the node that has begun to take the session over from
// node, or "": an operation is open whose start another node wrote (a
// resume the scheduler placed elsewhere, say, whose finish will move the
// session). While that node is up its finish is its own to write: a loss
// recorded now would fence it out of a resume that is bringing the
// session back. A taker that is itself gone gets its start closed with
// the rest.
func takenUp(evs []events.Event, st projection.Session, node string) string {
	for _, ev := range evs {
		if _, open := st.InFlight[ev.SpanID]; open && ev.Phase == events.PhaseStart && ev.Node != node {
			return ev.Node
		}
	}
	return ""
}

// writeLoss appends the events of one session's loss through w.
func (s *Scheduler) writeLoss(ctx context.Context, w *events.Chain, evs []events.Event, st projection.Session, node string, lastSeen time.Time) error {
	actor := "engine:" + s.cfg.Name
	msg := fmt.Sprintf("node %s was lost (no heartbeat for %s since %s) while the operation ran; its outcome is unknown (send a new command id to run it again)", node, s.cfg.NodeTTL, lastSeen.UTC().Format(time.RFC3339))
	closed := 0
	for _, ev := range evs {
		if _, open := st.InFlight[ev.SpanID]; !open || ev.Phase != events.PhaseStart {
			continue
		}
		ok, retry := false, errcode.Unavailable.Retryable()
		fin := events.Event{
			Op: ev.Op, Phase: events.PhaseFinish, CommandID: ev.CommandID, SpanID: ev.SpanID,
			ParentSpanID: ev.ParentSpanID, TraceID: ev.TraceID, Actor: ev.Actor, OK: &ok,
			ErrorCode: string(errcode.Unavailable), ErrorType: "errcode.Error", ErrorRetryable: &retry, ErrorMessage: msg,
		}
		if err := w.Append(ctx, &fin); err != nil {
			return err
		}
		closed++
	}
	if st.Status == projection.StatusCreating {
		return nil // the create's failed finish ends the session: failed
	}
	// node_lost's start releases the lost node's hold on the session: the
	// ends of its processes follow, then node_lost's finish.
	span := newSpanID()
	sd, _ := json.Marshal(events.NodeLostStart{Node: node, Epoch: st.Epoch, LastSeen: lastSeen.UTC()})
	if err := w.Append(ctx, &events.Event{Op: string(commands.OpNodeLost), Phase: events.PhaseStart, SpanID: span, Actor: actor, Data: sd}); err != nil {
		return err
	}
	procs := projection.LiveProcesses(evs)
	for _, pid := range procs {
		pspan := newSpanID()
		ref, _ := json.Marshal(events.ProcRef{ProcessID: pid})
		if err := w.Append(ctx, &events.Event{Op: string(commands.OpProcExit), Phase: events.PhaseStart, SpanID: pspan, Actor: actor, Data: ref}); err != nil {
			return err
		}
		ok := true
		d, _ := json.Marshal(events.ProcExitFinish{ProcessID: pid, Reason: "lost"})
		if err := w.Append(ctx, &events.Event{Op: string(commands.OpProcExit), Phase: events.PhaseFinish, SpanID: pspan, Actor: actor, OK: &ok, Data: d}); err != nil {
			return err
		}
	}
	fd := events.NodeLostFinish{ClosedOps: closed, Processes: procs}
	if st.LastSnapshot != nil {
		fd.SnapshotID = st.LastSnapshot.ID
	}
	fb, _ := json.Marshal(fd)
	ok := true
	return w.Append(ctx, &events.Event{Op: string(commands.OpNodeLost), Phase: events.PhaseFinish, SpanID: span, Actor: actor, OK: &ok, Data: fb})
}

// createOf returns the create start's data of a history.
func createOf(evs []events.Event) (events.CreateStart, bool) {
	for _, ev := range evs {
		if ev.Op == string(commands.OpCreate) && ev.Phase == events.PhaseStart {
			d, err := events.DecodeData[events.CreateStart](ev)
			return d, err == nil
		}
	}
	return events.CreateStart{}, false
}

// chain returns the writer of a session's history after tail, as this
// engine: a signed event of another writer that follows tail fails its
// appends with a concurrency conflict (*events.TakenOverError), and the
// caller reads the history again.
func (s *Scheduler) chain(tenant, id string, tail events.Tail) *events.Chain {
	// Engines share their identity: a conflict is read again by the
	// caller, never taken up as the engine's own (ConflictsStand); and
	// one attempt is bounded by ctx alone, so that an append the leader
	// is slow to confirm is not given up on while it may still land.
	return events.NewChain(s.log, tenant, id, s.cfg.Name, tail.Position(), events.ChainConfig{Logger: s.logger, ConflictsStand: true, Attempt: time.Hour})
}

// autoResume resumes a session lost at l.epoch on a node that is up, in
// the background (owned by the scheduler: Close waits), unless it cannot
// come back without its client or this engine is resuming it already.
func (s *Scheduler) autoResume(tenant, id string, l lostSession) {
	switch {
	case !l.snapshot:
		s.logger.Warn("lost session not resumed: it has no snapshot (resume it with --empty)", "tenant", tenant, "session", id)
		return
	case l.hasSecrets:
		s.logger.Warn("lost session not resumed: its secret variables must be given again by its client (resume with secret_env)", "tenant", tenant, "session", id)
		return
	}
	k := sessionKey{tenant, id}
	s.mu.Lock()
	if s.resuming[k] {
		s.mu.Unlock()
		return
	}
	s.resuming[k] = true
	s.mu.Unlock()
	s.spawn(func() {
		defer func() {
			s.mu.Lock()
			delete(s.resuming, k)
			s.mu.Unlock()
		}()
		select {
		case s.resumeSem <- struct{}{}:
		case <-s.ctx.Done():
			return
		}
		defer func() { <-s.resumeSem }()
		// A command id derived from the session and the epoch it was lost
		// at: every engine that resumes this loss (the one that recorded
		// it, another's sweep) sends the same command, and only one resume
		// of an epoch can be appended.
		cmd := uuid.NewSHA1(lostNodeSpace, []byte(tenant+"\x00"+id+"\x00"+strconv.FormatUint(l.epoch, 10)))
		req := commands.Request{Version: commands.Version, CommandID: cmd.String(), Actor: "engine:" + s.cfg.Name}
		body := forward(req, commands.ResumePlacement{Tenant: tenant, SessionID: id})
		wait := autoResumeFirstWait
		for attempt := 1; ; attempt++ {
			reply := s.place(s.ctx, want{runtime: l.runtime, labels: l.nodeLabels}, "resume", tenant, body)
			var rep commands.Reply
			err := json.Unmarshal(reply, &rep)
			if err == nil && rep.Error == nil {
				s.logger.Info("lost session resumed", "tenant", tenant, "session", id, "attempts", attempt)
				return
			}
			// A retryable failure (no node up yet, the stream electing a
			// leader) is tried again, with the same command id, a few
			// times over a couple of minutes; anything else is final.
			if err != nil || !rep.Error.Retryable || attempt == autoResumeAttempts {
				s.mu.Lock()
				s.swept[k] = time.Now().Add(sweepRetryAfter)
				s.mu.Unlock()
				s.logger.Warn("auto-resume of a lost session failed; it stays lost", "tenant", tenant, "session", id, "attempts", attempt, "reply", string(reply))
				return
			}
			s.logger.Info("auto-resume of a lost session failed; will try again", "tenant", tenant, "session", id, "attempt", attempt, "in", wait, "reply", string(reply))
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, autoResumeMaxWait)
		}
	})
}

// sweepLost resumes the lost sessions that no resume followed: their
// engine died between the loss and the resume, or the resume failed.
// A session lost less than LostSweep ago is left to the engine that
// recorded its loss; one that cannot come back without its client, or
// whose resume failed for good, is looked at again after sweepRetryAfter.
func (s *Scheduler) sweepLost(ctx context.Context) (acted bool, err error) {
	recs, err := s.sessionRecords(ctx)
	if err != nil {
		return false, err
	}
	now := time.Now()
	s.mu.Lock()
	for k, until := range s.swept {
		if now.After(until) {
			delete(s.swept, k)
		}
	}
	s.mu.Unlock()
	for _, r := range recs {
		k := sessionKey{r.Tenant, r.ID}
		s.mu.Lock()
		skip := s.resuming[k] || now.Before(s.swept[k])
		s.mu.Unlock()
		if r.Status != projection.StatusLost || skip || now.Sub(r.UpdatedAt) < s.cfg.LostSweep {
			continue
		}
		evs, err := s.log.Session(ctx, r.Tenant, r.ID)
		if err != nil {
			return acted, fmt.Errorf("session %s/%s: %w", r.Tenant, r.ID, err)
		}
		st, _ := projection.Fold(evs)
		if st.Status != projection.StatusLost {
			continue // resumed or ended since the projection's record
		}
		create, _ := createOf(evs)
		l := lostSession{epoch: st.Epoch, runtime: st.Runtime, nodeLabels: st.NodeLabels, snapshot: st.LastSnapshot != nil, hasSecrets: len(create.SecretEnvKeys) > 0}
		if !l.snapshot || l.hasSecrets {
			s.mu.Lock()
			s.swept[k] = now.Add(sweepRetryAfter)
			s.mu.Unlock()
		}
		s.logger.Info("lost session found without a resume", "tenant", r.Tenant, "session", r.ID, "epoch", st.Epoch)
		s.autoResume(r.Tenant, r.ID, l)
		acted = true
	}
	s.stats.sweeps.Add(1)
	return acted, nil
}

// sessionRecords reads every record of the sessions projection (none
// before its bucket exists).
func (s *Scheduler) sessionRecords(ctx context.Context) (map[string]projection.SessionRecord, error) {
	ss, err := s.sessionsProjection(ctx)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return ss.List(ctx, ">")
}

// sweepRetryAfter is how long the sweep leaves a lost session alone once
// it could not resume it.
const sweepRetryAfter = 10 * time.Minute

// An auto-resume that fails with a retryable error is tried again
// autoResumeAttempts times in all, waiting autoResumeFirstWait, then twice
// as long each time up to autoResumeMaxWait (about two minutes in all).
const (
	autoResumeAttempts  = 10
	autoResumeFirstWait = time.Second
	autoResumeMaxWait   = 20 * time.Second
)

func newSpanID() string {
	u := uuid.New()
	return fmt.Sprintf("%x", u[:8])
}
