package objectstore_test

import (
	"archive/tar"
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/snapshot"
	"github.com/paddock-dev/paddock/testenv"
)

// testManifest is a manifest of files (path -> content), with their
// parent directories.
func testManifest(files map[string]string) *snapshot.Manifest {
	m := &snapshot.Manifest{Version: snapshot.Version}
	dirs := map[string]bool{}
	for p, c := range files {
		for d := p; strings.Contains(d, "/"); {
			d = d[:strings.LastIndex(d, "/")]
			if !dirs[d] {
				dirs[d] = true
				m.Entries = append(m.Entries, snapshot.Entry{Path: d, Kind: snapshot.KindDir, Mode: 0o755})
			}
		}
		e := snapshot.Entry{Path: p, Kind: snapshot.KindFile, Mode: 0o644, Size: int64(len(c))}
		if c != "" {
			e.Chunks = []string{digestOf([]byte(c))}
		}
		m.Entries = append(m.Entries, e)
	}
	// Encode sorts; a decoded copy is in canonical order.
	d, err := snapshot.Decode(m.Encode(), snapshot.Limits{})
	if err != nil {
		panic(err)
	}
	return d
}

// tarOf is a workspace tar of files as ExportWorkspace writes it.
func tarOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	m := testManifest(files)
	for _, e := range m.Entries {
		h := &tar.Header{Name: e.Path, Mode: int64(e.Mode), Typeflag: tar.TypeReg, Size: e.Size}
		if e.Kind == snapshot.KindDir {
			h.Name, h.Typeflag = e.Path+"/", tar.TypeDir
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.Kind == snapshot.KindFile {
			if _, err := tw.Write([]byte(files[e.Path])); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestManifestRoundTrip: a manifest snapshot stores and reads back with
// its root checked; it lists beside a tar snapshot of the same session
// (both formats in Info, Snapshots, DeleteSnapshot), its Size counts the
// chunks its persist stored, an id is one snapshot whichever the format,
// and a tar snapshot reads as a manifest (ManifestOf).
func TestManifestRoundTrip(t *testing.T) {
	st := newStore(t)
	ctx := testenv.Context(t, 30*time.Second)
	files := map[string]string{"src/main.go": "package main\n", "README": "hello", "empty": ""}
	m := testManifest(files)
	up := objectstore.ChunkStats{Chunks: 2, Uploaded: 2, UploadedBytes: 18}
	snap, err := st.PutManifest(ctx, "t", "s", "m1", 7, m, up)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Format != snapshot.Format || snap.RootSHA256 != m.Root() || snap.SHA256 != m.Root() || snap.Seq != 7 ||
		snap.Members != len(m.Entries) || snap.Bytes != 18 || snap.Size <= 18 || snap.Name != "t/s/m1.manifest" {
		t.Fatalf("PutManifest = %+v", snap)
	}
	got, info, err := st.GetManifest(ctx, "t", "s", "m1", snapshot.Limits{})
	if err != nil || got.Root() != m.Root() || info.Size != snap.Size || info.RootSHA256 != snap.RootSHA256 {
		t.Fatalf("GetManifest = %+v, %+v, %v; want root %s", got, info, err, m.Root())
	}
	if _, err := st.PutManifest(ctx, "t", "s", "m1", 8, m, objectstore.ChunkStats{}); errcode.Of(err) != errcode.AlreadyExists {
		t.Fatalf("second PutManifest = %v, want already_exists", err)
	}
	tarBytes := tarOf(t, files)
	if _, err := st.Put(ctx, "t", "s", "m1", 9, bytes.NewReader(tarBytes), func() objectstore.Counts { return objectstore.Counts{} }); errcode.Of(err) != errcode.AlreadyExists {
		t.Fatalf("tar put under a manifest's id = %v, want already_exists", err)
	}
	if _, err := st.Put(ctx, "t", "s", "t1", 3, bytes.NewReader(tarBytes), func() objectstore.Counts { return objectstore.Counts{Members: 4, Bytes: 18} }); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutManifest(ctx, "t", "s", "t1", 8, m, objectstore.ChunkStats{}); errcode.Of(err) != errcode.AlreadyExists {
		t.Fatalf("manifest put under a tar's id = %v, want already_exists", err)
	}
	list, err := st.Snapshots(ctx, objectstore.SnapshotPrefix("t", "s"))
	if err != nil || len(list) != 2 || list[0].Format != snapshot.Format || list[1].Format != objectstore.FormatTar {
		t.Fatalf("Snapshots = %+v, %v; want the manifest and the tar", list, err)
	}
	if _, _, err := st.GetManifest(ctx, "t", "s", "t1", snapshot.Limits{}); errcode.Of(err) != errcode.InvalidRequest {
		t.Fatalf("GetManifest of a tar = %v, want invalid_request", err)
	}
	if _, err := st.Fetch(ctx, "t", "s", "m1", nil); errcode.Of(err) != errcode.InvalidRequest {
		t.Fatalf("Fetch of a manifest = %v, want invalid_request", err)
	}
	fromTar, tinfo, err := st.ManifestOf(ctx, "t", "s", "t1", snapshot.Limits{}, archive.Limits{})
	if err != nil || tinfo.Format != objectstore.FormatTar || fromTar.Root() != m.Root() {
		t.Fatalf("ManifestOf(tar) = %v (%+v); want root %s", err, tinfo, m.Root())
	}
	if d := snapshot.Diff(fromTar, got); len(d) != 0 {
		t.Fatalf("diff of the tar and the manifest of the same files = %+v, want none", d)
	}
	if err := st.DeleteSnapshot(ctx, "t", "s", "m1"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Info(ctx, "t", "s", "m1"); errcode.Of(err) != errcode.SnapshotNotFound {
		t.Fatalf("Info after delete = %v, want snapshot_not_found", err)
	}
	if _, _, err := st.GetManifest(ctx, "t", "s", "m1", snapshot.Limits{}); errcode.Of(err) != errcode.SnapshotNotFound {
		t.Fatalf("GetManifest after delete = %v, want snapshot_not_found", err)
	}
	if _, err := objectstore.ManifestName("t", "a/b", "x"); errcode.Of(err) != errcode.InvalidRequest {
		t.Fatalf("ManifestName with a bad session = %v, want invalid_request", err)
	}
	for name, ok := range map[string]bool{"t/s/x.manifest": true, "t/s/x.tar": true, "t/s/x": false, "chunks/t/" + digestOf(nil): false, "uploads/t/x.manifest": false} {
		if _, _, _, got := objectstore.ParseSnapshotName(name); got != ok {
			t.Errorf("ParseSnapshotName(%q) ok = %v, want %v", name, got, ok)
		}
	}
}

// TestManifestCorrupt: a manifest whose recorded root is not its own is
// a corrupt manifest (internal), never a workspace.
func TestManifestCorrupt(t *testing.T) {
	st := newStore(t)
	ctx := testenv.Context(t, 30*time.Second)
	m := testManifest(map[string]string{"a": "1"})
	snap, err := st.PutManifest(ctx, "t", "s", "m", 1, m, objectstore.ChunkStats{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Raw().GetInfo(ctx, snap.Name)
	if err != nil {
		t.Fatal(err)
	}
	meta := info.ObjectMeta
	meta.Metadata["root_sha256"] = digestOf([]byte("another workspace"))
	if err := st.Raw().UpdateMeta(ctx, snap.Name, meta); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.GetManifest(ctx, "t", "s", "m", snapshot.Limits{}); errcode.Of(err) != errcode.Internal || !strings.Contains(err.Error(), "corrupt manifest") {
		t.Fatalf("GetManifest of a forged root = %v, want internal corrupt manifest", err)
	}
	// Bytes that are not zstd under a manifest's name.
	name, _ := objectstore.ManifestName("t", "s", "junk")
	if _, _, err := st.PutObject(ctx, name, strings.NewReader("not a manifest")); err != nil {
		t.Fatal(err)
	}
	jinfo, err := st.Raw().GetInfo(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	jmeta := jinfo.ObjectMeta
	jmeta.Metadata = map[string]string{"format": snapshot.Format, "root_sha256": m.Root()}
	if err := st.Raw().UpdateMeta(ctx, name, jmeta); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.GetManifest(ctx, "t", "s", "junk", snapshot.Limits{}); errcode.Of(err) != errcode.Internal {
		t.Fatalf("GetManifest of junk = %v, want internal", err)
	}
}
