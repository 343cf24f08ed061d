package snapshot_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
	"github.com/paddock-dev/paddock/snapshot"
)

// TestLocalRuntimePersistRestore runs the snapshot path against the local
// runtime's real export and import: a workspace's scan and its
// ExportWorkspace agree on the root, and WriteTar's tar, imported into
// another sandbox, scans back to that root.
func TestLocalRuntimePersistRestore(t *testing.T) {
	ctx := context.Background()
	rt, err := local.New(local.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	newSandbox := func() (runtime.Sandbox, string) {
		id := uuid.NewString()
		sb, err := rt.Create(ctx, runtime.Spec{Tenant: "t", SessionID: id})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sb.Shutdown(context.Background()) })
		return sb, rt.WorkspaceDir("t", id)
	}
	src, srcDir := newSandbox()
	write := func(rel string, data []byte, mode os.FileMode) {
		p := filepath.Join(srcDir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
		_ = os.Chmod(p, mode)
	}
	write("src/main.go", []byte("package main\n"), 0o644)
	write("bin/run", bytes.Repeat([]byte("x"), snapshot.ChunkSize+10), 0o755)
	write("secret", []byte("s"), 0o600)
	if err := os.Symlink("bin/run", filepath.Join(srcDir, "run")); err != nil {
		t.Fatal(err)
	}
	scanned, err := snapshot.Scan(ctx, srcDir, nil, snapshot.NewHashCache())
	if err != nil {
		t.Fatal(err)
	}
	chunks := map[string][]byte{}
	var export bytes.Buffer
	if _, err := src.ExportWorkspace(ctx, &export, nil); err != nil {
		t.Fatal(err)
	}
	m, err := snapshot.FromTar(ctx, &export, nil, archive.Limits{}, func(d string, data []byte) error {
		chunks[d] = bytes.Clone(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if m.Root() != scanned.Manifest.Root() {
		t.Fatalf("scan and export disagree:\n%s\n%s", scanned.Manifest.Encode(), m.Encode())
	}

	dst, dstDir := newSandbox()
	var tarball bytes.Buffer
	get := func(_ context.Context, d string) ([]byte, error) {
		if data, ok := chunks[d]; ok {
			return data, nil
		}
		return nil, errcode.New(errcode.NotFound, "chunk %s", d)
	}
	if _, err := snapshot.WriteTar(ctx, &tarball, m, get, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.ImportWorkspace(ctx, &tarball, archive.Limits{}); err != nil {
		t.Fatalf("the local runtime refused WriteTar's tar: %v", err)
	}
	back, err := snapshot.Scan(ctx, dstDir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if back.Manifest.Root() != m.Root() {
		t.Fatalf("restored workspace differs: %v", fmt.Sprint(snapshot.Diff(m, back.Manifest)))
	}
}
