package readiness

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
)

// maxBackoff bounds the pause between two tries of a read.
const maxBackoff = 2 * time.Second

// Retry runs read once the stream it reads is ready, and again after
// a pause while it fails on a transient JetStream error (a request timing
// out, no responders, no leader, the cluster not ready), for up to wait in
// all. Giving up, it says what it waited for ("the events stream
// SBX_EVENTS had no leader for 30s"). Any other error, and a transient one
// the caller's own ctx caused, is returned at once: permission denied, a
// stream that does not exist (read reports that in its own words).
//
// read must not repeat on a second call what the first one printed: it
// starts afresh, or (a reader that prints as it goes) after the last
// event it printed. Such a reader passes progress, a number that grows as
// it goes (how many events it handled): a failure after progress waits
// afresh, so that a follower that ran for hours still gets its whole wait.
func Retry(ctx context.Context, js jetstream.JetStream, what, stream string, wait time.Duration, read func(context.Context) error, progress ...func() uint64) error {
	deadline := time.Now().Add(wait)
	backoff := 100 * time.Millisecond
	reached := func() uint64 {
		if len(progress) == 0 {
			return 0
		}
		return progress[0]()
	}
	for {
		state, err := StreamReady(ctx, js, stream, time.Until(deadline))
		if err == nil {
			before := reached()
			err = Undeadlined(ctx, read)
			state = "was not ready"
			if reached() != before {
				deadline, backoff = time.Now().Add(wait), 100*time.Millisecond
			}
		}
		if err == nil || !Transient(ctx, err) {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return errcode.Wrap(errcode.Unavailable, err, fmt.Sprintf("the %s %s %s for %s", what, stream, state, wait))
		}
		t := time.NewTimer(min(backoff, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// Undeadlined runs read with ctx's cancellation but not its
// deadline: JetStream requests then time out by their own default (5s)
// and are tried again, instead of hanging until the caller's deadline.
func Undeadlined(ctx context.Context, read func(context.Context) error) error {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	return read(rctx)
}

// ErrNoLeader and ErrNoQuorum are a replicated stream that cannot serve
// now: no leader, or a leader without a quorum of current replicas (a
// leader that lost its followers answers for a while).
var (
	ErrNoLeader = errors.New("the stream has no leader")
	ErrNoQuorum = errors.New("the stream's leader has no quorum of current replicas")
)

// StreamReady asks for the stream's info within limit (at most the
// JetStream request timeout, at least 100ms). A stream that does not
// exist is ready for this purpose: its reader says what is missing.
// Otherwise it returns what was wrong in words for the giving-up message.
func StreamReady(ctx context.Context, js jetstream.JetStream, stream string, limit time.Duration) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, min(max(limit, 100*time.Millisecond), 5*time.Second))
	defer cancel()
	// The meta leader answers account info: without one, no consumer can
	// be made, whatever the stream's own leader says.
	if _, err := js.AccountInfo(rctx); err != nil {
		if Transient(ctx, err) {
			return "got no answer from JetStream's meta leader (is a quorum of the cluster's servers up?)", err
		}
		return "", err
	}
	s, err := js.Stream(rctx, stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return "", nil
	case err != nil && Transient(ctx, err):
		return "got no answer from JetStream (is a quorum of the cluster's servers up?)", err
	case err != nil:
		return "", err
	}
	info := s.CachedInfo()
	c := info.Cluster
	if c == nil || info.Config.Replicas <= 1 {
		return "", nil
	}
	if c.Leader == "" {
		return "had no leader", ErrNoLeader
	}
	current := 1 // the leader
	for _, r := range c.Replicas {
		if r.Current && !r.Offline {
			current++
		}
	}
	if current < info.Config.Replicas/2+1 {
		return fmt.Sprintf("had %d of %d replicas current, no quorum", current, info.Config.Replicas), ErrNoQuorum
	}
	return "", nil
}

// transient reports whether err is a JetStream failure that passes by
// itself: a request that timed out (but not because ctx, the caller's,
// ended), no responders, a stream without a leader or quorum, a cluster
// not ready, a read whose consumer delivered nothing.
func Transient(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrNoHeartbeat) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) || errors.Is(err, ErrNoLeader) || errors.Is(err, ErrNoQuorum) ||
		errors.Is(err, events.ErrReadStalled) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return clusterNotReady(apiErr.ErrorCode)
	}
	// The object and KV stores' watches still speak nats.go's older API.
	var oldErr *nats.APIError
	if errors.As(err, &oldErr) {
		return clusterNotReady(jetstream.ErrorCode(oldErr.ErrorCode))
	}
	return false
}

func clusterNotReady(c jetstream.ErrorCode) bool {
	switch c {
	case jsClusterNoPeers, jsClusterNotAssigned, jsClusterNotAvailable, jsClusterNotLeader:
		return true
	}
	return false
}

// nats-server's codes (server/errors.json) for a cluster that cannot
// serve a request yet.
const (
	jsClusterNoPeers      jetstream.ErrorCode = 10005 // no peers to place a stream or consumer on
	jsClusterNotAssigned  jetstream.ErrorCode = 10007 // not assigned to this server
	jsClusterNotAvailable jetstream.ErrorCode = 10008 // JetStream system temporarily unavailable
	jsClusterNotLeader    jetstream.ErrorCode = 10009 // JetStream cluster can not handle request
)

// RetryTransient runs fn, and again after a pause while it fails on a
// transient JetStream error (a request without an answer, no leader yet,
// no peers to place a stream on: a cluster that has just formed, or is
// loaded), until ctx (the engine's start timeout) ends. Each JetStream
// request in fn is bounded by the client's own timeout rather than by
// ctx, so that one unanswered request does not take the whole start.
func RetryTransient(ctx context.Context, fn func(context.Context) error) error {
	backoff := 100 * time.Millisecond
	for {
		err := Undeadlined(ctx, fn)
		if err == nil || !Transient(ctx, err) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return errcode.Wrap(errcode.Unavailable, err, "JetStream was not ready before the start timeout")
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}
