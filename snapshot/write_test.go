package snapshot

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/errcode"
)

// storeOf puts every chunk of a scanned tree in an in-memory store.
func storeOf(t testing.TB, s *Scanned) *chunkStore {
	t.Helper()
	store := newChunkStore()
	for d := range s.Manifest.ChunkSet() {
		data, err := s.Read(d)
		if err != nil {
			t.Fatal(err)
		}
		_ = store.put(d, data)
	}
	return store
}

// openRoot opens dir as an os.Root closed with the test.
func openRoot(t testing.TB, dir string) *os.Root {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return root
}

// TestWriteDirRoundTrip: a manifest written with WriteDir scans back to
// the same root, with and without the second hash.
func TestWriteDirRoundTrip(t *testing.T) {
	s := mustScan(t, testTree(t), nil)
	m := s.Manifest
	store := storeOf(t, s)
	for _, verified := range []bool{false, true} {
		out := t.TempDir()
		t.Cleanup(func() { _ = os.Chmod(filepath.Join(out, "ro"), 0o755) })
		st, err := WriteDir(context.Background(), openRoot(t, out), m, store.get, WriteOptions{Parallel: 4, Verified: verified})
		if err != nil {
			t.Fatal(err)
		}
		_, entries, logical := m.Stats()
		if st.Members != entries || st.Bytes != logical {
			t.Fatalf("stats %+v, want %d members, %d bytes", st, entries, logical)
		}
		if back := mustScan(t, out, nil); back.Manifest.Root() != m.Root() {
			t.Fatalf("round trip changed the tree:\n got %s\nwant %s", back.Manifest.Encode(), m.Encode())
		}
	}
}

// TestWriteDirOwners: with Chown, every entry (a symlink itself, not its
// target) belongs to the given user.
func TestWriteDirOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	s := mustScan(t, testTree(t), nil)
	out := t.TempDir()
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(out, "ro"), 0o755) })
	if _, err := WriteDir(context.Background(), openRoot(t, out), s.Manifest, storeOf(t, s).get,
		WriteOptions{Parallel: 2, Chown: true, UID: 4321, GID: 4322}); err != nil {
		t.Fatal(err)
	}
	for _, e := range s.Manifest.Entries {
		fi, err := os.Lstat(filepath.Join(out, e.Path))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != 4321 || st.Gid != 4322 {
			t.Fatalf("%s: owned by %d:%d, want 4321:4322", e.Path, st.Uid, st.Gid)
		}
	}
}

// TestWriteDirFailures: a corrupt or short chunk is internal, a get's
// error is returned, a manifest that does not validate is
// invalid_request, and a symlink leaving the workspace is invalid_archive
// (as through the tar path) with nothing written.
func TestWriteDirFailures(t *testing.T) {
	m, store := manifestOf(3)
	f := m.Entries[2]
	bad := func(ctx context.Context, d string) ([]byte, error) {
		b, err := store.get(ctx, d)
		if d == f.Chunks[1] {
			b = append([]byte{b[0] ^ 1}, b[1:]...)
		}
		return b, err
	}
	short := func(ctx context.Context, d string) ([]byte, error) {
		b, err := store.get(ctx, d)
		return b[:len(b)-1], err
	}
	missing := func(ctx context.Context, d string) ([]byte, error) {
		return nil, errcode.New(errcode.NotFound, "gone")
	}
	for _, tc := range []struct {
		name     string
		get      func(context.Context, string) ([]byte, error)
		verified bool
		want     errcode.Code
	}{
		{"corrupt", bad, false, errcode.Internal},
		{"short", short, true, errcode.Internal},
		{"missing", missing, true, errcode.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := WriteDir(context.Background(), openRoot(t, t.TempDir()), m, tc.get, WriteOptions{Parallel: 2, Verified: tc.verified})
			if errcode.Of(err) != tc.want {
				t.Fatalf("got %v, want %s", err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name string
		m    *Manifest
		want errcode.Code
	}{
		{"dotdot", &Manifest{Version: Version, Entries: []Entry{{Path: "../x", Kind: KindFile, Mode: 0o644}}}, errcode.InvalidRequest},
		{"absolute", &Manifest{Version: Version, Entries: []Entry{{Path: "/etc/x", Kind: KindFile, Mode: 0o644}}}, errcode.InvalidRequest},
		{"inner dotdot", &Manifest{Version: Version, Entries: []Entry{{Path: "a", Kind: KindDir, Mode: 0o755}, {Path: "a/../../x", Kind: KindFile, Mode: 0o644}}}, errcode.InvalidRequest},
		{"under a symlink", &Manifest{Version: Version, Entries: []Entry{{Path: "l", Kind: KindSymlink, Mode: 0o777, Target: "/etc"}, {Path: "l/passwd", Kind: KindFile, Mode: 0o644}}}, errcode.InvalidRequest},
		{"symlink out", &Manifest{Version: Version, Entries: []Entry{{Path: "l", Kind: KindSymlink, Mode: 0o777, Target: "../../../etc"}}}, errcode.InvalidArchive},
		{"symlink absolute", &Manifest{Version: Version, Entries: []Entry{{Path: "l", Kind: KindSymlink, Mode: 0o777, Target: "/etc"}}}, errcode.InvalidArchive},
		{"too many", m, errcode.InvalidArchive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			_, err := WriteDir(context.Background(), openRoot(t, out), tc.m, store.get, WriteOptions{Limits: archive.Limits{MaxMembers: 2}})
			if errcode.Of(err) != tc.want {
				t.Fatalf("got %v, want %s", err, tc.want)
			}
			if names, _ := os.ReadDir(out); len(names) != 0 {
				t.Fatalf("wrote %v before refusing", names)
			}
		})
	}
}

// TestWriteDirAttackSymlinks: symlinks that someone else plants in the
// directory, before the write or while it runs (in place of a directory
// it made), never lead a write outside it.
func TestWriteDirAttackSymlinks(t *testing.T) {
	m, store := manifestOf(2)
	m.Entries = append(m.Entries, Entry{Path: "d/y", Kind: KindFile, Mode: 0o644, Size: 1, Chunks: []string{digestOf("z")}})
	_ = store.put(digestOf("z"), []byte("z"))
	m.Entries[2], m.Entries[3] = m.Entries[3], m.Entries[2] // d, d/x, d/y, f
	if err := m.validate(Limits{}.withDefaults()); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"OUTSIDE", "../OUTSIDE", "../../"} {
		t.Run("before/"+target, func(t *testing.T) {
			base := t.TempDir()
			outside := filepath.Join(base, "OUTSIDE")
			ws := filepath.Join(base, "ws")
			for _, d := range []string{outside, ws} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if target == "OUTSIDE" {
				target = outside
			}
			for _, name := range []string{"d", "f"} {
				if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
					t.Fatal(err)
				}
			}
			_, err := WriteDir(context.Background(), openRoot(t, ws), m, store.get, WriteOptions{Parallel: 2})
			if errcode.Of(err) != errcode.RuntimeError {
				t.Fatalf("got %v, want runtime_error", err)
			}
			assertEmpty(t, outside)
		})
	}
	t.Run("during", func(t *testing.T) {
		base := t.TempDir()
		outside := filepath.Join(base, "OUTSIDE")
		ws := filepath.Join(base, "ws")
		for _, d := range []string{outside, ws} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		var once sync.Once
		// The first get swaps the directory d, already made, for a
		// symlink out: d/y is written after it.
		get := func(ctx context.Context, d string) ([]byte, error) {
			once.Do(func() {
				if err := os.Rename(filepath.Join(ws, "d"), filepath.Join(ws, "moved")); err != nil {
					t.Error(err)
				}
				if err := os.Symlink(outside, filepath.Join(ws, "d")); err != nil {
					t.Error(err)
				}
			})
			return store.get(ctx, d)
		}
		_, err := WriteDir(context.Background(), openRoot(t, ws), m, get, WriteOptions{Parallel: 1})
		if err == nil {
			t.Fatal("the write went through a planted symlink")
		}
		assertEmpty(t, outside)
	})
}

func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 0 {
		t.Fatalf("%s was written: %v", dir, names)
	}
}
