package client_test

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/snapshot"
	"github.com/paddock-dev/paddock/testenv"
)

func changeLines(res commands.DiffResult) []string {
	var out []string
	for _, c := range res.Changes {
		out = append(out, c.Change+" "+c.Path)
	}
	return out
}

// TestDiff: the scheduler compares two recorded points of a session: a
// tar snapshot (a real persist) and a manifest snapshot stored after it
// (as a content-addressed persist stores it), across the change of
// format; the points follow the seqs (0: newest / the one before; a seq:
// the last snapshot at or before it; before the first: an empty
// workspace); Limit truncates and the counts stay whole. Bad inputs: an
// unknown session and another tenant's session are session_not_found,
// from after to invalid_request, a session without snapshots
// snapshot_not_found.
func TestDiff(t *testing.T) {
	// The node persists tar, so that the diff crosses the format change.
	st := testenv.StartStack(t, testenv.StackOptions{Node: nodes.Config{Snapshots: nodes.SnapshotsTar}})
	ctx := testenv.Context(t, time.Minute)
	c := st.Client
	created, err := c.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	for p, data := range map[string]string{"keep.txt": "same", "edit.txt": "before", "gone.txt": "bye"} {
		if _, err := c.WriteFile(ctx, id, p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Diff(ctx, id, 0, 0); errcode.Of(err) != errcode.SnapshotNotFound {
		t.Fatalf("diff before any snapshot: %v, want snapshot_not_found", err)
	}
	tarSnap, err := c.Persist(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// A manifest snapshot recorded later: keep.txt as it was, edit.txt
	// changed, gone.txt removed, new/ and new/file.txt created.
	store, err := objectstore.Open(ctx, st.JS, "")
	if err != nil {
		t.Fatal(err)
	}
	up := store.Uploader(ctx, "default", 2)
	file := func(p, data string) snapshot.Entry {
		sum := sha256.Sum256([]byte(data))
		d := hex.EncodeToString(sum[:])
		if err := up.Put(d, []byte(data)); err != nil {
			t.Fatal(err)
		}
		return snapshot.Entry{Path: p, Kind: snapshot.KindFile, Mode: 0o644, Size: int64(len(data)), Chunks: []string{d}}
	}
	m := &snapshot.Manifest{Version: snapshot.Version, Entries: []snapshot.Entry{
		file("edit.txt", "after"), file("keep.txt", "same"),
		{Path: "new", Kind: snapshot.KindDir, Mode: 0o755}, file("new/file.txt", "fresh"),
	}}
	stats, err := up.Wait()
	if err != nil {
		t.Fatal(err)
	}
	manSnap, err := store.PutManifest(ctx, "default", id, "later", tarSnap.Seq+10, m, stats)
	if err != nil {
		t.Fatal(err)
	}

	res, err := c.Diff(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"modified edit.txt", "removed gone.txt", "created new", "created new/file.txt"}
	if got := changeLines(res); !slices.Equal(got, want) || res.Created != 2 || res.Modified != 1 || res.Removed != 1 || res.Truncated {
		t.Fatalf("diff newest vs the one before = %q (%+v), want %q", got, res, want)
	}
	if res.From == nil || res.From.ID != tarSnap.ID || res.To.ID != manSnap.ID || res.To.Format != snapshot.Format || res.From.Format != objectstore.FormatTar {
		t.Fatalf("points = %+v -> %+v, want the tar then the manifest", res.From, res.To)
	}
	// To at the tar's seq: from is an empty workspace.
	res, err = c.Diff(ctx, id, 0, tarSnap.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if res.From != nil || res.To.ID != tarSnap.ID || res.Created != 3 || res.Modified+res.Removed != 0 {
		t.Fatalf("diff to the first snapshot = %+v, want 3 created from an empty workspace", res)
	}
	// Seqs between snapshots pick the last one at or before them.
	res, err = c.Diff(ctx, id, tarSnap.Seq+1, tarSnap.Seq+9)
	if err != nil || res.From.ID != tarSnap.ID || res.To.ID != tarSnap.ID || len(res.Changes) != 0 {
		t.Fatalf("diff within one snapshot's span = %+v, %v; want no change", res, err)
	}
	res, err = c.DiffRequest(ctx, commands.DiffRequest{SessionID: id, Limit: 1})
	if err != nil || len(res.Changes) != 1 || !res.Truncated || res.Created+res.Modified+res.Removed != 4 {
		t.Fatalf("limit 1 = %+v, %v; want one change, truncated, all counted", res, err)
	}

	if _, err := c.Diff(ctx, "no-such-session", 0, 0); errcode.Of(err) != errcode.SessionNotFound {
		t.Fatalf("unknown session: %v, want session_not_found", err)
	}
	if _, err := c.Diff(ctx, id, 9, 3); errcode.Of(err) != errcode.InvalidRequest {
		t.Fatalf("from after to: %v, want invalid_request", err)
	}
	if _, err := c.DiffRequest(ctx, commands.DiffRequest{SessionID: id, Limit: commands.MaxDiffLimit + 1}); errcode.Of(err) != errcode.InvalidRequest {
		t.Fatalf("limit past the max: %v, want invalid_request", err)
	}
	if _, err := c.Diff(ctx, "a.b", 0, 0); errcode.Of(err) != errcode.InvalidRequest {
		t.Fatalf("bad session token: %v, want invalid_request", err)
	}
	other, err := client.New(st.ClientConn, client.Options{Tenant: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Diff(ctx, id, 0, 0); errcode.Of(err) != errcode.SessionNotFound {
		t.Fatalf("another tenant's session: %v, want session_not_found", err)
	}
}
