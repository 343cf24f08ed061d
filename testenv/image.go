package testenv

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"

	"github.com/paddock-dev/paddock/nodes/runtime/docker"
)

// ci reports whether the tests run in CI, where a missing Docker engine or
// busybox is a failure, never a skip.
func ci() bool { return os.Getenv("CI") == "true" }

var (
	dockerOnce sync.Once
	dockerCli  *client.Client
	dockerErr  error
)

// DockerClient returns a client of the local Docker engine, shared by the
// test binary. Without an engine that answers, the test is skipped, or
// fails when CI=true.
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
			t.Fatalf("CI=true but no Docker engine answers: %v", dockerErr)
		}
		t.Skipf("no Docker engine: %v", dockerErr)
	}
	return dockerCli
}

var imageMu sync.Mutex

// SandboxBaseImage makes sure the sandbox base image (docker.BaseImage) is
// on the engine, building it from the host's busybox-static when it is
// not, and returns its tag. Without busybox-static the test is skipped, or
// fails when CI=true.
func SandboxBaseImage(t testing.TB) string {
	t.Helper()
	cli := DockerClient(t)
	imageMu.Lock()
	defer imageMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := cli.ImageInspect(ctx, docker.BaseImage)
	if err == nil {
		return docker.BaseImage
	}
	if !errdefs.IsNotFound(err) {
		t.Fatalf("inspect %s: %v", docker.BaseImage, err)
	}
	if _, err := os.Stat(docker.DefaultBusybox); err != nil {
		if ci() {
			t.Fatalf("CI=true but %s is missing: apt-get install busybox-static", docker.DefaultBusybox)
		}
		t.Skipf("no %s (apt-get install busybox-static): %v", docker.DefaultBusybox, err)
	}
	if err := docker.BuildBaseImage(ctx, cli, docker.BaseImage, docker.DefaultBusybox); err != nil {
		t.Fatalf("build %s: %v", docker.BaseImage, err)
	}
	return docker.BaseImage
}
