package retention_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/retention"
	"github.com/paddock-dev/paddock/snapshot"
	"github.com/paddock-dev/paddock/testenv"
)

// TestRenewWithinGrace: an upload renews a chunk it skips well before any
// sweep the engine allows could remove it.
func TestRenewWithinGrace(t *testing.T) {
	if 2*objectstore.ChunkRenewAge > retention.MinOrphanGrace {
		t.Fatalf("chunks are renewed past %s, more than half the least orphan grace %s", objectstore.ChunkRenewAge, retention.MinOrphanGrace)
	}
}

// chunkStore is a store on a fresh broker.
func chunkStore(t *testing.T) (*objectstore.Store, jetstream.JetStream) {
	t.Helper()
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, 10*time.Second)
	if _, err := objectstore.Ensure(ctx, js, objectstore.Config{}); err != nil {
		t.Fatal(err)
	}
	st, err := objectstore.Open(ctx, js, "")
	if err != nil {
		t.Fatal(err)
	}
	return st, js
}

// persistFiles stores a manifest snapshot of files (path -> content) the
// way a persist does: chunks through an uploader, then the manifest.
func persistFiles(t *testing.T, ctx context.Context, st *objectstore.Store, tenant, session, id string, files map[string]string) {
	t.Helper()
	up := st.Uploader(ctx, tenant, 4)
	m := &snapshot.Manifest{Version: snapshot.Version}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		c := []byte(files[p])
		d := digest(files[p])
		if err := up.Put(d, c); err != nil {
			t.Fatal(err)
		}
		m.Entries = append(m.Entries, snapshot.Entry{Path: p, Kind: snapshot.KindFile, Mode: 0o644, Size: int64(len(c)), Chunks: []string{d}})
	}
	stats, err := up.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutManifest(ctx, tenant, session, id, 1, m, stats); err != nil {
		t.Fatal(err)
	}
}

func digest(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

func chunkNames(t *testing.T, ctx context.Context, st *objectstore.Store) []string {
	t.Helper()
	cs, err := st.Chunks(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range cs {
		out = append(out, c.Tenant+":"+c.Digest[:8])
	}
	sort.Strings(out)
	return out
}

// TestSweepChunks: two sessions share chunks; one is deleted. The sweep
// removes its manifest, and its own chunks only once they are past the
// orphan grace (a sweep "later", by its now), never the chunks the other
// session's kept manifest names; a dry run lists the chunk removals
// without removing them. Another tenant's identical chunk is its own and
// stays with its own manifest.
func TestSweepChunks(t *testing.T) {
	st, _ := chunkStore(t)
	ctx := testenv.Context(t, time.Minute)
	persistFiles(t, ctx, st, "acme", "keep", "k1", map[string]string{"shared": "shared bytes", "mine": "keep's own"})
	persistFiles(t, ctx, st, "acme", "gone", "g1", map[string]string{"shared": "shared bytes", "theirs": "gone's own"})
	persistFiles(t, ctx, st, "other", "o", "o1", map[string]string{"x": "gone's own"})
	records := func(context.Context) ([]projection.SessionRecord, error) {
		var keep, gone, o projection.SessionRecord
		keep.Tenant, keep.ID, keep.Status = "acme", "keep", projection.StatusStopped
		gone.Tenant, gone.ID, gone.Status, gone.UpdatedAt = "acme", "gone", projection.StatusDeleted, time.Now().Add(-time.Hour)
		o.Tenant, o.ID, o.Status = "other", "o", projection.StatusRunning
		return []projection.SessionRecord{keep, gone, o}, nil
	}
	p := retention.Policy{TransferTTL: time.Hour, OrphanGrace: time.Minute}
	all := chunkNames(t, ctx, st)
	if len(all) != 4 {
		t.Fatalf("chunks = %q, want 4 (3 of acme, 1 of other)", all)
	}

	// Now: the deleted session's manifest goes; its chunks are young.
	done, err := retention.SweepAt(ctx, time.Now(), st, records, p, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(done); len(got) != 1 || got[0] != "deleted_session acme/gone/g1.manifest" {
		t.Fatalf("first sweep removed %q, want the deleted session's manifest", got)
	}
	if got := chunkNames(t, ctx, st); !slices.Equal(got, all) {
		t.Fatalf("chunks after the first sweep = %q, want all %q (within the grace)", got, all)
	}

	// Past the grace: the deleted session's own chunk goes, nothing else.
	later := time.Now().Add(p.OrphanGrace + time.Second)
	theirs, _ := objectstore.ChunkName("acme", digest("gone's own"))
	dry, err := retention.SweepAt(ctx, later, st, records, p, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(dry); len(got) != 1 || got[0] != "unreferenced_chunk "+theirs {
		t.Fatalf("dry sweep past the grace = %q, want only %s", got, theirs)
	}
	if got := chunkNames(t, ctx, st); !slices.Equal(got, all) {
		t.Fatalf("a dry sweep removed chunks: %q", got)
	}
	done, err = retention.SweepAt(ctx, later, st, records, p, false, nil)
	if err != nil || !slices.Equal(names(done), names(dry)) {
		t.Fatalf("sweep past the grace removed %q (%v), the dry run said %q", names(done), err, names(dry))
	}
	want := []string{"acme:" + digest("keep's own")[:8], "acme:" + digest("shared bytes")[:8], "other:" + digest("gone's own")[:8]}
	sort.Strings(want)
	if got := chunkNames(t, ctx, st); !slices.Equal(got, want) {
		t.Fatalf("chunks left = %q, want %q", got, want)
	}
	// What the kept manifest names reads back.
	m, _, err := st.GetManifest(ctx, "acme", "keep", "k1", snapshot.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for d := range m.ChunkSet() {
		if _, err := st.GetChunk(ctx, "acme", d); err != nil {
			t.Fatalf("a kept snapshot's chunk %s: %v", d, err)
		}
	}
}

// TestSweepChunksUnreadable: a kept manifest that cannot be read (its
// recorded root forged) keeps every chunk of its tenant, and the sweep
// says why; another tenant's unreferenced chunks still go.
func TestSweepChunksUnreadable(t *testing.T) {
	st, js := chunkStore(t)
	ctx := testenv.Context(t, time.Minute)
	persistFiles(t, ctx, st, "acme", "s", "a1", map[string]string{"f": "named"})
	persistFiles(t, ctx, st, "other", "o", "o1", map[string]string{"f": "other named"})
	// Chunks no manifest names, one per tenant (a persist that died
	// before its manifest).
	for _, tn := range []string{"acme", "other"} {
		up := st.Uploader(ctx, tn, 1)
		if err := up.Put(digest("stray "+tn), []byte("stray "+tn)); err != nil {
			t.Fatal(err)
		}
		if _, err := up.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	name, _ := objectstore.ManifestName("acme", "s", "a1")
	raw, err := js.ObjectStore(ctx, objectstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := raw.GetInfo(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	meta := info.ObjectMeta
	meta.Metadata["root_sha256"] = digest("forged")
	if err := raw.UpdateMeta(ctx, name, meta); err != nil {
		t.Fatal(err)
	}
	records := func(context.Context) ([]projection.SessionRecord, error) { return nil, nil }
	p := retention.Policy{TransferTTL: time.Hour, OrphanGrace: time.Minute}
	done, err := retention.SweepAt(ctx, time.Now().Add(time.Hour), st, records, p, false, nil)
	if err == nil || !strings.Contains(err.Error(), "every chunk of tenant acme kept") || !strings.Contains(err.Error(), name) {
		t.Fatalf("sweep error = %v, want it to say acme's chunks stay because %s cannot be read", err, name)
	}
	stray, _ := objectstore.ChunkName("other", digest("stray other"))
	if got := names(done); len(got) != 1 || got[0] != "unreferenced_chunk "+stray {
		t.Fatalf("removed %q, want only other's stray chunk", got)
	}
	for _, c := range []string{"named", "stray acme"} {
		if ok, err := st.HasChunk(ctx, "acme", digest(c)); !ok || err != nil {
			t.Fatalf("acme's chunk %q: %v, %v; want kept", c, ok, err)
		}
	}
}
