package scheduler_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/scheduler"
	"github.com/paddock-dev/paddock/testenv"
)

// TestPlacementsInFlightSpread: creates sent at once, before any node
// has answered one, go to different nodes: a placement counts on its node
// from the moment it is forwarded, not from the node's reply. (Counted at
// the reply, every one of them went to the node that was least loaded
// before them; the fleet test saw 20 creates from 8 clients land on 4 of
// 20 nodes.)
func TestPlacementsInFlightSpread(t *testing.T) {
	e := startScheduler(t, scheduler.Config{})
	ids := []string{"a", "b", "c", "d"}
	release := make(chan struct{})
	var mu sync.Mutex
	got := map[string]int{}
	for _, id := range ids {
		sub, err := e.nc.Subscribe(e.subj.Node(id, "create"), func(m *nats.Msg) {
			var p commands.Placement
			if _, err := commands.DecodeRequest(m.Data, &p); err != nil {
				_ = m.Respond(commands.ErrorReply(err))
				return
			}
			mu.Lock()
			got[id]++
			mu.Unlock()
			<-release // the node holds the create until every one is out
			b, _ := commands.ResultReply(commands.CreateResult{SessionID: p.SessionID, Node: id, Status: "running"})
			_ = m.Respond(b)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
		e.beat(t, up(id, 10, 0))
	}
	e.sync(t)
	ctx := testenv.Context(t, 30*time.Second)
	errs := make(chan error, len(ids))
	for range ids {
		go func() { // joined through errs
			_, err := e.client.Create(ctx, commands.CreateArgs{})
			errs <- err
		}()
	}
	var released sync.Once
	defer released.Do(func() { close(release) })
	testenv.Eventually(t, 20*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) != len(ids) {
			return fmt.Errorf("the creates in flight are on %v; want one on each of %v", got, ids)
		}
		return nil
	})
	released.Do(func() { close(release) })
	for range ids {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
