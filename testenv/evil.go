package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var (
	evilOnce sync.Once
	evilBin  []byte
	evilErr  error
)

// EvilSupervisor builds the hostile supervisor of the tests
// (nodes/runtime/supervisor/internal/evil, static) once per test binary and returns the
// binary's bytes, for a test to write into a sandbox; nothing of the build
// is left on disk. A failed build fails the test.
func EvilSupervisor(t testing.TB) []byte {
	t.Helper()
	evilOnce.Do(func() { evilBin, evilErr = buildEvil() })
	if evilErr != nil {
		t.Fatalf("build the hostile supervisor: %v", evilErr)
	}
	return evilBin
}

func buildEvil() ([]byte, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "paddock-evil")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "evil")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(), "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./nodes/runtime/supervisor/internal/evil")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./nodes/runtime/supervisor/internal/evil: %w\n%s", err, b)
	}
	return os.ReadFile(out)
}
