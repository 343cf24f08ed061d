package snapshot

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/testenv/wait"
)

// exportTar writes dir as the local runtime's ExportWorkspace does.
func exportTar(t testing.TB, dir string, skip archive.Skip) []byte {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var buf bytes.Buffer
	if _, err := archive.WriteDir(&buf, root, skip); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestScanAndFromTarAgree: a directory's manifest is the same whether
// scanned or read from its workspace export, skips included.
func TestScanAndFromTarAgree(t *testing.T) {
	dir := testTree(t)
	if err := os.Link(filepath.Join(dir, "one"), filepath.Join(dir, "a/hardlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "a/b"), 0o2775); err != nil { // setgid dir
		t.Fatal(err)
	}
	skip := func(rel string) bool { return rel == "a/b/c" }
	for _, sk := range []archive.Skip{nil, skip} {
		scanned, err := Scan(context.Background(), dir, sk, nil)
		if err != nil {
			t.Fatal(err)
		}
		store := newChunkStore()
		m, err := FromTar(context.Background(), bytes.NewReader(exportTar(t, dir, nil)), sk, archive.Limits{}, store.put)
		if err != nil {
			t.Fatal(err)
		}
		if m.Root() != scanned.Manifest.Root() {
			t.Fatalf("roots differ:\nscan %s\ntar  %s", scanned.Manifest.Encode(), m.Encode())
		}
		for d, n := range m.ChunkSet() {
			if int64(len(store.chunks[d])) != n {
				t.Fatalf("chunk %s: put %d bytes, want %d", d, len(store.chunks[d]), n)
			}
		}
		if sk != nil {
			if _, ok := m.Lookup("a/b/c/big"); ok {
				t.Fatal("a skipped directory's member is in the manifest")
			}
		}
	}
}

// TestWriteTarRoundTrip: WriteTar's output passes archive's checks and
// extracts to a tree whose scan has the manifest's root.
func TestWriteTarRoundTrip(t *testing.T) {
	dir := testTree(t)
	s := mustScan(t, dir, nil)
	m := s.Manifest
	store := newChunkStore()
	for d := range m.ChunkSet() {
		data, err := s.Read(d)
		if err != nil {
			t.Fatal(err)
		}
		_ = store.put(d, data)
	}
	var buf bytes.Buffer
	st, err := WriteTar(context.Background(), &buf, m, store.get, 3)
	if err != nil {
		t.Fatal(err)
	}
	files, entries, logical := m.Stats()
	if st.Members != entries || st.Bytes != logical || files != 7 {
		t.Fatalf("stats %+v, want %d members, %d bytes", st, entries, logical)
	}
	if cst, err := archive.Check(bytes.NewReader(buf.Bytes()), archive.Limits{}); err != nil || cst.Members != entries {
		t.Fatalf("archive.Check: %+v, %v", cst, err)
	}
	out := t.TempDir()
	root, err := os.OpenRoot(out)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := archive.Extract(root, bytes.NewReader(buf.Bytes()), archive.Limits{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(out, "ro"), 0o755) })
	back := mustScan(t, out, nil)
	if back.Manifest.Root() != m.Root() {
		t.Fatalf("round trip changed the tree:\n got %s\nwant %s", back.Manifest.Encode(), m.Encode())
	}
	// And the export of the extracted tree reads back to the same root.
	again, err := FromTar(context.Background(), bytes.NewReader(exportTar(t, out, nil)), nil, archive.Limits{}, store.put)
	if err != nil || again.Root() != m.Root() {
		t.Fatalf("FromTar of the extracted tree: %v", err)
	}
}

// tarOf builds a tar of the given headers; a regular member's content is
// its name unless data gives one.
func tarOf(t testing.TB, hs []*tar.Header, data map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hs {
		var body []byte
		if h.Typeflag == tar.TypeReg {
			body = []byte(h.Name)
			if d, ok := data[h.Name]; ok {
				body = d
			}
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestFromTarMembers(t *testing.T) {
	big := content(5, 2*ChunkSize+1)
	b := tarOf(t, []*tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "x/y/file", Typeflag: tar.TypeReg, Mode: 0o640}, // parents x, x/y not listed
		{Name: "x/", Typeflag: tar.TypeDir, Mode: 0o700},       // listed later: its mode wins
		{Name: "x/y/hard", Typeflag: tar.TypeLink, Linkname: "x/y/file", Mode: 0o777},
		{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "skip/me", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "x/y", Mode: 0o644},
	}, map[string][]byte{"big": big})
	store := newChunkStore()
	m, err := FromTar(context.Background(), bytes.NewReader(b), func(rel string) bool { return rel == "skip" }, archive.Limits{}, store.put)
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{Path: "big", Kind: KindFile, Mode: 0o644, Size: int64(len(big)), Chunks: []string{
			digestOf(string(big[:ChunkSize])), digestOf(string(big[ChunkSize : 2*ChunkSize])), digestOf(string(big[2*ChunkSize:]))}},
		{Path: "l", Kind: KindSymlink, Mode: 0o777, Target: "x/y"},
		{Path: "x", Kind: KindDir, Mode: 0o700},
		{Path: "x/y", Kind: KindDir, Mode: 0o755},
		{Path: "x/y/file", Kind: KindFile, Mode: 0o640, Size: 8, Chunks: []string{digestOf("x/y/file")}},
		{Path: "x/y/hard", Kind: KindFile, Mode: 0o640, Size: 8, Chunks: []string{digestOf("x/y/file")}},
	}
	if got, w := string(m.Encode()), string((&Manifest{Entries: want}).Encode()); got != w {
		t.Fatalf("manifest:\n got %s\nwant %s", got, w)
	}
	if store.puts != 4 || len(store.chunks) != 4 {
		t.Fatalf("put %d chunks (%d distinct), want 4 (skip/me is read past and the hard link shares its target's)", store.puts, len(store.chunks))
	}
}

func TestFromTarRefuses(t *testing.T) {
	cases := []struct {
		name string
		hs   []*tar.Header
		lim  archive.Limits
	}{
		{"climbs", []*tar.Header{{Name: "../x", Typeflag: tar.TypeReg}}, archive.Limits{}},
		{"absolute", []*tar.Header{{Name: "/etc/x", Typeflag: tar.TypeReg}}, archive.Limits{}},
		{"symlink out", []*tar.Header{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../../etc"}}, archive.Limits{}},
		{"under symlink", []*tar.Header{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "d"}, {Name: "l/x", Typeflag: tar.TypeReg}}, archive.Limits{}},
		{"under a file", []*tar.Header{{Name: "f", Typeflag: tar.TypeReg}, {Name: "f/x", Typeflag: tar.TypeReg}}, archive.Limits{}},
		{"dir over file", []*tar.Header{{Name: "f", Typeflag: tar.TypeReg}, {Name: "f/", Typeflag: tar.TypeDir}}, archive.Limits{}},
		{"file over dir", []*tar.Header{{Name: "d/", Typeflag: tar.TypeDir}, {Name: "d", Typeflag: tar.TypeReg}}, archive.Limits{}},
		{"fifo", []*tar.Header{{Name: "p", Typeflag: tar.TypeFifo}}, archive.Limits{}},
		{"device", []*tar.Header{{Name: "sda", Typeflag: tar.TypeBlock}}, archive.Limits{}},
		{"hardlink out", []*tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}}, archive.Limits{}},
		{"members", []*tar.Header{{Name: "a", Typeflag: tar.TypeReg}, {Name: "b", Typeflag: tar.TypeReg}}, archive.Limits{MaxMembers: 1}},
		{"bytes", []*tar.Header{{Name: "abcdef", Typeflag: tar.TypeReg}}, archive.Limits{MaxExtractedBytes: 5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := tarOf(t, c.hs, nil)
			m, err := FromTar(context.Background(), bytes.NewReader(b), nil, c.lim, newChunkStore().put)
			if errcode.Of(err) != errcode.InvalidArchive || m != nil {
				t.Fatalf("got %v, want invalid_archive", err)
			}
		})
	}
	// Not a tar at all, and a truncated one.
	if _, err := FromTar(context.Background(), bytes.NewReader(bytes.Repeat([]byte("x"), 1024)), nil, archive.Limits{}, newChunkStore().put); errcode.Of(err) != errcode.InvalidArchive {
		t.Fatalf("garbage: got %v, want invalid_archive", err)
	}
	b := tarOf(t, []*tar.Header{{Name: "f", Typeflag: tar.TypeReg}}, map[string][]byte{"f": content(1, 5000)})
	if _, err := FromTar(context.Background(), bytes.NewReader(b[:2048]), nil, archive.Limits{}, newChunkStore().put); errcode.Of(err) != errcode.InvalidArchive {
		t.Fatalf("truncated: got %v, want invalid_archive", err)
	}
	// put's error aborts the read and comes back.
	boom := errors.New("store is down")
	b = tarOf(t, []*tar.Header{{Name: "f", Typeflag: tar.TypeReg}, {Name: "g", Typeflag: tar.TypeReg}}, nil)
	puts := 0
	_, err := FromTar(context.Background(), bytes.NewReader(b), nil, archive.Limits{}, func(string, []byte) error { puts++; return boom })
	if !errors.Is(err, boom) || puts != 1 {
		t.Fatalf("put error: got %v after %d puts, want %v after 1", err, puts, boom)
	}
}

// manifestOf returns a manifest of one file of n distinct full chunks
// and a store holding them.
func manifestOf(n int) (*Manifest, *chunkStore) {
	store := newChunkStore()
	e := Entry{Path: "f", Kind: KindFile, Mode: 0o644, Size: int64(n) * ChunkSize}
	for i := range n {
		data := content(uint64(100+i), ChunkSize)
		d := digestOf(string(data))
		_ = store.put(d, data)
		e.Chunks = append(e.Chunks, d)
	}
	return &Manifest{Version: Version, Entries: []Entry{{Path: "d", Kind: KindDir, Mode: 0o755}, {Path: "d/x", Kind: KindSymlink, Mode: 0o777, Target: "../f"}, e}}, store
}

// countingWriter counts what passed through it.
type countingWriter struct{ n atomic.Int64 }

func (w *countingWriter) Write(p []byte) (int, error) { w.n.Add(int64(len(p))); return len(p), nil }

// TestWriteTarPrefetchIsBoundedAndOrdered: with parallel gets ahead of the
// writer, a get for chunk i never starts while more than parallel+1
// chunks would be held, and the file's bytes come out in order.
func TestWriteTarPrefetchIsBoundedAndOrdered(t *testing.T) {
	const n, parallel = 12, 3
	m, store := manifestOf(n)
	index := map[string]int{}
	for i, d := range m.Entries[2].Chunks {
		index[d] = i
	}
	w := &countingWriter{}
	var maxAhead, inFlight, maxInFlight atomic.Int64
	get := func(ctx context.Context, d string) ([]byte, error) {
		// Headers are far below a chunk, so whole chunks written is
		// floor(bytes/ChunkSize): each chunk reaches w in one Write.
		consumed := w.n.Load() / ChunkSize
		held := int64(index[d]) - consumed + 1
		for v := maxAhead.Load(); held > v && !maxAhead.CompareAndSwap(v, held); v = maxAhead.Load() {
		}
		f := inFlight.Add(1)
		defer inFlight.Add(-1)
		for v := maxInFlight.Load(); f > v && !maxInFlight.CompareAndSwap(v, f); v = maxInFlight.Load() {
		}
		if index[d]%5 == 0 {
			runtime.Gosched() // let the others run ahead
		}
		return store.get(ctx, d)
	}
	var buf bytes.Buffer
	st, err := WriteTar(context.Background(), io.MultiWriter(&buf, w), m, get, parallel)
	if err != nil {
		t.Fatal(err)
	}
	if st.Bytes != n*ChunkSize || st.Members != 3 {
		t.Fatalf("stats %+v", st)
	}
	if got := maxAhead.Load(); got > parallel+1 {
		t.Fatalf("a get started with %d chunks held, want at most %d", got, parallel+1)
	}
	if got := maxInFlight.Load(); got > parallel+1 {
		t.Fatalf("%d gets in flight, want at most %d", got, parallel+1)
	}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatal(err)
		}
		if h.Name != "f" {
			continue
		}
		for i := range n {
			chunk := make([]byte, ChunkSize)
			if _, err := io.ReadFull(tr, chunk); err != nil || !bytes.Equal(chunk, content(uint64(100+i), ChunkSize)) {
				t.Fatalf("chunk %d out of order or wrong (%v)", i, err)
			}
		}
		break
	}
}

func TestWriteTarFailures(t *testing.T) {
	m, store := manifestOf(12)
	ctx := context.Background()

	// A get's error aborts the write with that error.
	boom := errors.New("object store down")
	var calls atomic.Int64
	_, err := WriteTar(ctx, io.Discard, m, func(ctx context.Context, d string) ([]byte, error) {
		if calls.Add(1) == 5 {
			return nil, boom
		}
		return store.get(ctx, d)
	}, 4)
	if !errors.Is(err, boom) {
		t.Fatalf("get error: got %v, want %v", err, boom)
	}

	// A chunk that is not what its digest says: internal "corrupt chunk".
	_, err = WriteTar(ctx, io.Discard, m, func(ctx context.Context, d string) ([]byte, error) {
		data, err := store.get(ctx, d)
		if d == m.Entries[2].Chunks[7] {
			data = bytes.Clone(data)
			data[0] ^= 1
		}
		return data, err
	}, 4)
	if errcode.Of(err) != errcode.Internal {
		t.Fatalf("corrupt chunk: got %v, want internal", err)
	}

	// Cancelling ctx stops it, and no get outlives the call.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var started, returned atomic.Int64
	done := make(chan error, 1)
	go func() {
		_, err := WriteTar(cctx, io.Discard, m, func(ctx context.Context, d string) ([]byte, error) {
			started.Add(1)
			defer returned.Add(1)
			<-ctx.Done() // a get that never completes on its own
			return nil, ctx.Err()
		}, 4)
		done <- err
	}()
	wait.Eventually(t, 10*time.Second, func() error {
		if started.Load() == 0 {
			return fmt.Errorf("no get started")
		}
		return nil
	})
	cancel()
	var werr error
	wait.Eventually(t, 10*time.Second, func() error {
		select {
		case werr = <-done:
			return nil
		default:
			return fmt.Errorf("WriteTar still running")
		}
	})
	if !errors.Is(werr, context.Canceled) {
		t.Fatalf("cancelled: got %v, want context.Canceled", werr)
	}
	if s, r := started.Load(), returned.Load(); s != r {
		t.Fatalf("%d gets started, %d returned when WriteTar returned", s, r)
	}

	// A manifest that does not validate is refused before any get.
	bad := &Manifest{Version: Version, Entries: []Entry{{Path: "../x", Kind: KindDir}}}
	if _, err := WriteTar(ctx, io.Discard, bad, store.get, 1); errcode.Of(err) != errcode.InvalidRequest {
		t.Fatalf("bad manifest: got %v, want invalid_request", err)
	}
	// A missing chunk: the get's not_found comes back.
	delete(store.chunks, m.Entries[2].Chunks[3])
	if _, err := WriteTar(ctx, io.Discard, m, store.get, 2); errcode.Of(err) != errcode.NotFound {
		t.Fatalf("missing chunk: got %v, want not_found", err)
	}
}

// TestWriteTarHostileManifest is an attack: a manifest that decodes (a
// symlink leading out of the workspace) makes a tar the importer's checks
// refuse, and no manifest can place a member under a symlink.
func TestWriteTarHostileManifest(t *testing.T) {
	m, err := Decode([]byte(`{"version":1,"entries":[{"path":"l","kind":"symlink","mode":511,"target":"../../../etc"}]}`), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := WriteTar(context.Background(), &buf, m, newChunkStore().get, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := archive.Check(bytes.NewReader(buf.Bytes()), archive.Limits{}); errcode.Of(err) != errcode.InvalidArchive {
		t.Fatalf("the importer's check: got %v, want invalid_archive", err)
	}
	through := `{"version":1,"entries":[{"path":"l","kind":"symlink","mode":511,"target":"/etc"},{"path":"l/passwd","kind":"file","mode":420}]}`
	if _, err := Decode([]byte(through), Limits{}); errcode.Of(err) != errcode.InvalidRequest {
		t.Fatalf("a member under a symlink: got %v, want invalid_request", err)
	}
}
