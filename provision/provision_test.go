package provision_test

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/provision"
	"github.com/paddock-dev/paddock/storage"
	"github.com/paddock-dev/paddock/testenv"
)

// TestPlan: a plan creates the events stream, the workspace bucket and
// the projection's buckets with the limits asked, and Streams names them
// all, the events stream first.
func TestPlan(t *testing.T) {
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, time.Minute)
	logger := slog.New(slog.DiscardHandler)
	p := provision.Plan{Asked: storage.Limits{Events: 8 << 20, Objects: 16 << 20, KV: 1 << 20}}
	if err := p.EnsureStreams(ctx, js, logger); err != nil {
		t.Fatal(err)
	}
	if err := p.EnsureBuckets(ctx, js, logger); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{
		events.DefaultStream: 8 << 20, objectstore.StreamName(objectstore.DefaultBucket): 16 << 20,
		"KV_" + projector.SessionsBucket: 1 << 20, "KV_" + projector.NodesBucket: 1 << 20, "KV_" + projector.StateBucket: 1 << 20,
	}
	names := provision.Streams()
	if len(names) != len(want) || names[0] != events.DefaultStream {
		t.Fatalf("streams %q: want the %d of them, the events stream first", names, len(want))
	}
	for _, n := range names {
		u, err := storage.Read(ctx, js, n)
		if err != nil {
			t.Fatalf("stream %s: %v", n, err)
		}
		if u.MaxBytes != want[n] {
			t.Errorf("stream %s: got max bytes %d, want %d", n, u.MaxBytes, want[n])
		}
	}
	if !slices.Contains(names, "KV_"+projector.SessionsBucket) {
		t.Errorf("streams %q lack the sessions bucket", names)
	}
}

// TestStoreSize: the embedded server's store wins; without one, a server
// whose account has no limit gives no size.
func TestStoreSize(t *testing.T) {
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, 30*time.Second)
	if n, from := provision.StoreSize(ctx, js, 1<<30, 3); n != 1<<30 || from == "" {
		t.Errorf("embedded: got %d (%q), want %d", n, from, 1<<30)
	}
	if n, _ := provision.StoreSize(ctx, js, 0, 1); n != 0 {
		t.Errorf("no account limit: got %d, want 0", n)
	}
}

// TestPartitionedPlan: on a deployment of 4 event partitions StreamsOf
// lists every partition's stream after the first, then the others, and
// each partition holds its share of the events' limit.
func TestPartitionedPlan(t *testing.T) {
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, time.Minute)
	logger := slog.New(slog.DiscardHandler)
	before, err := provision.StreamsOf(ctx, js)
	if err != nil || !slices.Equal(before, provision.Streams()) {
		t.Fatalf("streams before any is made: %q, %v; want Streams()", before, err)
	}
	p := provision.Plan{Asked: storage.Limits{Events: 8 << 20, Objects: 16 << 20, KV: 1 << 20}, Partitions: 4}
	if err := p.EnsureStreams(ctx, js, logger); err != nil {
		t.Fatal(err)
	}
	if err := p.EnsureBuckets(ctx, js, logger); err != nil {
		t.Fatal(err)
	}
	names, err := provision.StreamsOf(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{events.DefaultStream, events.PartitionStream("", 1), events.PartitionStream("", 2), events.PartitionStream("", 3)}
	want = append(want, provision.Streams()[1:]...)
	if !slices.Equal(names, want) {
		t.Fatalf("streams %q, want %q", names, want)
	}
	for _, n := range names[:4] {
		u, err := storage.Read(ctx, js, n)
		if err != nil {
			t.Fatalf("stream %s: %v", n, err)
		}
		if u.MaxBytes != 2<<20 {
			t.Errorf("partition %s: max bytes %d, want a quarter of 8 MiB", n, u.MaxBytes)
		}
	}
}
