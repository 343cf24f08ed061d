package images

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildSupervisor builds the in-sandbox supervisor (cmd/paddock-supervisor of the module in
// srcDir) with the Go toolchain goTool as a static binary at out, through
// a temporary file and a rename: a container that has the old binary
// bind-mounted keeps it. Errors carry the build's output.
func BuildSupervisor(ctx context.Context, goTool, srcDir, out string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".build-*")
	if err != nil {
		return err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	cmd := exec.CommandContext(ctx, goTool, "build", "-trimpath", "-ldflags=-s -w", "-o", tmp.Name(), "./cmd/paddock-supervisor")
	cmd.Dir = srcDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/paddock-supervisor: %w\n%s", err, b)
	}
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}
