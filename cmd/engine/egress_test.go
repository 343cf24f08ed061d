package main

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// TestCLIEgress: sandbox create --allow gives a Docker sandbox an allow
// list; a connection off it is refused, and events tail --op egress
// shows the decision; a bad list is a usage error (exit 2).
func TestCLIEgress(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	rt, err := docker.New(docker.Config{Client: testenv.DockerClient(t), Node: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	nowhere := func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("192.0.2.1")}, nil
	}
	st := testenv.StartStack(t, testenv.StackOptions{Runtimes: []runtime.Runtime{rt}, Node: nodes.Config{Egress: nodes.EgressConfig{Resolve: nowhere}}})
	url := st.Broker.ClientURL()
	if code, _, errs := cli(t, url, "", "sandbox", "create", "--runtime", "docker", "--egress", "open", "--allow", "a.test"); code != 2 || !strings.Contains(errs, "invalid_request") {
		t.Errorf("create --egress open --allow: exit %d, %q; want a usage error", code, errs)
	}
	id := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create", "--runtime", "docker", "--image", image, "--allow", "pypi.test:443,files.pypi.test:443"))
	defer cli(t, url, "", "sandbox", "delete", id)
	if code, out, _ := cli(t, url, "", "sandbox", "exec", id, "--", "wget", "-q", "-O", "-", "http://elsewhere.test/"); code == 0 {
		t.Errorf("wget of a name off the list: exit 0, %q", out)
	}
	// The refusal's finish is appended once the sandbox has its answer.
	testenv.Eventually(t, 30*time.Second, func() error {
		out := mustCLI(t, url, "", "events", "tail", "--session", id, "--op", "egress", "--no-follow", "--json")
		if !strings.Contains(out, `"host":"elsewhere.test"`) || !strings.Contains(out, `"allowed":false`) || !strings.Contains(out, `"error_code":"policy_denied"`) {
			return fmt.Errorf("events tail --op egress:\n%s\nwant the refused connection to elsewhere.test, start and finish", out)
		}
		return nil
	})
}
