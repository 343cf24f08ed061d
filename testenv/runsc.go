package testenv

import (
	"os"
	"os/exec"
	"testing"

	"github.com/paddock-dev/paddock/nodes/runtime/runsc"
)

// RunscRuntime is a runsc runtime (gVisor run by runsc directly) keeping
// its state in dir, for node node, exporting images through the tests'
// Docker engine. It skips the test without runsc or root, and fails it
// when CI=true (.ci/run installs runsc and runs the tests as root).
func RunscRuntime(t testing.TB, dir, node string) *runsc.Runtime {
	t.Helper()
	if _, err := exec.LookPath("runsc"); err != nil {
		if ci() {
			t.Fatalf("CI=true but no runsc: %v", err)
		}
		t.Skipf("no runsc: %v", err)
	}
	if os.Geteuid() != 0 {
		// runsc run directly makes namespaces and cgroups: root only.
		if ci() {
			t.Fatal("CI=true but not root: the runsc runtime's tests need root")
		}
		t.Skip("the runsc runtime needs root")
	}
	GVisorRuntime(t) // the same host needs as the gvisor runtime's
	rt, err := runsc.New(runsc.Config{Dir: dir, Node: node, Images: runsc.DockerImagesOf(DockerClient(t))})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// MemFillScript, run by sh in a sandbox's workspace, leaves a process
// holding 100 MiB of random (incompressible) memory: tail keeps the last
// 100 MiB of its input until the input ends, which the sleep never lets
// happen. It writes "full" to the workspace once the 100 MiB are in. The
// memory checkpoint benchmarks fill their sandboxes with it.
const MemFillScript = `((head -c 104857600 /dev/urandom; echo full > full; sleep 100000) | tail -c 104857600 >/dev/null) </dev/null >/dev/null 2>&1 &`
