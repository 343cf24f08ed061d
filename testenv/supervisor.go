package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/images"
)

var (
	supervisorOnce sync.Once
	supervisorPath string
	supervisorErr  error
)

// SupervisorBinary builds the in-sandbox supervisor (cmd/paddock-supervisor,
// static) once per test binary and returns its path under the system's
// temp directory: Docker bind-mounts it into containers, so it outlives the
// test that built it, and every build replaces it by rename, which leaves
// running containers' mounts alone. A failed build fails the test.
func SupervisorBinary(t testing.TB) string {
	t.Helper()
	supervisorOnce.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			supervisorErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		supervisorPath = filepath.Join(os.TempDir(), "paddock-supervisor-"+strconv.Itoa(os.Getuid()), "paddock-supervisor")
		supervisorErr = images.BuildSupervisor(ctx, goTool(), root, supervisorPath)
	})
	if supervisorErr != nil {
		t.Fatalf("build the supervisor: %v", supervisorErr)
	}
	return supervisorPath
}

// SupervisorDir returns a short directory for a node's supervisor sockets
// (a unix socket's path must stay under 108 bytes), removed when the test
// ends.
func SupervisorDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "psup")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// SupervisorDirFor is SupervisorDir for a node id: the same directory for
// the same id within a test binary, so that a node restarted in a test
// listens where its sandboxes dial. It is removed when the test ends.
func SupervisorDirFor(t testing.TB, node string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(node))
	dir := filepath.Join(os.TempDir(), "psup-"+strconv.Itoa(os.Getpid())+"-"+hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
