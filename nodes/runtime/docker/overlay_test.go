package docker_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// lowerTree makes a kept tree as the node's would be: files owned by the
// sandbox's user.
func lowerTree(t *testing.T, stg runtime.OverlayStage, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tree")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, stg.UID, stg.GID); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// mountTree stages an overlay on sb and mounts a new tree of files.
func mountTree(t *testing.T, sb runtime.Sandbox, files map[string]string) string {
	t.Helper()
	stg, ok, err := sb.(runtime.OverlayStager).StageOverlay(t.Context())
	if err != nil || !ok {
		t.Fatalf("StageOverlay = %v, %v", ok, err)
	}
	lower := lowerTree(t, stg, files)
	if err := stg.Mount(lower); err != nil {
		t.Fatal(err)
	}
	return lower
}

// TestOverlayWorkspace: an overlay a restore mounts on the node's side of
// a running container's loopfs workspace is what the container sees (the
// workspace's former entries gone); the sandbox's writes land in the
// upper on its disk, never in the tree, which the sandbox cannot reach by
// its host path; after a reboot of the host (every mount gone) Start
// mounts it again, the sandbox's writes with it; a found sandbox takes
// overlays too; a second overlay replaces the first; Shutdown leaves no
// mount and no record.
func TestOverlayWorkspace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("overlay mounts need root")
	}
	rt, dir := limitedRuntime(t)
	ds, _ := rt.ProbeDisk(t.Context(), "")
	if ds.Mechanism != runtime.DiskLoopFS {
		t.Skip("loopfs only")
	}
	ctx := t.Context()
	sp := spec(rt, testenv.SandboxBaseImage(t))
	sp.DiskBytes = 32 << 20
	sb, err := rt.Create(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	sh(t, sb, "echo before > /workspace/old")
	stg, ok, err := sb.(runtime.OverlayStager).StageOverlay(ctx)
	if err != nil || !ok || !stg.Chown {
		t.Fatalf("StageOverlay = %+v, %v, %v", stg, ok, err)
	}
	lower := lowerTree(t, stg, map[string]string{"a": "from the tree\n"})
	if err := stg.Mount(lower); err != nil {
		t.Fatal(err)
	}
	if out := sh(t, sb, "ls /workspace; cat /workspace/a"); out != "a\nfrom the tree\n" {
		t.Fatalf("workspace over the tree: %q", out)
	}
	if got, err := rt.OverlayLowers(); err != nil || !slices.Equal(got, []string{lower}) {
		t.Fatalf("OverlayLowers = %v, %v; want [%s]", got, err, lower)
	}
	// The sandbox writes: the tree does not change.
	sh(t, sb, "echo more >> /workspace/a && echo new > /workspace/b && mkdir /workspace/d && mv /workspace/d /workspace/e")
	if b, _ := os.ReadFile(filepath.Join(lower, "a")); string(b) != "from the tree\n" {
		t.Fatalf("tree file after the sandbox wrote it: %q", b)
	}
	if entries, _ := os.ReadDir(lower); len(entries) != 1 {
		t.Fatalf("tree has %d entries after the sandbox's writes; want 1", len(entries))
	}
	// The tree's host path, which the container's mount table shows, is
	// not in the container.
	if code, out := run(t, sb, "", "cat "+lower+"/a"); code == 0 {
		t.Fatalf("the sandbox read the tree by its host path: %q", out)
	}
	// A reboot: every mount goes; Start brings the overlay back.
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	mounts := testenv.MountsUnder(t, dir)
	if len(mounts) != 2 {
		t.Fatalf("mounts %v; want the disk and the overlay", mounts)
	}
	slices.SortFunc(mounts, func(a, b string) int { return len(b) - len(a) }) // deepest first
	for _, m := range mounts {
		if err := unix.Unmount(m, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if out := sh(t, sb, "cat /workspace/a /workspace/b; ls /workspace"); out != "from the tree\nmore\nnew\na\nb\ne\n" {
		t.Fatalf("workspace after the reboot: %q", out)
	}
	// Found again (a node restart), it takes a second overlay.
	found, err := rt.FindSandboxes(ctx)
	if err != nil || len(found) != 1 {
		t.Fatalf("FindSandboxes = %v, %v", found, err)
	}
	again := found[0].Sandbox.(*docker.Sandbox)
	lower2 := mountTree(t, again, map[string]string{"c": "second\n"})
	if out := sh(t, again, "ls /workspace"); out != "c\n" {
		t.Fatalf("workspace over the second tree: %q", out)
	}
	// File operations (through the supervisor) see it too.
	if b, _, err := again.ReadFile(ctx, "/workspace/c", 100); err != nil || string(b) != "second\n" {
		t.Fatalf("ReadFile over the second tree: %q, %v", b, err)
	}
	if got, _ := rt.OverlayLowers(); !slices.Equal(got, []string{lower2}) {
		t.Fatalf("OverlayLowers = %v; want [%s]", got, lower2)
	}
	if n := strings.Count(strings.Join(testenv.MountsUnder(t, dir), "\n"), "\n") + 1; n != 2 {
		t.Fatalf("mounts after the second overlay: %v; want the disk and one overlay", testenv.MountsUnder(t, dir))
	}
	// A stop and a start (no reboot): the container's new workspace mount
	// still receives the next overlay.
	if err := again.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := again.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if out := sh(t, again, "ls /workspace"); out != "c\n" {
		t.Fatalf("workspace after a stop and start: %q", out)
	}
	mountTree(t, again, map[string]string{"third": "3\n"})
	if out := sh(t, again, "ls /workspace"); out != "third\n" {
		t.Fatalf("workspace over the third tree, after a stop and start: %q", out)
	}
	if err := again.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if m := testenv.MountsUnder(t, dir); len(m) != 0 {
		t.Fatalf("mounts after Shutdown: %v", m)
	}
	if got, _ := rt.OverlayLowers(); len(got) != 0 {
		t.Fatalf("OverlayLowers after Shutdown = %v", got)
	}
}

// TestOverlayWorkspaceThroughAPI: without a supervisor, file operations
// go through the Docker API, and see a mounted overlay as execs do.
func TestOverlayWorkspaceThroughAPI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("overlay mounts need root")
	}
	dir := testenv.DiskDir(t)
	rt := newRuntimeWith(t, docker.Config{DiskDir: dir})
	if ds, _ := rt.ProbeDisk(t.Context(), ""); ds.Mechanism != runtime.DiskLoopFS {
		t.Skip("loopfs only")
	}
	ctx := t.Context()
	sp := spec(rt, testenv.SandboxBaseImage(t))
	sp.DiskBytes = 32 << 20
	sb, err := rt.Create(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sb.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	mountTree(t, sb, map[string]string{"a": "tree\n"})
	if b, _, err := sb.ReadFile(ctx, "/workspace/a", 100); err != nil || string(b) != "tree\n" {
		t.Fatalf("ReadFile through the API over the tree: %q, %v", b, err)
	}
	if err := sb.WriteFile(ctx, "/workspace/b", []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := sh(t, sb, "cat /workspace/b"); out != "new" {
		t.Fatalf("a file written through the API, as an exec sees it: %q", out)
	}
}
