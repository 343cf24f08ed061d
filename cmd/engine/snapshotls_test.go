package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/snapshot"
	"github.com/paddock-dev/paddock/testenv"
)

// TestSnapshotLsTotals: `snapshot ls` lists tar and manifest snapshots
// with their format, logical bytes, members and short root, and a tenant
// line that sets the logical bytes of all its snapshots against the
// bytes of its distinct chunks: two manifests of the same 1 MiB file
// count it twice logically and store it once.
func TestSnapshotLsTotals(t *testing.T) {
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := objectstore.Ensure(ctx, js, objectstore.Config{}); err != nil {
		t.Fatal(err)
	}
	st, err := objectstore.Open(ctx, js, "")
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{7}, snapshot.ChunkSize)
	sum := sha256.Sum256(data)
	d := hex.EncodeToString(sum[:])
	m := &snapshot.Manifest{Version: snapshot.Version, Entries: []snapshot.Entry{{Path: "big", Kind: snapshot.KindFile, Mode: 0o644, Size: int64(len(data)), Chunks: []string{d}}}}
	for i, session := range []string{"s1", "s2"} {
		up := st.Uploader(ctx, "acme", 2)
		if err := up.Put(d, data); err != nil {
			t.Fatal(err)
		}
		stats, err := up.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.PutManifest(ctx, "acme", session, "m", uint64(i+1), m, stats); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Put(ctx, "acme", "s1", "old", 1, strings.NewReader("tar bytes"), func() objectstore.Counts { return objectstore.Counts{Members: 1, Bytes: 9} }); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := listSnapshots(ctx, st, objectstore.SnapshotPrefix("acme", "s1"), "acme", false, false, false, &out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"FORMAT", "ROOT", "manifest", "tar", m.Root()[:12], "(2 snapshots, ",
		"tenant acme: 2097161 logical bytes in 3 snapshots; 1 distinct chunks store 1048576 bytes"} {
		if !strings.Contains(text, want) {
			t.Errorf("snapshot ls s1 lacks %q:\n%s", want, text)
		}
	}
	out.Reset()
	if err := listSnapshots(ctx, st, "", "acme", true, true, true, &out); err != nil {
		t.Fatal(err)
	}
	var tots []tenantTotals
	if err := json.Unmarshal(out.Bytes(), &tots); err != nil {
		t.Fatal(err)
	}
	if len(tots) != 1 || tots[0].LogicalBytes != 2*int64(len(data))+9 || tots[0].Chunks != 1 || tots[0].ChunkBytes != int64(len(data)) || tots[0].Snapshots != 3 {
		t.Fatalf("totals = %+v", tots)
	}
	out.Reset()
	if err := listSnapshots(context.Background(), st, objectstore.SnapshotPrefix("acme", ""), "acme", false, false, true, &out); err != nil {
		t.Fatal(err)
	}
	var snaps []objectstore.Snapshot
	if err := json.Unmarshal(out.Bytes(), &snaps); err != nil || len(snaps) != 3 || snaps[0].Format != snapshot.Format || snaps[0].RootSHA256 != m.Root() {
		t.Fatalf("snapshot ls --json = %+v, %v", snaps, err)
	}
}
