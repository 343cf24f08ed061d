package objectstore_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/storage"
	"github.com/paddock-dev/paddock/testenv"
)

// TestQuota: a bucket with a quota refuses the snapshot and the upload
// that do not fit with storage_quota_exceeded (not retryable; the message
// names the bucket and how to free space), keeps nothing of them, and
// takes the next one once a snapshot is deleted, also when it is so full
// that the object store's own deletion marker would not fit.
func TestQuota(t *testing.T) {
	const MiB = 1 << 20
	b := testenv.StartBrokerWith(t, broker.Config{MaxStore: 32 * MiB, SyncInterval: time.Second})
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, time.Minute)
	if _, err := objectstore.Ensure(ctx, js, objectstore.Config{MaxBytes: 4 * MiB}); err != nil {
		t.Fatal(err)
	}
	st, err := objectstore.Open(ctx, js, "")
	if err != nil {
		t.Fatal(err)
	}
	counts := func() objectstore.Counts { return objectstore.Counts{Members: 1} }
	blob := make([]byte, 1200<<10)
	var refused error
	var stored []string
	for i := 0; i < 10 && refused == nil; i++ {
		rand.Read(blob)
		id := fmt.Sprint("snap-", i)
		if _, refused = st.Put(ctx, "t", "s", id, 1, bytes.NewReader(blob), counts); refused == nil {
			stored = append(stored, id)
		}
	}
	if len(stored) != 3 || errcode.Of(refused) != errcode.StorageQuotaExceeded || errcode.StorageQuotaExceeded.Retryable() ||
		!strings.Contains(refused.(*errcode.Error).Message, "sbx_workspaces") || !strings.Contains(refused.(*errcode.Error).Message, "engine snapshot rm") {
		t.Fatalf("stored %v, then %v; want 3 snapshots of 1.2 MiB in 4 MiB, then storage_quota_exceeded naming the bucket and engine snapshot rm", stored, refused)
	}
	u, err := storage.Read(ctx, js, objectstore.StreamName(objectstore.DefaultBucket))
	if err != nil || u.Bytes > 3*1300<<10 {
		t.Fatalf("the bucket holds %d bytes (%v) after the refused put; want only the 3 snapshots", u.Bytes, err)
	}
	if _, err := st.Upload(ctx, "t", "up", bytes.NewReader(blob)); errcode.Of(err) != errcode.StorageQuotaExceeded {
		t.Fatalf("an upload that does not fit: %v, want storage_quota_exceeded", err)
	}
	// Fill to the last bytes: the object store's deletion marker no
	// longer fits, which a plain obs.Delete would need.
	obs, err := js.ObjectStore(ctx, objectstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if _, err := obs.PutBytes(ctx, fmt.Sprint("uploads/t/pad-", i), []byte("x")); err != nil {
			break
		}
	}
	if snaps, err := st.Snapshots(ctx, objectstore.SnapshotPrefix("t", "s")); err != nil || len(snaps) != 3 || snaps[0].ID != "snap-0" || snaps[0].Size != int64(len(blob)) {
		t.Fatalf("snapshots of t/s: %+v, %v; want the 3 stored, uploads left out", snaps, err)
	}
	if err := st.DeleteSnapshot(ctx, "t", "s", "snap-0"); err != nil {
		t.Fatalf("delete a snapshot of a full bucket: %v", err)
	}
	if err := st.DeleteSnapshot(ctx, "t", "s", "snap-0"); errcode.Of(err) != errcode.SnapshotNotFound {
		t.Fatalf("delete it again: %v, want snapshot_not_found", err)
	}
	// The padding holds what the bucket had left; the freed snapshot's
	// space is what there is.
	if _, err := st.Put(ctx, "t", "s", "after", 2, bytes.NewReader(blob[:1<<20]), counts); err != nil {
		t.Fatalf("put after freeing space: %v", err)
	}
	if _, err := st.Info(ctx, "t", "s", "snap-0"); errcode.Of(err) != errcode.SnapshotNotFound {
		t.Fatalf("the deleted snapshot: %v, want snapshot_not_found", err)
	}
	if _, err := obs.GetInfo(ctx, "t/s/snap-1.tar"); err != nil {
		t.Fatalf("a snapshot not deleted: %v", err)
	}
	if _, err := obs.GetInfo(ctx, "t/s/snap-0.tar"); err != jetstream.ErrObjectNotFound {
		t.Fatalf("the deleted snapshot's object: %v, want not found", err)
	}
}

func TestParseSnapshotName(t *testing.T) {
	for name, want := range map[string][3]string{
		"acme/s1/snap.tar": {"acme", "s1", "snap"},
		"uploads/acme/x":   {}, "acme/s1/snap": {}, "acme/snap.tar": {}, "a/b/c/d.tar": {}, "a/b.c/d.tar": {}, "": {},
	} {
		tn, s, id, ok := objectstore.ParseSnapshotName(name)
		if ok != (want != [3]string{}) || [3]string{tn, s, id} != want {
			t.Errorf("ParseSnapshotName(%q) = %q %q %q %v, want %q", name, tn, s, id, ok, want)
		}
	}
}
