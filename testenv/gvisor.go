package testenv

import (
	"context"
	"slices"
	"testing"
	"time"
)

// GVisorRuntime is the name Docker knows gVisor's runsc under in the
// tests ("runsc", registered by `engine runtime register-gvisor` with the
// arguments the gvisor runtime needs). When the engine does not list it
// with hostUDS among its arguments, the test is skipped, or fails when
// CI=true (.ci/run registers it).
func GVisorRuntime(t testing.TB) string {
	t.Helper()
	const name, hostUDS = "runsc", "--host-uds=open"
	cli := DockerClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := cli.Info(ctx)
	if err != nil {
		t.Fatalf("docker info: %v", err)
	}
	rt, ok := info.Runtimes[name]
	if ok && slices.Contains(rt.Args, hostUDS) {
		return name
	}
	why := "Docker lists no runsc runtime"
	if ok {
		why = "Docker's runsc runtime lacks " + hostUDS
	}
	if ci() {
		t.Fatalf("CI=true but %s (run: go run ./cmd/engine runtime register-gvisor)", why)
	}
	t.Skipf("%s (go run ./cmd/engine runtime register-gvisor registers it)", why)
	return ""
}
