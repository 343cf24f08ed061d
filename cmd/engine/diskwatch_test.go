package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/cmd/internal/runtimes"
	"github.com/paddock-dev/paddock/testenv"
)

// TestWarnSharedFilesystem: a state dir on the filesystem of Docker's
// data root is warned about at start; one on another filesystem is not.
// With Docker on this host, its real data root is asked for too.
func TestWarnSharedFilesystem(t *testing.T) {
	warned := func(state, root string) string {
		var logs testenv.SyncBuffer
		warnSharedFilesystem(state, root, slog.New(slog.NewTextHandler(&logs, nil)))
		return logs.String()
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "docker")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if out := warned(dir, root); !strings.Contains(out, "same filesystem as Docker's data root") {
		t.Errorf("state dir beside the data root: %q, want a warning", out)
	}
	if out := warned(testenv.Tmpfs(t, 1<<20), root); out != "" {
		t.Errorf("state dir on its own filesystem: %q, want nothing", out)
	}
	if out := warned(dir, ""); out != "" {
		t.Errorf("no Docker: %q, want nothing", out)
	}
	if _, err := os.Stat("/var/run/docker.sock"); err == nil {
		ctx := testenv.Context(t, 30*time.Second)
		got, err := runtimes.DockerRootDir(ctx)
		if err != nil || !filepath.IsAbs(got) {
			t.Fatalf("DockerRootDir = %q, %v; want the daemon's data root", got, err)
		}
		if _, err := os.Stat(got); err != nil {
			t.Errorf("the data root %s: %v", got, err)
		}
	}
}
