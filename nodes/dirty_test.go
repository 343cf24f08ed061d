package nodes_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
	"github.com/paddock-dev/paddock/snapshot"
	"github.com/paddock-dev/paddock/snapshot/snapshottest"
	"github.com/paddock-dev/paddock/testenv"
)

// trackedSession starts a stack on runtime kind k with cfg, creates a
// session and returns it with the host directory the node scans (local;
// Docker's loopfs disk, else the test is skipped).
func trackedSession(t *testing.T, k runtimeKind, cfg nodes.Config) (*testenv.Stack, string, string) {
	t.Helper()
	cfg.ID = "dirty-" + uuid.NewString()[:8]
	cfg.ChunkCacheDir = t.TempDir()
	rt := k.make(t, cfg.ID)
	st := testenv.StartStack(t, testenv.StackOptions{Node: cfg, Runtimes: []runtime.Runtime{rt}})
	ctx := testenv.Context(t, 5*time.Minute)
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: k.name, Image: k.image(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Client.Shutdown(context.Background(), s.SessionID) })
	switch rt := rt.(type) {
	case *local.Runtime:
		return st, s.SessionID, rt.WorkspaceDir("default", s.SessionID)
	case *docker.Runtime:
		found, err := rt.FindSandboxes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range found {
			if h, ok := f.Sandbox.(runtime.HostWorkspace); ok && f.SessionID == s.SessionID {
				if dir, ok := h.HostWorkspaceDir(); ok {
					return st, s.SessionID, dir
				}
			}
		}
		t.Skip("the Docker sandbox has no host workspace: no loopfs disk on this host")
	}
	t.Fatalf("runtime %T", rt)
	return nil, "", ""
}

// fullRoot returns the root of a full scan of dir, with no hash cache.
func fullRoot(t *testing.T, dir string) string {
	t.Helper()
	sc, err := snapshot.Scan(testenv.Context(t, time.Minute), dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return sc.Manifest.Root()
}

// TestDirtyTrackingPersist: on both runtimes, after random changes made
// on the host and inside the sandbox (files created, modified, renamed
// and removed, directories renamed and removed, modes, symlinks; hard
// links written through in the last rounds), every persist records the
// root a full scan of the workspace gives, and persists without a doubt
// about what changed read only that (incrementally).
func TestDirtyTrackingPersist(t *testing.T) {
	for _, k := range runtimeKinds() {
		t.Run(k.name, func(t *testing.T) {
			st, id, dir := trackedSession(t, k, nodes.Config{FullScanEvery: -1})
			ctx := testenv.Context(t, 10*time.Minute)
			rng := rand.New(rand.NewPCG(25, 7))
			snapshottest.Populate(t, rng, dir, 60)
			const rounds = 10
			for round := range rounds + 1 {
				var did []string
				if round > 0 {
					for range 1 + rng.IntN(3) {
						did = append(did, snapshottest.Change(t, rng, dir, round > rounds-2))
					}
					// The sandbox's own writes, from its side of the mount.
					shell(t, st, id, `mkdir -p c/n && echo $RANDOM >> c/log && mv c/log c/n/log2 && echo x > c/log`)
					did = append(did, "exec in c/")
				}
				snap, err := st.Client.Persist(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if want := fullRoot(t, dir); snap.RootSHA256 != want {
					t.Fatalf("round %d after %q: persisted root %s, a full scan's %s", round, did, snap.RootSHA256, want)
				}
			}
			full, incremental := nodes.ScanCounts(st.Agent, "default", id)
			t.Logf("%d scans full, %d incremental", full, incremental)
			if incremental == 0 || full+incremental < rounds+1 {
				t.Fatalf("%d scans full, %d incremental; want some incremental of %d", full, incremental, rounds+1)
			}
		})
	}
}

// TestDirtyTrackingFallsBack: what the tracker could miss or cannot vouch
// for makes the next persist's scan full, and its snapshot right: a hard
// link written through its other name, a restore that replaces the
// workspace, and every FullScanEvery-th scan.
func TestDirtyTrackingFallsBack(t *testing.T) {
	st, id, dir := trackedSession(t, runtimeKinds()[0], nodes.Config{FullScanEvery: 3})
	ctx := testenv.Context(t, 5*time.Minute)
	rng := rand.New(rand.NewPCG(25, 8))
	snapshottest.Populate(t, rng, dir, 20)
	persist := func(what string, wantIncremental bool) commands.Snapshot {
		t.Helper()
		full0, inc0 := nodes.ScanCounts(st.Agent, "default", id)
		snap, err := st.Client.Persist(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if want := fullRoot(t, dir); snap.RootSHA256 != want {
			t.Fatalf("%s: persisted root %s, a full scan's %s", what, snap.RootSHA256, want)
		}
		full, inc := nodes.ScanCounts(st.Agent, "default", id)
		if got := inc > inc0; got != wantIncremental || full+inc != full0+inc0+1 {
			t.Fatalf("%s: scans full %d→%d, incremental %d→%d; want one scan, incremental %v", what, full0, full, inc0, inc, wantIncremental)
		}
		return snap
	}
	write := func(rel, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, rel), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	first := persist("the first persist", false)
	write("d0/new", "one")
	persist("a new file", true)
	write("d1/other", "two")
	persist("another new file", true)
	write("d0/new", "three")
	persist("the fourth scan (with FullScanEvery 3, the one after two incremental ones)", false)
	// A hard link, then a write through it: the watcher names the link,
	// not the first name, whose digests are stale.
	if err := os.Link(filepath.Join(dir, "d0/new"), filepath.Join(dir, "d2/link")); err != nil {
		t.Fatal(err)
	}
	write("d2/link", "four, through the link")
	persist("a write through a hard link", false)
	if err := os.Remove(filepath.Join(dir, "d2/link")); err != nil {
		t.Fatal(err)
	}
	persist("the link removed (the cache still says two links)", false)
	write("d3/more", "five")
	persist("one link again", true)
	if _, err := st.Client.Hydrate(ctx, id, commands.HydrateArgs{SnapshotID: first.ID}); err != nil {
		t.Fatal(err)
	}
	write("d0/after", "six")
	persist("after a restore", false)
}
