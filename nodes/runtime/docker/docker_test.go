package docker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/nodes/runtime/runtimetest"
	"github.com/paddock-dev/paddock/testenv"
)

// newRuntime returns a Docker runtime for a node of its own and checks, when
// the test ends, that none of the node's containers is left.
func newRuntime(t *testing.T) *docker.Runtime {
	t.Helper()
	cli := testenv.DockerClient(t)
	node := "test-" + uuid.NewString()[:8]
	rt, err := docker.New(docker.Config{Client: cli, Node: node})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		found, err := rt.FindSandboxes(ctx)
		if err != nil {
			t.Errorf("list leftovers: %v", err)
		}
		for _, fd := range found {
			t.Errorf("container of %s/%s left behind", fd.Tenant, fd.SessionID)
			_ = fd.Sandbox.Shutdown(ctx)
		}
	})
	return rt
}

// spec is a create spec on rt's node.
func spec(rt *docker.Runtime, image string) runtime.Spec {
	return runtime.Spec{Tenant: "t", SessionID: uuid.NewString(), Node: rt.Node(), Epoch: 1, Image: image}
}

// create creates a sandbox that the test's end shuts down.
func create(t *testing.T, rt *docker.Runtime, s runtime.Spec) *docker.Sandbox {
	t.Helper()
	sb, err := rt.Create(t.Context(), s)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sb.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return sb.(*docker.Sandbox)
}

func wantCode(t *testing.T, what string, err error, code errcode.Code) {
	t.Helper()
	if !errors.Is(err, &errcode.Error{Code: code}) {
		t.Errorf("%s: got %v, want %s", what, err, code)
	}
}

func TestContract(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	runtimetest.Run(t, func(t *testing.T) runtime.Runtime {
		rt := newRuntime(t)
		return nodeRuntime{rt}
	}, runtimetest.Options{Image: image})
}

// nodeRuntime makes the contract suite's sandboxes on the runtime's own
// node, so that the leftover check finds them.
type nodeRuntime struct{ *docker.Runtime }

func (n nodeRuntime) Create(ctx context.Context, s runtime.Spec) (runtime.Sandbox, error) {
	s.Node = n.Node()
	return n.Runtime.Create(ctx, s)
}
