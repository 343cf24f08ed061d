package operator_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/operator"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/provision"
	"github.com/paddock-dev/paddock/storage"
	"github.com/paddock-dev/paddock/testenv"
)

// TestStatus: before the streams exist each is reported missing; after,
// each is there with its limit, on a single server without a cluster.
func TestStatus(t *testing.T) {
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, time.Minute)
	rep, err := operator.Status(ctx, js, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Streams) != len(provision.Streams()) {
		t.Fatalf("got %d streams, want %d", len(rep.Streams), len(provision.Streams()))
	}
	for _, s := range rep.Streams {
		if !s.Missing {
			t.Errorf("stream %s before any was made: got present, want missing", s.Name)
		}
	}
	p := provision.Plan{Asked: storage.Limits{Events: 8 << 20, Objects: 8 << 20, KV: 1 << 20}}
	if err := p.EnsureStreams(ctx, js, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if err := p.EnsureBuckets(ctx, js, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if rep, err = operator.Status(ctx, js, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Streams {
		if s.Missing || s.MaxBytes == 0 || s.Healthy(1) != nil {
			t.Errorf("stream %s: got %+v (healthy: %v), want present, limited and healthy at 1 replica", s.Name, s, s.Healthy(1))
		}
	}
	if rep.Cluster != "" || len(rep.Nodes) != 0 || rep.Unfinished == nil || rep.Unfinished.Puts != 0 {
		t.Errorf("got cluster %q, %d nodes, unfinished %+v; want no cluster, no nodes, no unfinished puts", rep.Cluster, len(rep.Nodes), rep.Unfinished)
	}
}

// TestStatusPartitioned: the status of a deployment of 4 event partitions
// lists every partition's stream, each present with its limit.
func TestStatusPartitioned(t *testing.T) {
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, time.Minute)
	p := provision.Plan{Asked: storage.Limits{Events: 8 << 20, Objects: 8 << 20, KV: 1 << 20}, Partitions: 4}
	if err := p.EnsureStreams(ctx, js, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if err := p.EnsureBuckets(ctx, js, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	rep, err := operator.Status(ctx, js, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Owners) != 0 {
		t.Errorf("owners %+v before any lease, want none", rep.Owners)
	}
	// An engine's lease of partition 2 is shown as its owner.
	leases, err := projector.EnsureLeases(ctx, js, projector.LeaseConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Claim(ctx, 2, projector.Lease{Owner: "e1", Projector: "sbx_projector_e1_p2"}); err != nil {
		t.Fatal(err)
	}
	if rep, err = operator.Status(ctx, js, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if len(rep.Owners) != 1 || rep.Owners[0].Partition != 2 || rep.Owners[0].Owner != "e1" || rep.Owners[0].Stream != "SBX_EVENTS_2" {
		t.Errorf("owners %+v, want e1 owning partition 2 (SBX_EVENTS_2)", rep.Owners)
	}
	got := map[string]operator.StreamStatus{}
	for _, s := range rep.Streams {
		got[s.Name] = s
	}
	if len(rep.Streams) != len(provision.Streams())+3 {
		t.Errorf("got %d streams, want %d", len(rep.Streams), len(provision.Streams())+3)
	}
	for k := range 4 {
		name := events.PartitionStream("", k)
		if s, ok := got[name]; !ok || s.Missing || s.MaxBytes != 2<<20 {
			t.Errorf("partition %s: got %+v (listed: %v), want present with a quarter of the limit", name, s, ok)
		}
	}
}
