package retention_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/retention"
	"github.com/paddock-dev/paddock/testenv"
)

func names(rs []retention.Removal) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Reason+" "+r.Name)
	}
	sort.Strings(out)
	return out
}

// TestPlan: exactly what the policy lets go, by name and reason.
func TestPlan(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	snap := func(tenant, session, id string, age time.Duration) objectstore.Object {
		return objectstore.Object{Name: tenant + "/" + session + "/" + id + ".tar", Size: 10, Created: ago(age)}
	}
	objs := []objectstore.Object{
		{Name: "uploads/acme/old", Created: ago(25 * time.Hour)},
		{Name: "uploads/acme/fresh", Created: ago(time.Hour)},
		// live: four snapshots, the oldest is the one it resumes from.
		snap("acme", "live", "s1", 4*time.Hour), snap("acme", "live", "s2", 3*time.Hour),
		snap("acme", "live", "s3", 2*time.Hour), snap("acme", "live", "s4", time.Hour),
		// gone: deleted 8 days ago; recent: deleted an hour ago.
		snap("acme", "gone", "g1", 9*24*time.Hour),
		snap("acme", "recent", "r1", 2*time.Hour),
		// unknown to the projection (it may lag a create): kept.
		snap("acme", "unknown", "u1", 30*24*time.Hour),
		// lost sessions are not deleted: their snapshot is what a resume needs.
		snap("other", "lost", "l1", 5*time.Hour), snap("other", "lost", "l2", 4*time.Hour),
	}
	sessions := map[string]retention.Session{
		retention.SessionKey("acme", "live"):   {Status: projection.StatusRunning, Current: "s1"},
		retention.SessionKey("acme", "gone"):   {Status: projection.StatusDeleted, UpdatedAt: ago(8 * 24 * time.Hour)},
		retention.SessionKey("acme", "recent"): {Status: projection.StatusDeleted, UpdatedAt: ago(time.Hour)},
		retention.SessionKey("other", "lost"):  {Status: projection.StatusLost, Current: "l1"},
	}
	p := retention.Policy{TransferTTL: 24 * time.Hour, DeletedRetention: 7 * 24 * time.Hour, KeepLast: 1}
	got := names(retention.Plan(now, p, objs, sessions))
	want := []string{
		"beyond_keep_last acme/live/s2.tar", "beyond_keep_last acme/live/s3.tar",
		"deleted_session acme/gone/g1.tar",
		"transfer_expired uploads/acme/old",
	}
	if !slices.Equal(got, want) {
		t.Errorf("plan:\n got %q\nwant %q", got, want)
	}
	// Keep 0 keeps every snapshot; retention 0 lets deleted ones go at once.
	p = retention.Policy{TransferTTL: 48 * time.Hour}
	got = names(retention.Plan(now, p, objs, sessions))
	want = []string{"deleted_session acme/gone/g1.tar", "deleted_session acme/recent/r1.tar"}
	if !slices.Equal(got, want) {
		t.Errorf("plan, keep all, no retention:\n got %q\nwant %q", got, want)
	}
	for _, bad := range []retention.Policy{{}, {TransferTTL: time.Hour, DeletedRetention: -1}, {TransferTTL: time.Hour, KeepLast: -1}} {
		if bad.Validate() == nil {
			t.Errorf("policy %+v validates", bad)
		}
	}
}

func tarOf(t *testing.T, name, content string) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	if err := w.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}

// TestSweep: on a real object store, a dry sweep removes nothing and lists
// what a sweep then removes: an old upload and the chunks of a put killed
// midway go, a fresh upload stays; a deleted session's snapshots go; a
// running session keeps its newest and the one it resumes from. A second
// sweep (another engine's) finds nothing and fails on nothing.
func TestSweep(t *testing.T) {
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
	put := func(session, id string) {
		t.Helper()
		if _, err := store.Put(ctx, "acme", session, id, 1, tarOf(t, "a.txt", id), func() objectstore.Counts { return objectstore.Counts{Members: 1} }); err != nil {
			t.Fatal(err)
		}
	}
	old, err := store.Upload(ctx, "acme", "old", bytes.NewReader([]byte("old upload")))
	if err != nil {
		t.Fatal(err)
	}
	// A put killed after its chunks, before its metadata: chunks no object names.
	orphan := nats.NewInbox()[len("_INBOX."):]
	if _, err := js.Publish(ctx, fmt.Sprintf("$O.%s.C.%s", objectstore.DefaultBucket, orphan), []byte("half a put")); err != nil {
		t.Fatal(err)
	}
	ids := []string{uuid.NewString(), uuid.NewString(), uuid.NewString()}
	for _, id := range ids {
		put("live", id)
	}
	put("gone", uuid.NewString())
	// Everything so far is older than the TTL once it has passed; what
	// comes after is fresh.
	const ttl = 300 * time.Millisecond
	mark := time.Now()
	testenv.Eventually(t, 10*time.Second, func() error {
		if time.Since(mark) < ttl {
			return fmt.Errorf("the TTL has not passed")
		}
		return nil
	})
	fresh, err := store.Upload(ctx, "acme", "fresh", bytes.NewReader([]byte("fresh upload")))
	if err != nil {
		t.Fatal(err)
	}
	records := func(context.Context) ([]projection.SessionRecord, error) {
		live := projection.SessionRecord{}
		live.Tenant, live.ID, live.Status = "acme", "live", projection.StatusStopped
		live.LastSnapshot = &projection.Snapshot{ID: ids[0]} // the oldest: what a resume restores
		gone := projection.SessionRecord{}
		gone.Tenant, gone.ID, gone.Status, gone.UpdatedAt = "acme", "gone", projection.StatusDeleted, time.Now().Add(-time.Hour)
		return []projection.SessionRecord{live, gone}, nil
	}
	p := retention.Policy{TransferTTL: ttl, OrphanGrace: ttl, DeletedRetention: time.Minute, KeepLast: 1}
	// Every sweep judges as of mark+ttl: what came before mark is past
	// the TTL, the fresh upload (made after that instant) is not, however
	// long the uploads and sweeps take on a loaded machine.
	at := mark.Add(ttl)

	dry, err := retention.SweepAt(ctx, at, store, records, p, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	before, err := store.Objects(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 6 {
		t.Fatalf("a dry sweep left %d objects, want all 6", len(before))
	}
	want := []string{
		"beyond_keep_last acme/live/" + ids[1] + ".tar",
		"deleted_session acme/gone/",
		"transfer_expired " + old,
		"unfinished_put chunks:" + orphan,
	}
	got := names(dry)
	sort.Strings(want)
	if len(got) != 4 || got[0] != want[0] || !bytes.HasPrefix([]byte(got[1]), []byte(want[1])) || got[2] != want[2] || got[3] != want[3] {
		t.Fatalf("dry plan:\n got %q\nwant %q", got, want)
	}

	done, err := retention.SweepAt(ctx, at, store, records, p, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names(done), got) {
		t.Errorf("the sweep removed %q; the dry run said %q", names(done), got)
	}
	after, err := store.Objects(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, o := range after {
		left = append(left, o.Name)
	}
	sort.Strings(left)
	wantLeft := []string{"acme/live/" + ids[0] + ".tar", "acme/live/" + ids[2] + ".tar", fresh}
	sort.Strings(wantLeft)
	if !slices.Equal(left, wantLeft) {
		t.Errorf("left %q, want %q (the newest, the one a resume restores, the fresh upload)", left, wantLeft)
	}
	if orphans, err := store.OrphanChunks(ctx, time.Now()); err != nil || len(orphans) != 0 {
		t.Errorf("orphan chunks after the sweep: %+v, %v", orphans, err)
	}
	again, err := retention.SweepAt(ctx, at, store, records, p, false, nil)
	if err != nil || len(again) != 0 {
		t.Errorf("a second sweep: %q, %v; want nothing and no error", names(again), err)
	}
}
