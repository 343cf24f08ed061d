// Package control starts the control plane's parts that testenv cannot
// (the scheduler and the projector import testenv in their own tests):
// for tests that stand a cluster up themselves and want an engine on it.
package control

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/scheduler"
	"github.com/paddock-dev/paddock/testenv"
)

// Start makes the event stream, the projection buckets and the object
// store at replicas (trying again, each try bounded, until JetStream
// has a meta leader, for up to two minutes), then starts a scheduler
// with sched on nc and a projector with proj; both stop when the test
// ends. logger may be nil.
func Start(t testing.TB, ctx context.Context, nc *nats.Conn, js jetstream.JetStream, replicas int,
	sched scheduler.Config, proj projector.Config, logger *slog.Logger) (*scheduler.Scheduler, *projector.Projector) {
	t.Helper()
	proj.Replicas = replicas
	testenv.Eventually(t, 2*time.Minute, func() error {
		// Without a meta leader JetStream does not answer: bound each try.
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Replicas: replicas}); err != nil {
			return err
		}
		if _, err := projector.EnsureBuckets(ctx, js, proj); err != nil {
			return err
		}
		_, err := objectstore.Ensure(ctx, js, objectstore.Config{Replicas: replicas})
		return err
	})
	s, err := scheduler.New(nc, events.NewLog(js, "", ""), sched, logger)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	p, err := projector.New(js, proj, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(cctx)
	})
	return s, p
}
