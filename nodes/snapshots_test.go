package nodes_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/snapshot"
	"github.com/paddock-dev/paddock/testenv"
)

// snapStack starts a stack whose one node runs runtime kind k with cfg
// (a chunk cache of its own unless cfg names one).
func snapStack(t *testing.T, k runtimeKind, cfg nodes.Config) (*testenv.Stack, string) {
	t.Helper()
	if cfg.ID == "" {
		cfg.ID = "snap-" + uuid.NewString()[:8]
	}
	if cfg.ChunkCacheDir == "" {
		cfg.ChunkCacheDir = t.TempDir()
	}
	st := testenv.StartStack(t, testenv.StackOptions{Node: cfg, Runtimes: []runtime.Runtime{k.make(t, cfg.ID)}})
	return st, k.image(t)
}

// lastFinishData decodes the data of the session's last finish of op.
func lastFinishData[T any](t *testing.T, st *testenv.Stack, id string, op commands.Op) T {
	t.Helper()
	ev := lastFinish(t, st, id, op, 10*time.Second)
	d, err := events.DecodeData[T](ev)
	if err != nil {
		t.Fatalf("%s finish data %s: %v", op, ev.Data, err)
	}
	return d
}

// store opens the stack's snapshot store.
func store(t *testing.T, st *testenv.Stack) *objectstore.Store {
	t.Helper()
	s, err := objectstore.Open(testenv.Context(t, 10*time.Second), st.JS, "")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// mibFiles writes n files of 1 MiB of random bytes each (f0..f<n-1>)
// under dir d, plus a small text file and a symlink.
func mibFiles(n int) string {
	return fmt.Sprintf(`mkdir -p d && i=0 && while [ $i -lt %d ]; do head -c 1048576 /dev/urandom > d/f$i; i=$((i+1)); done && echo hello > note.txt && ln -sf note.txt link`, n)
}

// TestIncrementalPersist: on both runtimes, a manifest persist uploads
// every chunk once; after one 1 MiB file changes, the next uploads exactly
// that chunk; with nothing changed the persist stores nothing and records
// the snapshot it already had (same id, same root), and the finish events
// carry the root digest the chain signs.
func TestIncrementalPersist(t *testing.T) {
	for _, k := range runtimeKinds() {
		t.Run(k.name, func(t *testing.T) {
			st, image := snapStack(t, k, nodes.Config{})
			ctx := testenv.Context(t, 5*time.Minute)
			s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: k.name, Image: image})
			if err != nil {
				t.Fatal(err)
			}
			shell(t, st, s.SessionID, mibFiles(8))
			first, err := st.Client.Persist(ctx, s.SessionID)
			if err != nil {
				t.Fatal(err)
			}
			if first.Format != snapshot.Format || len(first.RootSHA256) != 64 || first.SHA256 != first.RootSHA256 {
				t.Fatalf("first snapshot = %+v; want a manifest with its root", first)
			}
			d := lastFinishData[events.SnapshotFinish](t, st, s.SessionID, commands.OpPersist)
			if d.Chunks == nil || d.Chunks.Chunks != 9 || d.Chunks.Uploaded != 9 || d.Unchanged || d.Snapshot.RootSHA256 != first.RootSHA256 {
				t.Fatalf("first persist finish = %+v chunks %+v; want 9 chunks (8 files, the note) all uploaded", d, d.Chunks)
			}
			shell(t, st, s.SessionID, `head -c 1048576 /dev/urandom > d/f3`)
			second, err := st.Client.Persist(ctx, s.SessionID)
			if err != nil {
				t.Fatal(err)
			}
			d = lastFinishData[events.SnapshotFinish](t, st, s.SessionID, commands.OpPersist)
			if second.ID == first.ID || second.RootSHA256 == first.RootSHA256 || d.Chunks.Uploaded != 1 || d.Chunks.UploadedBytes != 1<<20 || d.Chunks.Skipped != 8 {
				t.Fatalf("persist after a 1 MiB change = %+v chunks %+v; want one chunk of 1 MiB uploaded, 8 skipped", second, d.Chunks)
			}
			names := func() int {
				snaps, err := store(t, st).Snapshots(ctx, "default/"+s.SessionID+"/")
				if err != nil {
					t.Fatal(err)
				}
				return len(snaps)
			}
			stored := names()
			third, err := st.Client.Persist(ctx, s.SessionID)
			if err != nil {
				t.Fatal(err)
			}
			d = lastFinishData[events.SnapshotFinish](t, st, s.SessionID, commands.OpPersist)
			if third.ID != second.ID || third.RootSHA256 != second.RootSHA256 || !d.Unchanged || d.Chunks.Uploaded != 0 {
				t.Fatalf("persist with nothing changed = %+v (finish %+v); want snapshot %s again, unchanged", third, d, second.ID)
			}
			// The node scans the workspace on the host (local; Docker's
			// loopfs) with its hash cache: once no file is racily clean
			// (written within a second of the scan), a persist reads none.
			testenv.Eventually(t, 30*time.Second, func() error {
				if _, err := st.Client.Persist(ctx, s.SessionID); err != nil {
					return err
				}
				d := lastFinishData[events.SnapshotFinish](t, st, s.SessionID, commands.OpPersist)
				if !d.Unchanged || d.Chunks.HashedFiles != 0 {
					return fmt.Errorf("unchanged persist hashed %d files (unchanged %v); want the hash cache to vouch for all", d.Chunks.HashedFiles, d.Unchanged)
				}
				return nil
			})
			if got := names(); got != stored || stored != 2 {
				t.Fatalf("snapshots stored: %d, then %d after an unchanged persist; want 2 and 2", stored, got)
			}
			// A stop of the unchanged workspace records the same snapshot too.
			if err := st.Client.Stop(ctx, s.SessionID); err != nil {
				t.Fatal(err)
			}
			stop := lastFinishData[events.SnapshotFinish](t, st, s.SessionID, commands.OpStop)
			if !stop.Unchanged || stop.Snapshot.ID != second.ID {
				t.Fatalf("stop finish = %+v; want snapshot %s, unchanged", stop, second.ID)
			}
			if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
				t.Fatal(err)
			}
			checkHashChain(t, st.Log, "default", s.SessionID)
		})
	}
}

// TestRestoreChunkCache: on both runtimes, a resume that re-creates the
// sandbox on a node whose chunk cache is empty fetches every chunk from
// the store; the next one, with the cache warm, fetches none; the
// workspace comes back byte for byte either way.
func TestRestoreChunkCache(t *testing.T) {
	for _, k := range runtimeKinds() {
		t.Run(k.name, func(t *testing.T) {
			st, image := snapStack(t, k, nodes.Config{})
			ctx := testenv.Context(t, 5*time.Minute)
			s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: k.name, Image: image})
			if err != nil {
				t.Fatal(err)
			}
			shell(t, st, s.SessionID, mibFiles(4)+` && mkdir -p e/f && chmod 700 e && : > e/f/empty`)
			want := tree(t, st, s.SessionID)
			if _, err := st.Client.Persist(ctx, s.SessionID); err != nil {
				t.Fatal(err)
			}
			for i, wantFetched := range []int{5, 0} {
				if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
					t.Fatal(err)
				}
				res, err := st.Client.Resume(ctx, s.SessionID, nil)
				if err != nil || !res.Restored {
					t.Fatalf("resume %d = %+v, %v", i, res, err)
				}
				d := lastFinishData[events.ResumeFinish](t, st, s.SessionID, commands.OpResume)
				if d.Chunks == nil || d.Chunks.Chunks != 5 || d.Chunks.Fetched != wantFetched || d.Chunks.Cached != 5-wantFetched {
					t.Fatalf("resume %d chunks = %+v; want %d fetched, %d from the cache", i, d.Chunks, wantFetched, 5-wantFetched)
				}
				if got := tree(t, st, s.SessionID); got != want {
					t.Fatalf("workspace after resume %d: %s", i, testenv.FirstDiff(got, want))
				}
			}
			// The same through a tar into the runtime's staging, as for a
			// runtime that cannot stage on the host.
			nodes.SetTarRestore(st.Agent, true)
			if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
				t.Fatal(err)
			}
			if res, err := st.Client.Resume(ctx, s.SessionID, nil); err != nil || !res.Restored {
				t.Fatalf("resume through a tar = %+v, %v", res, err)
			}
			if d := lastFinishData[events.ResumeFinish](t, st, s.SessionID, commands.OpResume); d.Chunks == nil || d.Chunks.Cached != 5 {
				t.Fatalf("resume through a tar: chunks %+v; want 5 from the cache", d.Chunks)
			}
			if got := tree(t, st, s.SessionID); got != want {
				t.Fatalf("workspace after a resume through a tar: %s", testenv.FirstDiff(got, want))
			}
			if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestTarSnapshotsStillRestorable: a session persisted as a tar by a node
// configured for tar is resumed (taken over) and hydrated by a node
// configured for manifests, whose next persist is a manifest.
func TestTarSnapshotsStillRestorable(t *testing.T) {
	for _, k := range runtimeKinds() {
		t.Run(k.name, func(t *testing.T) {
			image := k.image(t)
			st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
			ctx := testenv.Context(t, 5*time.Minute)
			nodeA, nodeB := "tar-"+uuid.NewString()[:8], "man-"+uuid.NewString()[:8]
			rtA := k.make(t, nodeA)
			a := startAgent(t, st, nodes.Config{ID: nodeA, Snapshots: nodes.SnapshotsTar}, rtA)
			s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: k.name, Image: image})
			if err != nil {
				t.Fatal(err)
			}
			shell(t, st, s.SessionID, mibFiles(2))
			want := tree(t, st, s.SessionID)
			snap, err := st.Client.Persist(ctx, s.SessionID)
			if err != nil || snap.Format != objectstore.FormatTar || snap.RootSHA256 != "" {
				t.Fatalf("tar persist = %+v, %v", snap, err)
			}
			if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
				t.Fatal(err)
			}
			if err := a.Close(ctx); err != nil {
				t.Fatal(err)
			}
			startAgent(t, st, nodes.Config{ID: nodeB, ChunkCacheDir: t.TempDir()}, k.make(t, nodeB))
			waitNode(t, st, nodeB)
			res, err := st.Client.Resume(ctx, s.SessionID, nil)
			if err != nil || res.Node != nodeB || !res.Restored || res.SnapshotID != snap.ID {
				t.Fatalf("resume on the manifest node = %+v, %v", res, err)
			}
			if got := tree(t, st, s.SessionID); got != want {
				t.Fatalf("workspace restored from the tar: %s", testenv.FirstDiff(got, want))
			}
			shell(t, st, s.SessionID, `echo more > more.txt`)
			if _, err := st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: snap.ID}); err != nil {
				t.Fatal(err)
			}
			h := lastFinishData[events.HydrateFinish](t, st, s.SessionID, commands.OpHydrate)
			if got := tree(t, st, s.SessionID); got != want || h.Changes == nil || h.Changes.Removed != 1 || h.Changes.Created+h.Changes.Modified != 0 {
				t.Fatalf("hydrate of the tar: changes %+v; workspace %s", h.Changes, testenv.FirstDiff(got, want))
			}
			next, err := st.Client.Persist(ctx, s.SessionID)
			if err != nil || next.Format != snapshot.Format {
				t.Fatalf("persist on the manifest node = %+v, %v", next, err)
			}
			if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
				t.Fatal(err)
			}
			checkHashChain(t, st.Log, "default", s.SessionID)
		})
	}
}

// waitNode waits until the scheduler knows node.
func waitNode(t *testing.T, st *testenv.Stack, node string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		for _, n := range st.Scheduler.Nodes() {
			if n.Node == node {
				return nil
			}
		}
		return fmt.Errorf("node %s not registered yet", node)
	})
}

// TestResumeAt: resume --at restores the last snapshot recorded at or
// before the seq, in place while the sandbox runs and into a re-created
// one after a shutdown; a seq before any snapshot is not_found, and so is
// a take-over's.
func TestResumeAt(t *testing.T) {
	for _, k := range runtimeKinds() {
		t.Run(k.name, func(t *testing.T) {
			st, image := snapStack(t, k, nodes.Config{})
			ctx := testenv.Context(t, 5*time.Minute)
			s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: k.name, Image: image})
			if err != nil {
				t.Fatal(err)
			}
			shell(t, st, s.SessionID, `echo one > v`)
			v1, err := st.Client.Persist(ctx, s.SessionID)
			if err != nil {
				t.Fatal(err)
			}
			shell(t, st, s.SessionID, `echo two > v && echo x > extra`)
			v2, err := st.Client.Persist(ctx, s.SessionID)
			if err != nil {
				t.Fatal(err)
			}
			shell(t, st, s.SessionID, `echo three > v`)
			res, err := st.Client.ResumeWith(ctx, s.SessionID, commands.ResumeArgs{AtSeq: v2.Seq - 1})
			if err != nil || !res.Restored || res.SnapshotID != v1.ID {
				t.Fatalf("resume --at %d = %+v, %v; want %s restored", v2.Seq-1, res, err, v1.ID)
			}
			d := lastFinishData[events.ResumeFinish](t, st, s.SessionID, commands.OpResume)
			if d.SnapshotSeq != v1.Seq || d.SnapshotID != v1.ID {
				t.Fatalf("resume finish = %+v; want snapshot %s at seq %d", d, v1.ID, v1.Seq)
			}
			if got := shell(t, st, s.SessionID, `cat v; ls`); got != "one\nv" {
				t.Fatalf("workspace after resume --at v1: %q", got)
			}
			if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
				t.Fatal(err)
			}
			res, err = st.Client.ResumeWith(ctx, s.SessionID, commands.ResumeArgs{AtSeq: v2.Seq})
			if err != nil || !res.Restored || res.SnapshotID != v2.ID || res.Epoch != 2 {
				t.Fatalf("resume --at %d after shutdown = %+v, %v; want %s at epoch 2", v2.Seq, res, err, v2.ID)
			}
			if got := shell(t, st, s.SessionID, `cat v extra`); got != "two\nx" {
				t.Fatalf("workspace after resume --at v2: %q", got)
			}
			_, err = st.Client.ResumeWith(ctx, s.SessionID, commands.ResumeArgs{AtSeq: v1.Seq - 1})
			if errcode.Of(err) != errcode.NotFound {
				t.Fatalf("resume --at before any snapshot: %v; want not_found", err)
			}
			if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHydrateChanges: a hydrate's finish records exactly what it changed
// (created, modified, removed, bytes), on both runtimes; past
// commands.MaxChangedPaths the paths are cut and marked truncated.
func TestHydrateChanges(t *testing.T) {
	for _, k := range runtimeKinds() {
		t.Run(k.name, func(t *testing.T) {
			st, image := snapStack(t, k, nodes.Config{})
			ctx := testenv.Context(t, 5*time.Minute)
			s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: k.name, Image: image})
			if err != nil {
				t.Fatal(err)
			}
			shell(t, st, s.SessionID, `echo a > a && echo bb > b && echo ccc > c`)
			snap, err := st.Client.Persist(ctx, s.SessionID)
			if err != nil {
				t.Fatal(err)
			}
			shell(t, st, s.SessionID, `echo changed > b && rm c && echo d > d`)
			if _, err := st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: snap.ID}); err != nil {
				t.Fatal(err)
			}
			h := lastFinishData[events.HydrateFinish](t, st, s.SessionID, commands.OpHydrate)
			want := commands.Changes{Created: 1, Modified: 1, Removed: 1, BytesWritten: 3 + 4, Observed: commands.ObservedExact,
				Paths: []commands.ChangedPath{{Path: "b", Change: "modified"}, {Path: "c", Change: "created"}, {Path: "d", Change: "removed"}}}
			if h.Changes == nil || fmt.Sprint(*h.Changes) != fmt.Sprint(want) {
				t.Fatalf("hydrate changes = %+v; want %+v", h.Changes, want)
			}
			if h.Chunks == nil || h.Chunks.Chunks != 3 {
				t.Fatalf("hydrate chunks = %+v; want 3", h.Chunks)
			}
			shell(t, st, s.SessionID, `i=0; while [ $i -lt 40 ]; do echo $i > n$i; i=$((i+1)); done`)
			if _, err := st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: snap.ID}); err != nil {
				t.Fatal(err)
			}
			h = lastFinishData[events.HydrateFinish](t, st, s.SessionID, commands.OpHydrate)
			if c := h.Changes; c == nil || c.Removed != 40 || c.Created+c.Modified != 0 || len(c.Paths) != commands.MaxChangedPaths || !c.Truncated {
				t.Fatalf("hydrate over 40 new files: changes %+v; want 40 removed, %d paths, truncated", c, commands.MaxChangedPaths)
			}
			if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRestoreSnapshotConfined: a hydrate names a snapshot by id only,
// within its own session and tenant: another tenant's snapshot id is
// snapshot_not_found, a malformed one invalid_request, and the workspace
// is untouched.
func TestRestoreSnapshotConfined(t *testing.T) {
	st, _ := snapStack(t, runtimeKinds()[0], nodes.Config{})
	ctx := testenv.Context(t, 2*time.Minute)
	other, err := client.New(st.ClientConn, client.Options{Tenant: "other"})
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := other.Create(ctx, commands.CreateArgs{Runtime: "local"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.WriteFile(ctx, theirs.SessionID, "secret.txt", []byte("theirs"), 0o600); err != nil {
		t.Fatal(err)
	}
	snap, err := other.Persist(ctx, theirs.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	mine, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "local"})
	if err != nil {
		t.Fatal(err)
	}
	shell(t, st, mine.SessionID, `echo mine > mine.txt`)
	for id, code := range map[string]errcode.Code{snap.ID: errcode.SnapshotNotFound, "../" + snap.ID: errcode.InvalidRequest} {
		_, err := st.Client.Hydrate(ctx, mine.SessionID, commands.HydrateArgs{SnapshotID: id})
		if errcode.Of(err) != code {
			t.Errorf("hydrate with snapshot %q: %v; want %s", id, err, code)
		}
	}
	if got := shell(t, st, mine.SessionID, `ls`); got != "mine.txt" {
		t.Fatalf("workspace after refused hydrates: %q", got)
	}
}

// TestPersistSymlinkSwapAttack: while persists run, the sandbox keeps
// swapping a file of its workspace for a symlink to a host file outside
// it (and a directory for a symlink to a host directory). The host path
// scan never follows one: no chunk of the host file's content is ever
// stored or cached, and every persist either stores the workspace as it
// was seen or fails with concurrency_conflict.
func TestPersistSymlinkSwapAttack(t *testing.T) {
	dir := t.TempDir()
	rt, err := local.New(local.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	secretDir := t.TempDir()
	secret := []byte("HOST SECRET " + uuid.NewString() + "\n")
	if err := os.WriteFile(filepath.Join(secretDir, "shadow"), secret, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(secret)
	secretDigest := hex.EncodeToString(sum[:])
	cacheDir := t.TempDir()
	st := testenv.StartStack(t, testenv.StackOptions{Node: nodes.Config{ChunkCacheDir: cacheDir}, Runtimes: []runtime.Runtime{rt}})
	ctx := testenv.Context(t, 3*time.Minute)
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "local"})
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "default", s.SessionID, "workspace")
	shell(t, st, s.SessionID, `echo plain > f && mkdir -p sub && echo inner > sub/shadow`)
	// The sandbox's side: swap f and sub back and forth by rename, as a
	// process in it could, until the persists are done.
	swapCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; swapCtx.Err() == nil; i++ {
			tmp := filepath.Join(ws, fmt.Sprintf(".swap%d", i%2))
			_ = os.Symlink(filepath.Join(secretDir, "shadow"), tmp)
			_ = os.Rename(tmp, filepath.Join(ws, "f"))
			_ = os.WriteFile(tmp, []byte("plain\n"), 0o644)
			_ = os.Rename(tmp, filepath.Join(ws, "f"))
			_ = os.RemoveAll(filepath.Join(ws, "sub"))
			_ = os.Symlink(secretDir, filepath.Join(ws, "sub"))
			_ = os.Remove(filepath.Join(ws, "sub"))
			_ = os.Mkdir(filepath.Join(ws, "sub"), 0o755)
			_ = os.WriteFile(filepath.Join(ws, "sub", "shadow"), []byte("inner\n"), 0o644)
		}
	})
	persisted, conflicts := 0, 0
	for range 20 {
		_, err := st.Client.Persist(ctx, s.SessionID)
		switch {
		case err == nil:
			persisted++
		case errcode.Of(err) == errcode.ConcurrencyConflict:
			conflicts++
		default:
			// The workspace changes under the scan: a path that vanished
			// between listing and opening is the sandbox's doing, not a
			// leak; anything but a leak is acceptable here.
			t.Logf("persist under attack: %v", err)
		}
	}
	stop()
	wg.Wait()
	t.Logf("%d persists stored, %d met a conflict", persisted, conflicts)
	if persisted == 0 {
		t.Fatal("no persist succeeded under the swaps")
	}
	has, err := store(t, st).HasChunk(ctx, "default", secretDigest)
	if err != nil || has {
		t.Fatalf("the host file's content is a stored chunk (%v, %v)", has, err)
	}
	cache, err := snapshot.OpenCache(cacheDir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if cache.Has("default", secretDigest) {
		t.Fatal("the host file's content is in the node's chunk cache")
	}
	// Every stored manifest holds f and sub as what they were: a file of
	// the sandbox's own content, or a symlink by its target.
	snaps, err := store(t, st).Snapshots(ctx, "default/"+s.SessionID+"/")
	if err != nil {
		t.Fatal(err)
	}
	for _, sn := range snaps {
		m, _, err := store(t, st).GetManifest(ctx, "default", s.SessionID, sn.ID, snapshot.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range m.Entries {
			for _, c := range e.Chunks {
				if c == secretDigest {
					t.Fatalf("manifest %s entry %s holds the host file's chunk", sn.ID, e.Path)
				}
			}
			if e.Kind == snapshot.KindSymlink && !strings.HasPrefix(e.Target, secretDir) {
				t.Fatalf("manifest %s symlink %s -> %s", sn.ID, e.Path, e.Target)
			}
		}
	}
	if err := st.Client.Shutdown(ctx, s.SessionID); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// TestPersistAfterSnapshotRemoved: a persist trusts its last manifest's
// chunks to be stored only while that snapshot is: once it is removed
// (engine snapshot rm) and a sweep took its chunks, a persist of the same
// workspace stores them again instead of recording the removed snapshot
// or a manifest whose chunks are gone, and the session resumes whole.
func TestPersistAfterSnapshotRemoved(t *testing.T) {
	k := runtimeKinds()[0]
	st, image := snapStack(t, k, nodes.Config{ChunkCacheBytes: -1})
	ctx := testenv.Context(t, 2*time.Minute)
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: k.name, Image: image})
	if err != nil {
		t.Fatal(err)
	}
	shell(t, st, s.SessionID, mibFiles(2))
	first, err := st.Client.Persist(ctx, s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	objs := store(t, st)
	if err := objs.DeleteSnapshot(ctx, "default", s.SessionID, first.ID); err != nil {
		t.Fatal(err)
	}
	chunks, err := objs.Chunks(ctx, "default")
	if err != nil || len(chunks) != 3 {
		t.Fatalf("chunks = %d (%v), want 3", len(chunks), err)
	}
	for _, c := range chunks {
		if ok, err := objs.DeleteChunk(ctx, "default", c.Digest, time.Now().Add(time.Hour)); err != nil || !ok {
			t.Fatalf("sweep chunk %s: %v %v", c.Digest, ok, err)
		}
	}
	again, err := st.Client.Persist(ctx, s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	d := lastFinishData[events.SnapshotFinish](t, st, s.SessionID, commands.OpPersist)
	if again.ID == first.ID || d.Unchanged || d.Chunks == nil || d.Chunks.Uploaded != 3 || again.RootSHA256 != first.RootSHA256 {
		t.Fatalf("persist after the snapshot was removed = %+v (finish %+v, chunks %+v); want a new snapshot of the same root with its 3 chunks stored again", again, d, d.Chunks)
	}
	want := shell(t, st, s.SessionID, `sha256sum d/f0 d/f1 note.txt`)
	if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.Resume(ctx, s.SessionID, nil); err != nil {
		t.Fatal(err)
	}
	if got := shell(t, st, s.SessionID, `sha256sum d/f0 d/f1 note.txt`); got != want {
		t.Fatalf("after resume: %q, want %q", got, want)
	}
}

// TestRestoreSymlinkAttack: a sandbox plants symlinks to a host directory
// (absolute, and relative far enough up to leave any mount) where the
// snapshot has directories, before each hydrate; on Docker it also keeps
// swapping the directories of the staging directory the node writes (in
// the holder, which its user owns) for such symlinks while the hydrates
// run. The node writes the restore through an os.Root of the staging
// directory: nothing is ever written in the host directory; on local each
// hydrate restores the snapshot exactly, and on Docker, once the attacker
// stops, a hydrate does (while it runs, a hydrate may fail, or succeed
// with what the attacker moved in the staging directory, which is its own
// workspace).
func TestRestoreSymlinkAttack(t *testing.T) {
	for _, k := range runtimeKinds() {
		t.Run(k.name, func(t *testing.T) {
			st, image := snapStack(t, k, nodes.Config{})
			ctx := testenv.Context(t, 5*time.Minute)
			s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: k.name, Image: image})
			if err != nil {
				t.Fatal(err)
			}
			host := t.TempDir()
			if err := os.Chmod(host, 0o777); err != nil { // writable by the sandbox's user, were it to reach it
				t.Fatal(err)
			}
			shell(t, st, s.SessionID, `mkdir -p d/sub e && i=0 && while [ $i -lt 30 ]; do echo $i > d/f$i; echo $i > d/sub/g$i; echo $i > e/h$i; i=$((i+1)); done`)
			want := tree(t, st, s.SessionID)
			snap, err := st.Client.Persist(ctx, s.SessionID)
			if err != nil {
				t.Fatal(err)
			}
			var attacker int64
			if k.name == "docker" {
				attack := fmt.Sprintf(`h=$(dirname "$PWD")/.paddock; n=0
while :; do for s in "$h"/staging-*; do for e in d d/sub e; do
  if [ -d "$s/$e" ] && [ ! -L "$s/$e" ]; then n=$((n+1)); mv "$s/$e" "$s/moved$n" 2>/dev/null && ln -s %q "$s/$e" 2>/dev/null; fi
done; done; done`, host)
				proc, err := st.Client.ProcStart(ctx, s.SessionID, commands.ProcStartArgs{Shell: attack})
				if err != nil {
					t.Fatal(err)
				}
				attacker = proc.ProcessID
			}
			ok := 0
			for i := range 4 {
				shell(t, st, s.SessionID, fmt.Sprintf(`rm -rf d e && ln -s %q d && ln -s ../../../../../../../../../..%s e`, host, host))
				_, err := st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: snap.ID})
				if names, _ := os.ReadDir(host); len(names) != 0 {
					t.Fatalf("hydrate %d wrote %v in the host directory", i, names)
				}
				if err != nil {
					t.Logf("hydrate %d failed (the attack broke it): %v", i, err)
					continue
				}
				ok++
				// Under the Docker attacker a hydrate that succeeds may
				// hold what it moved in the staging directory after the
				// node wrote it (its own workspace, as if it had changed
				// it afterwards); without one it must be exact.
				if got := tree(t, st, s.SessionID); got != want && attacker == 0 {
					t.Fatalf("workspace after hydrate %d: %s", i, testenv.FirstDiff(got, want))
				}
			}
			if k.name == "local" && ok != 4 {
				t.Fatalf("%d of 4 hydrates restored; symlinks in the workspace must not stop one", ok)
			}
			if attacker != 0 {
				// Once the attacker stops, a hydrate restores exactly.
				if err := st.Client.ProcSignal(ctx, s.SessionID, commands.ProcSignalArgs{ProcessID: attacker, Signal: "KILL"}); err != nil {
					t.Fatal(err)
				}
				testenv.Eventually(t, time.Minute, func() error {
					if _, err := st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: snap.ID}); err != nil {
						return err
					}
					if got := tree(t, st, s.SessionID); got != want {
						return fmt.Errorf("workspace after the attack: %s", testenv.FirstDiff(got, want))
					}
					return nil
				})
				if names, _ := os.ReadDir(host); len(names) != 0 {
					t.Fatalf("the host directory was written: %v", names)
				}
			}
			if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
				t.Fatal(err)
			}
		})
	}
}
