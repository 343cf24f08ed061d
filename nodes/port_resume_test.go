package nodes_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// TestExposedPortAfterResumeOnAnotherNode: the address op port gave for a
// running Docker session on node A answers no more once A goes away; after
// the session is resumed on node B from its snapshot, op port resolves the
// port again to a forward of B that reaches the re-created sandbox.
func TestExposedPortAfterResumeOnAnotherNode(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	nodeA, nodeB := "pa-"+uuid.NewString()[:8], "pb-"+uuid.NewString()[:8]
	rtA := dockerRuntime(t, nodeA)
	// A leaves its sandbox behind, as a node that goes away does; it is
	// A's to reap, so remove it here (with its disk), before
	// dockerRuntime's check.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		found, err := rtA.FindSandboxes(ctx)
		if err != nil {
			t.Error(err)
		}
		for _, fd := range found {
			if err := fd.Sandbox.Shutdown(ctx); err != nil {
				t.Error(err)
			}
		}
		testenv.RemoveContainers(t, testenv.DockerClient(t), docker.LabelNode+"="+nodeA)
	})
	rtB := dockerRuntime(t, nodeB)
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	ctx := testenv.Context(t, 3*time.Minute)
	a := startAgent(t, st, nodes.Config{ID: nodeA}, rtA)

	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image, ExposedPorts: []int{8080}})
	if err != nil || s.Node != nodeA {
		t.Fatalf("create = %+v, %v; want on %s", s, err, nodeA)
	}
	defer func() { _ = st.Client.Delete(testenv.Context(t, time.Minute), s.SessionID) }()
	const marker = "served before and after the move\n"
	if _, err := st.Client.WriteFile(ctx, s.SessionID, "www/index.html", []byte(marker), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.Persist(ctx, s.SessionID); err != nil {
		t.Fatal(err)
	}
	// serve starts httpd on 8080 in the session's sandbox (not waiting
	// for its output), resolves the port and waits until the marker comes
	// back through the address.
	serve := func(node string) string {
		t.Helper()
		zero := int64(0)
		if _, err := st.Client.ProcStart(ctx, s.SessionID, commands.ProcStartArgs{Argv: []string{"httpd", "-f", "-p", "127.0.0.1:8080", "-h", "/workspace/www"}, YieldMS: &zero}); err != nil {
			t.Fatal(err)
		}
		res, err := st.Client.Port(ctx, s.SessionID, 8080)
		if err != nil {
			t.Fatal(err)
		}
		if res.Host != "127.0.0.1" || res.Port == 0 || res.SandboxPort != 8080 || res.Node != node {
			t.Fatalf("port 8080 = %+v; want 127.0.0.1, a port, 8080, node %s", res, node)
		}
		addr := net.JoinHostPort(res.Host, strconv.Itoa(res.Port))
		testenv.Eventually(t, 30*time.Second, func() error { // httpd may still be starting
			body, err := get(addr)
			if err == nil && body != marker {
				t.Fatalf("GET %s = %q; want %q", addr, body, marker)
			}
			return err
		})
		return addr
	}
	oldAddr := serve(nodeA)

	// Node A goes away with the session running; its forwards close with it.
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", oldAddr, 2*time.Second); err == nil {
		c.Close()
		t.Fatalf("%s (node A's forward) still accepts after A closed", oldAddr)
	}

	startAgent(t, st, nodes.Config{ID: nodeB}, rtB)
	testenv.Eventually(t, 30*time.Second, func() error {
		for _, n := range st.Scheduler.Nodes() {
			if n.Node == nodeB {
				return nil
			}
		}
		return errors.New("node B not registered yet")
	})
	res, err := st.Client.Resume(ctx, s.SessionID, nil)
	if err != nil || res.Node != nodeB || !res.Restored || res.Epoch != 2 {
		t.Fatalf("resume = %+v, %v; want restored on %s at epoch 2", res, err, nodeB)
	}
	newAddr := serve(nodeB)

	// The old address is dead for good. The OS may, rarely, give B's
	// listener the port A's had; then the two are the same forward.
	if newAddr == oldAddr {
		t.Logf("node B's forward reuses node A's old address %s", oldAddr)
	} else if body, err := get(oldAddr); err == nil {
		t.Errorf("GET %s (node A's old forward) = %q after the resume on B; want an error", oldAddr, body)
	}
}
