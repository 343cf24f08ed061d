package retention_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/retention"
	"github.com/paddock-dev/paddock/testenv"
)

// TestSweeper: a started sweeper removes an expired upload on its own
// within a few intervals, and closes twice without harm; a sweeper
// without an interval is refused.
func TestSweeper(t *testing.T) {
	b := testenv.StartBroker(t)
	nc := testenv.Connect(t, b.ClientURL())
	js := testenv.JetStream(t, nc)
	ctx := testenv.Context(t, time.Minute)
	if _, err := objectstore.Ensure(ctx, js, objectstore.Config{}); err != nil {
		t.Fatal(err)
	}
	store, err := objectstore.Open(ctx, js, "")
	if err != nil {
		t.Fatal(err)
	}
	none := func(context.Context) ([]projection.SessionRecord, error) { return nil, nil }
	p := retention.Policy{TransferTTL: 50 * time.Millisecond, OrphanGrace: time.Minute}
	if _, err := retention.NewSweeper(store, none, p, 0, nil); err == nil {
		t.Fatal("a sweeper with interval 0: got no error, want one")
	}
	name, err := store.Upload(ctx, "acme", "up", bytes.NewReader([]byte("an upload")))
	if err != nil {
		t.Fatal(err)
	}
	sw, err := retention.NewSweeper(store, none, p, 100*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	sw.Start()
	defer sw.Close()
	testenv.Eventually(t, 20*time.Second, func() error {
		objs, err := store.Objects(ctx)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if o.Name == name {
				return fmt.Errorf("%s still there", name)
			}
		}
		return nil
	})
	sw.Close()
	sw.Close()
}

// TestRemovedBytes sums the removals' sizes.
func TestRemovedBytes(t *testing.T) {
	if got := retention.RemovedBytes([]retention.Removal{{Size: 3}, {Size: 4}}); got != 7 {
		t.Fatalf("got %d, want 7", got)
	}
}
