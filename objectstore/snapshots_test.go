package objectstore_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/testenv"
)

func newStore(t *testing.T) *objectstore.Store {
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
	return st
}

// TestSnapshotRoundTrip: plain and zstd snapshots store, describe and
// fetch back the same tar; a name is never overwritten.
func TestSnapshotRoundTrip(t *testing.T) {
	base := newStore(t)
	ctx := testenv.Context(t, 30*time.Second)
	data := bytes.Repeat([]byte("workspace bytes "), 100_000) // 1.6 MB, compressible
	sum := sha256.Sum256(data)
	for _, tc := range []struct {
		name   string
		store  *objectstore.Store
		format string
	}{{"plain", base, objectstore.FormatTar}, {"zstd", base.Compressed(), objectstore.FormatTarZstd}} {
		t.Run(tc.name, func(t *testing.T) {
			id := "snap-" + tc.name
			snap, err := tc.store.Put(ctx, "t", "s", id, 9, bytes.NewReader(data), func() objectstore.Counts { return objectstore.Counts{Members: 3, Bytes: 42} })
			if err != nil {
				t.Fatal(err)
			}
			if snap.SHA256 != hex.EncodeToString(sum[:]) || snap.Format != tc.format || snap.Seq != 9 || snap.Members != 3 || len(snap.StoredSHA256) != 64 {
				t.Fatalf("snapshot = %+v", snap)
			}
			info, err := tc.store.Info(ctx, "t", "s", id)
			if err != nil || info.SHA256 != snap.SHA256 || info.StoredSHA256 != snap.StoredSHA256 || info.Seq != 9 {
				t.Fatalf("info = %+v, %v; want it to match %+v", info, err, snap)
			}
			f, err := os.Create(filepath.Join(t.TempDir(), "dl"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := tc.store.Fetch(ctx, "t", "s", id, f); err != nil {
				t.Fatal(err)
			}
			r, done, err := objectstore.ArchiveReader(f)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			done()
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("fetched %d bytes (%v), want the %d stored", len(got), err, len(data))
			}
			_, err = tc.store.Put(ctx, "t", "s", id, 0, bytes.NewReader(data), func() objectstore.Counts { return objectstore.Counts{} })
			if errcode.Of(err) != errcode.AlreadyExists {
				t.Fatalf("second put of %s: %v, want already_exists", id, err)
			}
		})
	}
	if _, err := base.Info(ctx, "t", "s", "missing"); errcode.Of(err) != errcode.SnapshotNotFound {
		t.Fatalf("info of a missing snapshot: %v, want snapshot_not_found", err)
	}
	if _, err := base.Info(ctx, "t", "a.b", "x"); errcode.Of(err) != errcode.InvalidRequest {
		t.Fatalf("bad session token: %v, want invalid_request", err)
	}
}

func TestCheckUpload(t *testing.T) {
	for name, ok := range map[string]bool{
		"uploads/acme/0d9c6f2e": true,
		"uploads/acme/":         false, "uploads/acme": false, "uploads/other/x": false,
		"acme/s1/snap.tar": false, "uploads/acme/../other/x": false, "uploads/acme/a/b": false,
		"uploads/acme/..": false, `uploads/acme/a\b`: false, "": false,
	} {
		err := objectstore.CheckUpload("acme", name)
		if (err == nil) != ok || (err != nil && !errors.Is(err, errcode.ErrPermissionDenied)) {
			t.Errorf("CheckUpload(acme, %q) = %v, want ok=%v (else permission_denied)", name, err, ok)
		}
	}
}
