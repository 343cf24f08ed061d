package projector_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/testenv"
)

// TestReadLeader: a key read from its bucket's stream leader, on a
// three-server cluster at R3 (what replay --verify does with a record a
// KV watch showed behind): the value last put, none for a key never
// written, none for a deleted key; and the same after the server that
// led the bucket is gone and another leads it.
func TestReadLeader(t *testing.T) {
	c := testenv.StartCluster(t, 3, broker.Config{})
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js := testenv.JetStream(t, nc)
	ctx := testenv.Context(t, 2*time.Minute)
	// As the engine does (retrySetup): a cluster that has just formed may
	// refuse an R3 placement for a moment ("no suitable peers").
	var b projector.Buckets
	testenv.Eventually(t, 60*time.Second, func() error {
		var err error
		b, err = projector.EnsureBuckets(ctx, js, projector.Config{Replicas: 3})
		return err
	})
	for i, v := range []string{`{"v":1}`, `{"v":2}`} {
		if _, err := b.Nodes.Put(ctx, "n1", []byte(v)); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if _, err := b.Nodes.Put(ctx, "gone", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := b.Nodes.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		if v, found, err := b.ReadLeader(ctx, b.Nodes, "n1"); err != nil || !found || string(v) != `{"v":2}` {
			t.Errorf("%s: n1 = %q, %v, %v; want the last value", when, v, found, err)
		}
		for _, k := range []string{"never", "gone"} {
			if v, found, err := b.ReadLeader(ctx, b.Nodes, k); err != nil || found {
				t.Errorf("%s: %s = %q, %v, %v; want none", when, k, v, found, err)
			}
		}
	}
	check("all servers up")

	// The bucket's leader goes away: another answers.
	s, err := js.Stream(ctx, "KV_"+projector.NodesBucket)
	if err != nil {
		t.Fatal(err)
	}
	leader := s.CachedInfo().Cluster.Leader
	stopped := -1
	for i, br := range c.Brokers {
		if br.Server().Name() == leader {
			c.Stop(i)
			stopped = i
		}
	}
	if stopped < 0 {
		t.Fatalf("no server named %q leads the bucket", leader)
	}
	testenv.Eventually(t, time.Minute, func() error {
		_, _, err := b.ReadLeader(ctx, b.Nodes, "n1")
		return err
	})
	check("its leader stopped")

	// Buckets made by hand cannot read from a leader: an error, not "none".
	if _, _, err := (projector.Buckets{}).ReadLeader(ctx, b.Nodes, "n1"); err == nil {
		t.Errorf("ReadLeader on zero Buckets: no error")
	}
}
