package scheduler_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/scheduler"
	"github.com/paddock-dev/paddock/testenv"
)

// gatedRuntime is a real local runtime whose creates wait until the test
// lets them go: the window in which an engine is killed mid-placement.
type gatedRuntime struct {
	*local.Runtime
	entered chan struct{}
	release chan struct{}
}

func (g *gatedRuntime) Create(ctx context.Context, spec runtime.Spec) (runtime.Sandbox, error) {
	g.entered <- struct{}{}
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Runtime.Create(ctx, spec)
}

// engine is one engine's scheduler and projector on its own connection.
type engine struct {
	nc    *nats.Conn
	sched *scheduler.Scheduler
	proj  *projector.Projector
}

func startEngine(t *testing.T, url, name string) *engine {
	t.Helper()
	nc := testenv.Connect(t, url)
	js := testenv.JetStream(t, nc)
	cfg := lossConfig
	cfg.Name, cfg.NodeTTL = name, 5*time.Second
	s, err := scheduler.New(nc, events.NewLog(js, "", ""), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(testenv.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	// What the projector said, shown when the test fails (it ran once
	// for 30 s without taking an event in, under a loaded CI machine).
	logs := &lockedBuffer{}
	p, err := projector.New(js, projector.Config{Name: "projector_" + name, Replicas: 3}, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("projector_%s log:\n%s", name, logs.String())
		}
	})
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return &engine{nc: nc, sched: s, proj: p}
}

// TestEnginesOnCluster: on a 3-server cluster with every stream at three
// replicas, two engines share placement (the queue group) and both
// project: every event is taken in once (compare-and-set on the records),
// and the projection equals the fold of the events. An engine killed
// while a create is on its node leaves no half-created session: the node
// records the create whole, the client gets a retryable error, and the
// create sent again with its command id through the other engine finds
// the first attempt's session instead of making a second.
func TestEnginesOnCluster(t *testing.T) {
	c := testenv.StartCluster(t, 3, broker.Config{})
	url := c.URL()
	ctx := testenv.Context(t, 4*time.Minute)
	setup := testenv.JetStream(t, testenv.Connect(t, url))
	// A cluster whose meta leader is elected may not know every peer yet:
	// an R3 stream is placed once it does.
	testenv.Eventually(t, time.Minute, func() error {
		if _, err := events.EnsureStream(ctx, setup, events.StreamConfig{Replicas: 3}); err != nil {
			return err
		}
		_, err := objectstore.Ensure(ctx, setup, objectstore.Config{Replicas: 3})
		return err
	})
	a := startEngine(t, url, "engine-a")
	rt, err := local.New(local.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	gate := &gatedRuntime{Runtime: rt, entered: make(chan struct{}, 1), release: make(chan struct{})}
	agent := testenv.StartAgent(t, url, nodes.Config{ID: "node-1", HeartbeatInterval: 200 * time.Millisecond}, gate)
	waitForNodes(t, a.sched, "node-1")

	// Killed mid-placement: engine-a forwards the create to node-1, whose
	// runtime holds it; engine-a dies; then the create goes on.
	cl, err := client.New(testenv.Connect(t, url), client.Options{Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const cmd = "create-1"
	done := make(chan error, 1)
	go func() {
		_, err := cl.Create(ctx, commands.CreateArgs{}, client.WithCommandID(cmd))
		done <- err
	}()
	select {
	case <-gate.entered:
	case <-ctx.Done():
		t.Fatal("the create never reached the node")
	}
	a.sched.Close()
	a.nc.Close() // kill: no reply will be relayed
	close(gate.release)
	if err := <-done; errcode.Of(err) != errcode.Unavailable {
		t.Fatalf("create whose engine died: %v; want unavailable (retryable)", err)
	}
	id := commands.SessionIDFor("default", cmd)
	testenv.Eventually(t, 30*time.Second, func() error {
		evs, err := events.NewLog(setup, "", "").Session(ctx, "default", id)
		if err != nil {
			return err
		}
		if s, _ := projection.Fold(evs); s.Status != projection.StatusRunning || len(s.InFlight) != 0 {
			return fmt.Errorf("session %s: %s, in flight %v", id, s.Status, s.InFlight)
		}
		return nil
	})

	b := startEngine(t, url, "engine-b")
	a2 := startEngine(t, url, "engine-a2")
	waitForNodes(t, b.sched, "node-1")
	waitForNodes(t, a2.sched, "node-1")
	gate.entered = make(chan struct{}, 100) // later creates pass straight through
	res, err := cl.Create(ctx, commands.CreateArgs{}, client.WithCommandID(cmd))
	if err != nil || res.SessionID != id {
		t.Fatalf("create sent again: %+v, %v; want session %s", res, err, id)
	}
	if held := agent.Sessions(); len(held) != 1 {
		t.Fatalf("node holds %v; want the one session", held)
	}

	// Both engines serve placements and both project.
	for i := range 8 {
		s, err := cl.Create(ctx, commands.CreateArgs{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Exec(ctx, s.SessionID, commands.ExecArgs{Argv: []string{"echo", fmt.Sprint(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	last := func() uint64 {
		s, err := setup.Stream(ctx, events.DefaultStream)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().State.LastSeq
	}()
	for _, e := range []*engine{b, a2} {
		// A projector's setup on a cluster is retried, each attempt bounded
		// by 10 s: the bound leaves room for a few on a loaded machine.
		testenv.Eventually(t, 90*time.Second, func() error {
			if pos := e.proj.Stats().Position; pos < last {
				return fmt.Errorf("projector at %d of %d", pos, last)
			}
			return nil
		})
	}
	sb, sa := b.proj.Stats(), a2.proj.Stats()
	if sb.Problems+sa.Problems != 0 {
		t.Fatalf("projector problems: %+v, %+v", sb, sa)
	}
	kv, err := setup.KeyValue(ctx, projector.SessionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	// A read of a cluster that is still settling can stall (the watch or
	// the ordered consumer is placed on a replica catching up): it is
	// retryable, and read again.
	var recs map[string]projection.SessionRecord
	testenv.Eventually(t, time.Minute, func() error {
		var err error
		recs, err = projector.ReadAll[projection.SessionRecord](ctx, kv, ">")
		return err
	})
	if len(recs) != 9 {
		t.Fatalf("%d session records, want 9", len(recs))
	}
	log := events.NewLog(setup, "", "")
	for key, r := range recs {
		var evs []events.Event
		testenv.Eventually(t, time.Minute, func() error {
			var err error
			evs, err = log.Session(ctx, r.Tenant, r.ID)
			return err
		})
		want, _ := projection.Fold(evs)
		if r.LastSeq != want.LastSeq || r.Status != want.Status || r.ProblemCount != 0 {
			t.Fatalf("record %s: seq %d %s (%d problems); the fold says seq %d %s", key, r.LastSeq, r.Status, r.ProblemCount, want.LastSeq, want.Status)
		}
	}
}

// lockedBuffer is a bytes.Buffer that a logger's goroutines and the test
// may use at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
