package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"

	"github.com/paddock-dev/paddock/images"
)

// SandboxImage is the tag of the sandbox base image the tests use (the
// Docker runtime's images.Base).
const SandboxImage = images.Base

// ci reports whether the tests run in CI, where a missing Docker engine or
// busybox is a failure, never a skip.
func ci() bool { return os.Getenv("CI") == "true" }

var (
	dockerOnce sync.Once
	dockerCli  *client.Client
	dockerErr  error
)

// DockerClient returns a client of the local Docker engine, shared by the
// test binary, once the engine has answered a ping within 5 s. Without an
// engine that answers, the test is skipped, or fails when CI=true.
func DockerClient(t testing.TB) *client.Client {
	t.Helper()
	dockerOnce.Do(func() {
		cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = cli.Ping(ctx)
			cancel()
		}
		dockerCli, dockerErr = cli, err
	})
	if dockerErr != nil {
		if ci() {
			t.Fatalf("CI=true but no Docker daemon answers: %v", dockerErr)
		}
		t.Skipf("no Docker daemon answers: %v", dockerErr)
	}
	return dockerCli
}

// imageMu serialises the check-and-build within the test binary; a lock
// file serialises it between the binaries `go test ./...` runs at once.
var imageMu sync.Mutex

// SandboxBaseImage makes sure the sandbox base image (SandboxImage) is on
// the engine, building it from the host's busybox-static when it is not
// (once: later calls find it), and returns its tag. Without a static
// /bin/busybox the test is skipped, or fails when CI=true.
func SandboxBaseImage(t testing.TB) string {
	t.Helper()
	cli := DockerClient(t)
	imageMu.Lock()
	defer imageMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	present := func() bool {
		t.Helper()
		_, err := cli.ImageInspect(ctx, SandboxImage)
		if err != nil && !errdefs.IsNotFound(err) {
			t.Fatalf("inspect %s: %v", SandboxImage, err)
		}
		return err == nil
	}
	if present() {
		return SandboxImage
	}
	if err := images.CheckBusybox(images.DefaultBusybox); err != nil {
		if ci() {
			t.Fatalf("CI=true but the sandbox image cannot be built: %v", err)
		}
		t.Skipf("cannot build the sandbox image: %v", err)
	}
	if unlock, err := lockFile(filepath.Join(os.TempDir(), "paddock-sandbox-image.lock")); err != nil {
		t.Logf("building without the lock file (two test binaries may both build): %v", err)
	} else {
		defer unlock()
		if present() { // another test binary built it meanwhile
			return SandboxImage
		}
	}
	if err := BuildSandboxImage(ctx, cli, SandboxImage); err != nil {
		t.Fatalf("build %s: %v", SandboxImage, err)
	}
	return SandboxImage
}

// BuildSandboxImage builds the sandbox base image under tag from the
// host's busybox-static (/bin/busybox) through the engine API; see
// images.BuildBase. It is not a test helper: commands can use it.
func BuildSandboxImage(ctx context.Context, cli *client.Client, tag string) error {
	return images.BuildBase(ctx, cli, tag, images.DefaultBusybox)
}

// lockFile takes an exclusive flock on p (made if missing) and returns
// its release.
func lockFile(p string) (func(), error) {
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("flock %s: %w", p, err)
	}
	return func() { f.Close() }, nil // closing the file releases the lock
}

// PythonSandboxImage makes sure the sandbox image with Python
// (images.Python) is on the engine, building it when it is not (see
// images.BuildPython: debootstrap once per machine, then from the
// cached root file system), and returns its tag. When it cannot be built
// (no debootstrap, not root, no mirror) the test is skipped, or fails when
// CI=true.
func PythonSandboxImage(t testing.TB) string {
	t.Helper()
	cli := DockerClient(t)
	imageMu.Lock()
	defer imageMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	present := func() bool {
		t.Helper()
		_, err := cli.ImageInspect(ctx, images.Python)
		if err != nil && !errdefs.IsNotFound(err) {
			t.Fatalf("inspect %s: %v", images.Python, err)
		}
		return err == nil
	}
	if present() {
		return images.Python
	}
	if unlock, err := lockFile(filepath.Join(os.TempDir(), "paddock-python-image.lock")); err != nil {
		t.Logf("building without the lock file (two test binaries may both build): %v", err)
	} else {
		defer unlock()
		if present() {
			return images.Python
		}
	}
	if err := images.BuildPython(ctx, cli, images.Python, images.PythonConfig{}); err != nil {
		if ci() {
			t.Fatalf("CI=true but the Python sandbox image cannot be built: %v", err)
		}
		t.Skipf("cannot build the Python sandbox image: %v", err)
	}
	return images.Python
}
