package nodes_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime/overlay"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/snapshot"
	"github.com/paddock-dev/paddock/snapshot/snapshottest"
	"github.com/paddock-dev/paddock/testenv"
)

// requireMount skips a test that mounts overlays where this process may
// not (not root).
func requireMount(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("overlay mounts need root")
	}
}

// lowersUnder returns the mounted overlays' lower trees under dir.
func lowersUnder(t *testing.T, dir string) []string {
	t.Helper()
	ls, err := overlay.Lowers()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for l := range ls {
		if strings.HasPrefix(l, dir+string(filepath.Separator)) {
			out = append(out, l)
		}
	}
	return out
}

// TestRestoreFromKeptTree: on both runtimes, the first restore of a
// snapshot on a node writes its files once, into a tree the node keeps;
// the next restore of it mounts that tree as an overlay and writes
// nothing (the finish says kept), with the workspace byte for byte the
// snapshot's. The sandbox's writes, renames of the tree's directories and
// removals never reach the kept tree (a hydrate of the snapshot later
// gives it back whole); a persist of the overlay records what the
// sandbox sees; a file-by-file restore replaces an overlay; a delete
// leaves no overlay mounted.
func TestRestoreFromKeptTree(t *testing.T) {
	requireMount(t)
	for _, k := range runtimeKinds() {
		t.Run(k.name, func(t *testing.T) {
			keep := t.TempDir()
			st, image := snapStack(t, k, nodes.Config{TreeCacheDir: keep})
			ctx := testenv.Context(t, 5*time.Minute)
			s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: k.name, Image: image})
			if err != nil {
				t.Fatal(err)
			}
			shell(t, st, s.SessionID, mibFiles(3)+` && mkdir -p e/f && chmod 700 e && : > e/f/empty`)
			want := tree(t, st, s.SessionID)
			snapA, err := st.Client.Persist(ctx, s.SessionID)
			if err != nil {
				t.Fatal(err)
			}
			for i, wantKept := range []bool{false, true} {
				if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
					t.Fatal(err)
				}
				res, err := st.Client.Resume(ctx, s.SessionID, nil)
				if err != nil || !res.Restored {
					t.Fatalf("resume %d = %+v, %v", i, res, err)
				}
				d := lastFinishData[events.ResumeFinish](t, st, s.SessionID, commands.OpResume)
				if d.Chunks == nil || d.Chunks.Kept != wantKept {
					t.Fatalf("resume %d chunks = %+v; want kept %v", i, d.Chunks, wantKept)
				}
				if got := tree(t, st, s.SessionID); got != want {
					t.Fatalf("workspace after resume %d: %s", i, testenv.FirstDiff(got, want))
				}
				// The file operations see the overlay as execs do.
				if b, err := st.Client.ReadFile(ctx, s.SessionID, "note.txt"); err != nil || string(b) != "hello\n" {
					t.Fatalf("read after resume %d: %q, %v", i, b, err)
				}
			}
			if got := lowersUnder(t, keep); len(got) != 1 {
				t.Fatalf("overlays on kept trees: %v; want 1", got)
			}
			// What an exec changes in the overlay is recorded (the watch
			// follows the workspace to the overlay).
			shell(t, st, s.SessionID, `echo x > attributed.txt`)
			if d := lastFinishData[events.ExecFinish](t, st, s.SessionID, commands.OpExec); d.Changes == nil || d.Changes.Created != 1 ||
				len(d.Changes.Paths) != 1 || d.Changes.Paths[0].Path != "attributed.txt" {
				t.Fatalf("exec's changes on the overlay: %+v; want attributed.txt created", d.Changes)
			}
			shell(t, st, s.SessionID, `rm attributed.txt`)
			// The sandbox changes what the tree holds: a write into a file
			// of it, a rename of its directory, a removal, a new file.
			shell(t, st, s.SessionID, `echo changed >> d/f0 && mv d d2 && rm note.txt && echo new > e/f/new && chmod 755 e`)
			changed := tree(t, st, s.SessionID)
			if changed == want || !strings.Contains(changed, "./d2/f0") || strings.Contains(changed, "./note.txt") {
				t.Fatalf("workspace after the changes:\n%s", changed)
			}
			snapB, err := st.Client.Persist(ctx, s.SessionID)
			if err != nil {
				t.Fatal(err)
			}
			if snapB.RootSHA256 == snapA.RootSHA256 {
				t.Fatalf("persist after the changes recorded root %s again", snapA.RootSHA256)
			}
			// The kept tree is as it was: a hydrate of A mounts it again.
			if _, err := st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: snapA.ID}); err != nil {
				t.Fatal(err)
			}
			if h := lastFinishData[events.HydrateFinish](t, st, s.SessionID, commands.OpHydrate); h.Chunks == nil || !h.Chunks.Kept {
				t.Fatalf("hydrate of A: chunks %+v; want kept", h.Chunks)
			}
			if got := tree(t, st, s.SessionID); got != want {
				t.Fatalf("workspace after the hydrate of A: %s", testenv.FirstDiff(got, want))
			}
			// B, first restored here: written into a tree of its own.
			if _, err := st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: snapB.ID}); err != nil {
				t.Fatal(err)
			}
			if got := tree(t, st, s.SessionID); got != changed {
				t.Fatalf("workspace after the hydrate of B: %s", testenv.FirstDiff(got, changed))
			}
			// A file-by-file restore (no kept trees) replaces the overlay.
			nodes.SetKeptTrees(st.Agent, false)
			if _, err := st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: snapA.ID}); err != nil {
				t.Fatal(err)
			}
			if got := tree(t, st, s.SessionID); got != want {
				t.Fatalf("workspace after a file restore over the overlay: %s", testenv.FirstDiff(got, want))
			}
			if got := lowersUnder(t, keep); len(got) != 0 {
				t.Fatalf("overlays on kept trees after a file restore: %v; want none", got)
			}
			nodes.SetKeptTrees(st.Agent, true)
			if _, err := st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: snapB.ID}); err != nil {
				t.Fatal(err)
			}
			if err := st.Client.Delete(ctx, s.SessionID); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 30*time.Second, func() error {
				if got := lowersUnder(t, keep); len(got) != 0 {
					return fmt.Errorf("overlays after delete: %v", got)
				}
				return nil
			})
		})
	}
}

// TestDirtyTrackingOnKeptTree: on both runtimes, a workspace restored
// from a kept tree (an overlay) is tracked as any other: after changes
// made on the host and inside the sandbox (files of the tree written,
// renamed and removed, which copies them up), each persist records what
// a full scan sees, and most persists scan only what changed.
func TestDirtyTrackingOnKeptTree(t *testing.T) {
	requireMount(t)
	for _, k := range runtimeKinds() {
		t.Run(k.name, func(t *testing.T) {
			st, id, dir := trackedSession(t, k, nodes.Config{FullScanEvery: -1, TreeCacheDir: t.TempDir()})
			ctx := testenv.Context(t, 10*time.Minute)
			rng := rand.New(rand.NewPCG(36, 1))
			snapshottest.Populate(t, rng, dir, 40)
			snap, err := st.Client.Persist(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // the first writes the tree, the second mounts it kept
				if _, err := st.Client.Hydrate(ctx, id, commands.HydrateArgs{SnapshotID: snap.ID}); err != nil {
					t.Fatal(err)
				}
			}
			if h := lastFinishData[events.HydrateFinish](t, st, id, commands.OpHydrate); h.Chunks == nil || !h.Chunks.Kept {
				t.Fatalf("hydrate chunks %+v; want kept", h.Chunks)
			}
			full0, inc0 := nodes.ScanCounts(st.Agent, "default", id)
			const rounds = 8
			for round := range rounds + 1 {
				var did []string
				if round > 0 {
					for range 1 + rng.IntN(3) {
						did = append(did, snapshottest.Change(t, rng, dir, round > rounds-2))
					}
					shell(t, st, id, `mkdir -p c/n && echo $RANDOM >> c/log && mv c/log c/n/log2 && echo x > c/log`)
				}
				got, err := st.Client.Persist(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if want := fullRoot(t, dir); got.RootSHA256 != want {
					t.Fatalf("round %d after %q: persisted root %s, a full scan's %s", round, did, got.RootSHA256, want)
				}
			}
			full, inc := nodes.ScanCounts(st.Agent, "default", id)
			t.Logf("%d scans full, %d incremental", full-full0, inc-inc0)
			if inc-inc0 < rounds/2 {
				t.Fatalf("%d scans full, %d incremental on the overlay; want most of %d incremental", full-full0, inc-inc0, rounds+1)
			}
		})
	}
}

// TestKeptTreeFromCorruptChunk: a chunk whose stored bytes are not its
// digest's fails the restore that would build a tree (snapshot_corrupt),
// leaves the workspace as it was and publishes no tree; once the chunk is
// right again, the restore builds the tree and the next mounts it.
func TestKeptTreeFromCorruptChunk(t *testing.T) {
	requireMount(t)
	keep := t.TempDir()
	k := runtimeKinds()[0]
	st, image := snapStack(t, k, nodes.Config{TreeCacheDir: keep, ChunkCacheBytes: -1})
	ctx := testenv.Context(t, 3*time.Minute)
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: k.name, Image: image})
	if err != nil {
		t.Fatal(err)
	}
	shell(t, st, s.SessionID, `echo one > a && echo two > b`)
	snap, err := st.Client.Persist(ctx, s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	shell(t, st, s.SessionID, `echo after > c`)
	m, _, err := store(t, st).GetManifest(ctx, "default", s.SessionID, snap.ID, snapshot.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var digest string
	for d := range m.ChunkSet() {
		digest = d
		break
	}
	name, err := objectstore.ChunkName("default", digest)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := st.JS.ObjectStore(ctx, "sbx_workspaces")
	if err != nil {
		t.Fatal(err)
	}
	good, err := obs.GetBytes(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(ctx, name, []byte("not the bytes of that digest\n")); err != nil {
		t.Fatal(err)
	}
	_, err = st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: snap.ID})
	if errcode.Of(err) != errcode.SnapshotCorrupt {
		t.Fatalf("hydrate from a corrupt chunk: %v; want snapshot_corrupt", err)
	}
	if got := shell(t, st, s.SessionID, `cat a b c`); got != "one\ntwo\nafter" {
		t.Fatalf("workspace after the refused hydrate: %q", got)
	}
	if got := lowersUnder(t, keep); len(got) != 0 {
		t.Fatalf("overlays after the refused hydrate: %v", got)
	}
	if es, _ := os.ReadDir(filepath.Join(keep, "default")); len(es) != 0 {
		t.Fatalf("tree cache after the refused hydrate holds %v; want nothing published", es)
	}
	if _, err := obs.PutBytes(ctx, name, good); err != nil {
		t.Fatal(err)
	}
	for i, wantKept := range []bool{false, true} {
		if _, err := st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: snap.ID}); err != nil {
			t.Fatal(err)
		}
		if h := lastFinishData[events.HydrateFinish](t, st, s.SessionID, commands.OpHydrate); h.Chunks == nil || h.Chunks.Kept != wantKept {
			t.Fatalf("hydrate %d: chunks %+v; want kept %v", i, h.Chunks, wantKept)
		}
		if got := shell(t, st, s.SessionID, `cat a b; test ! -e c`); got != "one\ntwo" {
			t.Fatalf("workspace after hydrate %d: %q", i, got)
		}
	}
}

// TestKeptTreesPerTenant: two tenants whose workspaces are byte for byte
// the same (one manifest root) never share a kept tree: the other
// tenant's first restore builds its own, and each overlay is over its
// own tenant's tree.
func TestKeptTreesPerTenant(t *testing.T) {
	requireMount(t)
	keep := t.TempDir()
	st, _ := snapStack(t, runtimeKinds()[0], nodes.Config{TreeCacheDir: keep})
	ctx := testenv.Context(t, 2*time.Minute)
	other, err := client.New(st.ClientConn, client.Options{Tenant: "other"})
	if err != nil {
		t.Fatal(err)
	}
	roots := map[string]bool{}
	for _, c := range []*client.Client{st.Client, other} {
		s, err := c.Create(ctx, commands.CreateArgs{Runtime: "local"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WriteFile(ctx, s.SessionID, "same.txt", []byte("same bytes"), 0o644); err != nil {
			t.Fatal(err)
		}
		snap, err := c.Persist(ctx, s.SessionID)
		if err != nil {
			t.Fatal(err)
		}
		roots[snap.RootSHA256] = true
		for i, wantKept := range []bool{false, true} {
			if _, err := c.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: snap.ID}); err != nil {
				t.Fatal(err)
			}
			var h events.HydrateFinish
			testenv.Eventually(t, 10*time.Second, func() error {
				evs, err := st.Log.Session(ctx, c.Tenant(), s.SessionID)
				if err != nil {
					return err
				}
				last := evs[len(evs)-1]
				if last.Op != string(commands.OpHydrate) || last.Phase != events.PhaseFinish {
					return fmt.Errorf("tenant %s: last event %s %s", c.Tenant(), last.Op, last.Phase)
				}
				h, err = events.DecodeData[events.HydrateFinish](last)
				return err
			})
			if h.Chunks == nil || h.Chunks.Kept != wantKept {
				t.Fatalf("tenant %s, hydrate %d: chunks %+v; want kept %v", c.Tenant(), i, h.Chunks, wantKept)
			}
		}
	}
	if len(roots) != 1 {
		t.Fatalf("roots %v; want the two workspaces to be one root", roots)
	}
	lowers := lowersUnder(t, keep)
	if len(lowers) != 2 || lowers[0] == lowers[1] {
		t.Fatalf("overlays over %v; want two trees, one per tenant", lowers)
	}
	for _, tenant := range []string{"default", "other"} {
		n := 0
		for _, l := range lowers {
			if strings.HasPrefix(l, filepath.Join(keep, tenant)+"/") {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("overlays over %v; want one under tenant %s's trees", lowers, tenant)
		}
	}
}

// TestTreeOverBudgetNotKept: a snapshot larger than the whole tree
// budget is restored by writing files, every time, and no tree is kept.
func TestTreeOverBudgetNotKept(t *testing.T) {
	requireMount(t)
	keep := t.TempDir()
	k := runtimeKinds()[0]
	st, image := snapStack(t, k, nodes.Config{TreeCacheDir: keep, TreeCacheBytes: 1024})
	ctx := testenv.Context(t, 2*time.Minute)
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: k.name, Image: image})
	if err != nil {
		t.Fatal(err)
	}
	shell(t, st, s.SessionID, `head -c 4096 /dev/urandom > big && echo small > small`)
	want := tree(t, st, s.SessionID)
	snap, err := st.Client.Persist(ctx, s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: snap.ID}); err != nil {
			t.Fatal(err)
		}
		if h := lastFinishData[events.HydrateFinish](t, st, s.SessionID, commands.OpHydrate); h.Chunks == nil || h.Chunks.Kept {
			t.Fatalf("hydrate %d over the budget: chunks %+v; want files written", i, h.Chunks)
		}
		if got := tree(t, st, s.SessionID); got != want {
			t.Fatalf("workspace after hydrate %d: %s", i, testenv.FirstDiff(got, want))
		}
	}
	if got := lowersUnder(t, keep); len(got) != 0 {
		t.Fatalf("overlays over the budget: %v", got)
	}
	if es, _ := os.ReadDir(filepath.Join(keep, "default")); len(es) != 0 {
		t.Fatalf("kept trees over the budget: %v", es)
	}
}
