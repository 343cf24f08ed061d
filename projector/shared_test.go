package projector_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/testenv"
)

// leaseTTL is the tests' lease TTL: short, so that a takeover comes soon,
// and long enough for renewals on a loaded machine.
const leaseTTL = 3 * time.Second

// change is one start or stop of a partition's projector in one engine.
type change struct {
	engine     string
	partition  int
	projecting bool
}

// changes records the changes of every engine of a test, in the order
// they happened.
type changes struct {
	mu  sync.Mutex
	log []change
}

func (c *changes) add(engine string, k int, projecting bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, change{engine, k, projecting})
}

// overlaps returns a partition some engine started projecting while
// another still projected it, and whether there is one.
func (c *changes) overlaps() (change, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	projecting := map[int]string{}
	for _, ch := range c.log {
		switch {
		case ch.projecting && projecting[ch.partition] != "":
			return ch, true
		case ch.projecting:
			projecting[ch.partition] = ch.engine
		case projecting[ch.partition] == ch.engine:
			delete(projecting, ch.partition)
		}
	}
	return change{}, false
}

// engine is one engine's Shared, on a connection of its own.
type engine struct {
	name   string
	nc     *nats.Conn
	shared *projector.Shared
	cancel context.CancelFunc
	done   chan error
}

// startEngine runs a Shared of n partitions named name on a connection of
// its own; the test's cleanup stops it.
func startEngine(t *testing.T, b *broker.Broker, name string, n int, log *changes) *engine {
	t.Helper()
	return startEngineTTL(t, b, name, n, leaseTTL, log)
}

// startEngineTTL is startEngine with leases of the given TTL.
func startEngineTTL(t *testing.T, b *broker.Broker, name string, n int, ttl time.Duration, log *changes) *engine {
	t.Helper()
	nc := testenv.Connect(t, b.ClientURL())
	js := testenv.JetStream(t, nc)
	s, err := projector.NewShared(js, projector.SharedConfig{
		Engine:    name,
		Projector: projector.Config{Name: "projector_" + name, Partitions: n},
		Leases:    projector.LeaseConfig{TTL: ttl},
		OnChange:  func(k int, on bool) { log.add(name, k, on) },
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &engine{name: name, nc: nc, shared: s, cancel: cancel, done: make(chan error, 1)}
	go func() { e.done <- s.Run(ctx) }() // ended by e.stop
	t.Cleanup(func() { e.stop(t) })
	return e
}

// stop cancels the engine's Run and waits for it (idempotent).
func (e *engine) stop(t *testing.T) {
	e.cancel()
	if err, ok := <-e.done; ok {
		close(e.done)
		if err != nil {
			t.Errorf("engine %s: Run: %v, want nil after its ctx ended", e.name, err)
		}
	}
}

// partitionedSetup starts a broker with an events stream of n partitions.
func partitionedSetup(t *testing.T, n int) (*broker.Broker, jetstream.JetStream, *events.Log) {
	t.Helper()
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	if _, err := events.EnsureStream(testenv.Context(t, 10*time.Second), js, events.StreamConfig{Partitions: n}); err != nil {
		t.Fatal(err)
	}
	return b, js, events.NewLog(js, "", "")
}

// writeSessions appends a create and an exec for sessions named
// <prefix>00.., <prefix>01.. (count of them).
func writeSessions(t *testing.T, log *events.Log, prefix string, count int) {
	t.Helper()
	for i := range count {
		newWriter(t, log, "acme", fmt.Sprintf("%s%02d", prefix, i)).op("create", true).op("exec", true)
	}
}

// projected waits until the sessions bucket holds want records, each with
// every event of its session applied.
func projected(t *testing.T, js jetstream.JetStream, want int) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, func() error {
		kv, err := js.KeyValue(context.Background(), projector.SessionsBucket)
		if err != nil {
			return err
		}
		recs, err := projector.ReadAll[projection.SessionRecord](context.Background(), kv, ">")
		if err != nil {
			return err
		}
		if len(recs) != want {
			return fmt.Errorf("%d session records, want %d", len(recs), want)
		}
		for key, r := range recs {
			if r.Applied != 4 || r.ProblemCount != 0 || r.Status != projection.StatusRunning {
				return fmt.Errorf("%s: applied %d, %d problems, %s; want 4, none, running", key, r.Applied, r.ProblemCount, r.Status)
			}
		}
		return nil
	})
}

// holds waits until each engine holds exactly the partitions given.
func holds(t *testing.T, want map[*engine][]int) {
	t.Helper()
	testenv.Eventually(t, 6*leaseTTL, func() error {
		for e, parts := range want {
			if got := e.shared.Held(); !slices.Equal(got, parts) {
				return fmt.Errorf("engine %s holds %v, want %v", e.name, got, parts)
			}
		}
		return nil
	})
}

// TestSharedPartitionsTakeOver: two engines on 4 partitions hold two
// each, and the sessions of every partition are projected; when one
// engine is cut off without releasing anything, it stops its projectors
// (fenced by its own deadline) before the other takes its partitions,
// which it does once the leases' TTL has removed them; events appended
// then to every partition are projected; an engine that stops releases
// its leases and presence.
func TestSharedPartitionsTakeOver(t *testing.T) {
	b, js, log := partitionedSetup(t, 4)
	var chs changes
	a := startEngine(t, b, "a", 4, &chs)
	e2 := startEngine(t, b, "b", 4, &chs)

	testenv.Eventually(t, 6*leaseTTL, func() error {
		ha, hb := a.shared.Held(), e2.shared.Held()
		all := append(slices.Clone(ha), hb...)
		slices.Sort(all)
		if len(ha) != 2 || len(hb) != 2 || !slices.Equal(all, []int{0, 1, 2, 3}) {
			return fmt.Errorf("a holds %v, b holds %v; want two each, all four held", ha, hb)
		}
		return nil
	})
	owners, err := projector.ReadOwners(testenv.Context(t, 10*time.Second), js)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range owners {
		want := "a"
		if slices.Contains(e2.shared.Held(), o.Partition) {
			want = "b"
		}
		if o.Owner != want || o.Projector == "" || o.Stream != events.PartitionStream("", o.Partition) {
			t.Fatalf("partition %d: lease %+v, want owner %s with its projector and stream", o.Partition, o, want)
		}
	}
	if len(owners) != 4 {
		t.Fatalf("%d leases, want 4", len(owners))
	}
	writeSessions(t, log, "s", 24)
	projected(t, js, 24)

	// Cut a off: its renewals fail, nothing is released.
	a.nc.Close()
	holds(t, map[*engine][]int{a: {}, e2: {0, 1, 2, 3}})
	if ch, bad := chs.overlaps(); bad {
		t.Fatalf("engine %s started projecting partition %d while another still did: %+v", ch.engine, ch.partition, chs.log)
	}
	writeSessions(t, log, "t", 24)
	projected(t, js, 48)

	// A graceful stop releases at once: the bucket names no owner and no
	// engine present.
	e2.stop(t)
	lb, err := projector.OpenLeases(testenv.Context(t, 10*time.Second), js, "")
	if err != nil {
		t.Fatal(err)
	}
	got, present, err := lb.Read(testenv.Context(t, 10*time.Second), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 || slices.Contains(present, "b") {
		t.Fatalf("after b stopped: leases %+v, engines %v; want none of b's", got, present)
	}
}

// TestSharedRebalancesOnJoin: an engine alone holds every partition; when
// a second joins, the first releases down to its share (stopping those
// projectors first) and the second takes them.
func TestSharedRebalancesOnJoin(t *testing.T) {
	b, js, log := partitionedSetup(t, 4)
	var chs changes
	a := startEngine(t, b, "a", 4, &chs)
	holds(t, map[*engine][]int{a: {0, 1, 2, 3}})
	e2 := startEngine(t, b, "b", 4, &chs)
	testenv.Eventually(t, 6*leaseTTL, func() error {
		if ha, hb := a.shared.Held(), e2.shared.Held(); len(ha) != 2 || len(hb) != 2 {
			return fmt.Errorf("a holds %v, b holds %v; want two each", ha, hb)
		}
		return nil
	})
	if ch, bad := chs.overlaps(); bad {
		t.Fatalf("engine %s started projecting partition %d while another still did: %+v", ch.engine, ch.partition, chs.log)
	}
	writeSessions(t, log, "s", 16)
	projected(t, js, 16)
}

// TestLeaseCannotBeStolen: the attacks on a lease fail. A second engine's
// claim of a live lease fails (ErrLeaseHeld) and leaves it to its owner;
// once the owner stops renewing, the TTL frees it and the other claims
// it; the stale owner's renewal and release then fail (ErrLeaseLost) and
// leave the new owner's lease as it is.
func TestLeaseCannotBeStolen(t *testing.T) {
	_, js, _ := partitionedSetup(t, 4)
	ctx := testenv.Context(t, 60*time.Second)
	l, err := projector.EnsureLeases(ctx, js, projector.LeaseConfig{TTL: projector.MinLeaseTTL})
	if err != nil {
		t.Fatal(err)
	}
	if l.TTL() != projector.MinLeaseTTL {
		t.Fatalf("TTL %s, want %s", l.TTL(), projector.MinLeaseTTL)
	}
	revA, err := l.Claim(ctx, 2, projector.Lease{Owner: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Claim(ctx, 2, projector.Lease{Owner: "b"}); !errors.Is(err, projector.ErrLeaseHeld) {
		t.Fatalf("b's claim of a's live lease: %v, want ErrLeaseHeld", err)
	}
	if revA, err = l.Renew(ctx, 2, revA, projector.Lease{Owner: "a"}); err != nil {
		t.Fatalf("a's renewal: %v", err)
	}
	if _, err := l.Claim(ctx, 2, projector.Lease{Owner: "b"}); !errors.Is(err, projector.ErrLeaseHeld) {
		t.Fatalf("b's claim after a renewed: %v, want ErrLeaseHeld", err)
	}
	// a stops renewing: b's claim succeeds once the TTL has removed the key.
	var revB uint64
	testenv.Eventually(t, 20*time.Second, func() error {
		revB, err = l.Claim(ctx, 2, projector.Lease{Owner: "b"})
		return err
	})
	if _, err := l.Renew(ctx, 2, revA, projector.Lease{Owner: "a"}); !errors.Is(err, projector.ErrLeaseLost) {
		t.Fatalf("stale a's renewal: %v, want ErrLeaseLost", err)
	}
	if err := l.Release(ctx, 2, revA); !errors.Is(err, projector.ErrLeaseLost) {
		t.Fatalf("stale a's release: %v, want ErrLeaseLost", err)
	}
	owners, _, err := l.Read(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if o := owners[2]; o.Owner != "b" || o.Revision != revB {
		t.Fatalf("partition 2: %+v, want b's lease at revision %d", o, revB)
	}
	if err := l.Release(ctx, 2, revB); err != nil {
		t.Fatalf("b's release: %v", err)
	}
	if _, err := l.Claim(ctx, 2, projector.Lease{Owner: "a"}); err != nil {
		t.Fatalf("a claims the released lease: %v", err)
	}
}

// TestLeaseConfigRefused: a TTL below the minimum, bad replicas and a bad
// engine name are refused.
func TestLeaseConfigRefused(t *testing.T) {
	for _, c := range []projector.SharedConfig{
		{Engine: "a", Leases: projector.LeaseConfig{TTL: time.Millisecond}},
		{Engine: "a", Leases: projector.LeaseConfig{Replicas: 7}},
		{Engine: ""},
		{Engine: "a.b"},
	} {
		if _, err := projector.NewShared(nil, c, nil); err == nil {
			t.Errorf("config %+v accepted, want refused", c)
		}
	}
}

// TestSharedRestartTakesItsLeasesBack: an engine that died holding leases
// (its connection cut, nothing released) and comes back under the same
// name takes its partitions up again at once, by their revisions, without
// waiting for the TTL (a minute here, beyond the test's wait).
func TestSharedRestartTakesItsLeasesBack(t *testing.T) {
	b, js, log := partitionedSetup(t, 4)
	var chs changes
	const ttl = time.Minute
	a := startEngineTTL(t, b, "a", 4, ttl, &chs)
	holds(t, map[*engine][]int{a: {0, 1, 2, 3}})
	a.nc.Close()
	a.stop(t)
	again := startEngineTTL(t, b, "a", 4, ttl, &chs)
	testenv.Eventually(t, 20*time.Second, func() error {
		if got := again.shared.Held(); !slices.Equal(got, []int{0, 1, 2, 3}) {
			return fmt.Errorf("the restarted engine holds %v, want all four", got)
		}
		return nil
	})
	writeSessions(t, log, "s", 8)
	projected(t, js, 8)
}

// TestSharedFencesByTheBucketsTTL: an engine whose TTL is longer than the
// bucket's (another engine ensured it shorter) fences by the bucket's: cut
// off, it stops its projectors before the other engine takes them.
func TestSharedFencesByTheBucketsTTL(t *testing.T) {
	b, js, log := partitionedSetup(t, 4)
	var chs changes
	a := startEngine(t, b, "a", 4, &chs)
	holds(t, map[*engine][]int{a: {0, 1, 2, 3}})
	e2 := startEngineTTL(t, b, "b", 4, 2*time.Second, &chs)
	testenv.Eventually(t, 6*leaseTTL, func() error {
		if ha, hb := a.shared.Held(), e2.shared.Held(); len(ha) != 2 || len(hb) != 2 {
			return fmt.Errorf("a holds %v, b holds %v; want two each", ha, hb)
		}
		return nil
	})
	a.nc.Close()
	holds(t, map[*engine][]int{a: {}, e2: {0, 1, 2, 3}})
	if ch, bad := chs.overlaps(); bad {
		t.Fatalf("engine %s started projecting partition %d while another still did: %+v", ch.engine, ch.partition, chs.log)
	}
	writeSessions(t, log, "s", 8)
	projected(t, js, 8)
}
