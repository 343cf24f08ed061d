package local_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
	"github.com/paddock-dev/paddock/nodes/runtime/overlay"
)

// TestOverlayLifecycle: an overlay replaces the workspace (its former
// files gone, the tree's there, writes never reaching the tree); a
// second one replaces the first; a staged tar restore replaces an
// overlay; the runtime's Close unmounts what is left, and a sandbox made
// again for the session over a leftover mount removes it.
func TestOverlayLifecycle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("overlay mounts need root")
	}
	dir := t.TempDir()
	rt, err := local.New(local.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := rt.Create(ctx, runtime.Spec{Tenant: "t", SessionID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	ws := sb.(*local.Sandbox).Dir()
	if err := os.WriteFile(filepath.Join(ws, "old"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	mount := func(files ...string) string {
		t.Helper()
		lower := filepath.Join(t.TempDir(), "tree")
		if err := os.Mkdir(lower, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(lower, f), []byte(f), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		stg, ok, err := sb.(runtime.OverlayStager).StageOverlay(ctx)
		if err != nil || !ok {
			t.Fatalf("StageOverlay = %v, %v", ok, err)
		}
		if err := stg.Mount(lower); err != nil {
			t.Fatal(err)
		}
		return lower
	}
	names := func() []string {
		t.Helper()
		es, err := os.ReadDir(ws)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			out = append(out, e.Name())
		}
		return out
	}
	lower := mount("a")
	if got := names(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("workspace over the tree: %v", got)
	}
	if err := os.WriteFile(filepath.Join(ws, "a"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(lower, "a")); string(b) != "a" {
		t.Fatalf("tree file after a write through the overlay: %q", b)
	}
	mount("b")
	if got := names(); len(got) != 1 || got[0] != "b" {
		t.Fatalf("workspace over the second tree: %v", got)
	}
	if m, _ := overlay.MountedUnder(dir); len(m) != 1 {
		t.Fatalf("overlays under the runtime: %v; want 1", m)
	}
	// A staged restore (files) replaces the overlay.
	hs, ok, err := sb.(runtime.HostStager).StageHost(ctx)
	if err != nil || !ok {
		t.Fatalf("StageHost = %v, %v", ok, err)
	}
	f, err := hs.Root.Create("c")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := hs.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := names(); len(got) != 1 || got[0] != "c" {
		t.Fatalf("workspace after a staged restore over the overlay: %v", got)
	}
	if m, _ := overlay.MountedUnder(dir); len(m) != 0 {
		t.Fatalf("overlays after a staged restore: %v", m)
	}
	// Close unmounts what a stopping node leaves.
	mount("d")
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if m, _ := overlay.MountedUnder(dir); len(m) != 0 {
		t.Fatalf("overlays after Close: %v", m)
	}
	// A leftover mount (a node killed): the next Create removes it.
	sb2, err := rt.Create(ctx, runtime.Spec{Tenant: "t", SessionID: "s2"})
	if err != nil {
		t.Fatal(err)
	}
	sb = sb2
	mount("e")
	rt2, err := local.New(local.Config{Dir: dir}) // the node, restarted
	if err != nil {
		t.Fatal(err)
	}
	sb3, err := rt2.Create(ctx, runtime.Spec{Tenant: "t", SessionID: "s2"})
	if err != nil {
		t.Fatalf("Create over a leftover overlay: %v", err)
	}
	if m, _ := overlay.MountedUnder(dir); len(m) != 0 {
		t.Fatalf("overlays after a Create over a leftover: %v", m)
	}
	if err := sb3.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
