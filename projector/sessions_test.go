package projector_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/testenv"
)

// TestSessionsReader: before any projector ran, OpenSessions fails with
// unavailable and bucket-not-found; after, List filters by key and Get
// finds a record or says it has none.
func TestSessionsReader(t *testing.T) {
	js, log := streamSetup(t)
	ctx := testenv.Context(t, 30*time.Second)
	_, err := projector.OpenSessions(ctx, js)
	if !errors.Is(err, errcode.ErrUnavailable) || !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("open before a projector: got %v, want unavailable and bucket not found", err)
	}
	newWriter(t, log, "a", "s1").op("create", true)
	newWriter(t, log, "a", "s2").op("create", true).op("stop", true)
	newWriter(t, log, "b", "s1").op("create", true)
	caughtUp(t, start(t, js, projector.Config{}))

	s, err := projector.OpenSessions(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	all, err := s.List(ctx, ">")
	if err != nil || len(all) != 3 {
		t.Fatalf("list all: got %d records (%v), want 3", len(all), err)
	}
	a, err := s.List(ctx, projection.TenantKeys("a"))
	if err != nil || len(a) != 2 {
		t.Fatalf("list tenant a: got %d records (%v), want 2", len(a), err)
	}
	if r := a[projection.SessionKey("a", "s2")]; r.Status != projection.StatusStopped {
		t.Fatalf("a/s2: got status %q, want stopped", r.Status)
	}
	r, found, err := s.Get(ctx, "b", "s1")
	if err != nil || !found || r.Tenant != "b" || r.ID != "s1" || r.Status != projection.StatusRunning {
		t.Fatalf("get b/s1: got %+v found %v err %v, want running record", r, found, err)
	}
	if _, found, err := s.Get(ctx, "b", "s2"); err != nil || found {
		t.Fatalf("get b/s2: got found %v err %v, want not found", found, err)
	}
}
