package readiness_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/readiness"
	"github.com/paddock-dev/paddock/testenv"
)

// TestTransient: which failures pass by themselves.
func TestTransient(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"timeout", live, nats.ErrTimeout, true},
		{"no responders", live, fmt.Errorf("read: %w", nats.ErrNoResponders), true},
		{"deadline of a request", live, context.DeadlineExceeded, true},
		{"no leader", live, readiness.ErrNoLeader, true},
		{"no quorum", live, readiness.ErrNoQuorum, true},
		{"read stalled", live, errcode.Wrap(errcode.Unavailable, events.ErrReadStalled, "x"), true},
		{"cluster not ready", live, &jetstream.APIError{ErrorCode: 10008}, true},
		{"other API error", live, &jetstream.APIError{ErrorCode: 10059}, false},
		{"stream not found", live, jetstream.ErrStreamNotFound, false},
		{"permission", live, errors.New("permissions violation"), false},
		{"caller's ctx ended", ended, nats.ErrTimeout, false},
	} {
		if got := readiness.Transient(c.ctx, c.err); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

// TestRetry: a read that fails transiently is tried again until it
// succeeds; one that fails for good returns at once; one that keeps
// failing gives up after the wait with unavailable.
func TestRetry(t *testing.T) {
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, 30*time.Second)

	tries := 0
	err := readiness.Retry(ctx, js, "events stream", "NOPE", 10*time.Second, func(context.Context) error {
		if tries++; tries < 3 {
			return nats.ErrTimeout
		}
		return nil
	})
	if err != nil || tries != 3 {
		t.Fatalf("transient twice: got %v after %d tries, want success after 3", err, tries)
	}

	tries = 0
	bad := errors.New("refused")
	err = readiness.Retry(ctx, js, "events stream", "NOPE", 10*time.Second, func(context.Context) error { tries++; return bad })
	if !errors.Is(err, bad) || tries != 1 {
		t.Fatalf("lasting error: got %v after %d tries, want it after 1", err, tries)
	}

	start := time.Now()
	err = readiness.Retry(ctx, js, "events stream", "NOPE", 300*time.Millisecond, func(context.Context) error { return nats.ErrTimeout })
	if !errors.Is(err, errcode.ErrUnavailable) || !errors.Is(err, nats.ErrTimeout) || time.Since(start) > 10*time.Second {
		t.Fatalf("always transient: got %v after %s, want unavailable wrapping the timeout soon after the wait", err, time.Since(start))
	}
}

// TestStreamReady: a single server's stream, and a missing one, are ready.
func TestStreamReady(t *testing.T) {
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"S", "MISSING"} {
		if what, err := readiness.StreamReady(ctx, js, s, time.Second); err != nil || what != "" {
			t.Errorf("stream %s: got %q, %v; want ready", s, what, err)
		}
	}
}

// TestRetryTransient: a setup step is tried again while it fails
// transiently, and gives up when ctx ends.
func TestRetryTransient(t *testing.T) {
	ctx := testenv.Context(t, 30*time.Second)
	tries := 0
	err := readiness.RetryTransient(ctx, func(context.Context) error {
		if tries++; tries < 3 {
			return nats.ErrNoResponders
		}
		return nil
	})
	if err != nil || tries != 3 {
		t.Fatalf("got %v after %d tries, want success after 3", err, tries)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err = readiness.RetryTransient(short, func(context.Context) error { return nats.ErrNoResponders })
	// Mostly unavailable wrapping the cause; the cause alone when ctx
	// ended while a try ran.
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("got %v, want the last try's error once ctx ends", err)
	}
}
