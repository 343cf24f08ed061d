package runsc_test

import (
	"testing"

	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/runtimetest"
	"github.com/paddock-dev/paddock/testenv"
)

// TestContract runs the runtime contract suite on the runsc runtime.
func TestContract(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	runtimetest.Run(t, func(t *testing.T) runtime.Runtime { return newRuntime(t) }, runtimetest.Options{Image: image})
}
