package nodes_test

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/testenv"
)

// TestGVisorEgressAndPorts: a gvisor sandbox (no network stack of the
// host's, only gVisor's loopback) reaches an allowed name through the
// node's egress proxy, which its supervisor tunnels from the sandbox's
// loopback; a denied name is refused and recorded as on docker; without
// the proxy it reaches nothing; a request for the proxy's own address is
// refused and recorded, and the proxy still serves. A server it runs on an
// exposed port answers through the node's forward; an exposed port nothing
// listens on closes; a port not exposed is refused.
func TestGVisorEgressAndPorts(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	server, _ := webServer(t, image, "hello-from-the-internet", 0)
	node := "gvnet-" + uuid.NewString()[:8]
	rt := gvisorRuntime(t, node)
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	ctx := testenv.Context(t, 3*time.Minute)
	res := &testResolver{names: map[string][]netip.Addr{"allowed.test": {server}, "denied.test": {server}}}
	startAgent(t, st, nodes.Config{ID: node, Egress: nodes.EgressConfig{Resolve: res.resolve}}, rt)

	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "gvisor", Image: image, ExposedPorts: []int{8080, 9000},
		Egress: &commands.Egress{Mode: "allow", Allow: []string{"allowed.test:80"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Client.Do(testenv.Context(t, time.Minute), s.SessionID, commands.OpDelete, nil, nil) }()
	sh := func(script string) (string, bool) {
		t.Helper()
		r, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: script, TimeoutMS: 30000})
		if err != nil {
			t.Fatalf("exec %q: %v", script, err)
		}
		return r.Stdout + r.Stderr, r.ExitCode == 0
	}

	if body, ok := sh("wget -q -O - http://allowed.test/"); !ok || body != "hello-from-the-internet" {
		t.Errorf("GET allowed.test through the tunnelled proxy = %q, ok %v; want the server's page", body, ok)
	}
	if body, ok := sh("wget -q -O - http://denied.test/"); ok {
		t.Errorf("GET denied.test = %q: reached; want it refused", body)
	}
	// No network but the tunnel: a direct connection reaches nothing.
	if body, ok := sh("env -u http_proxy -u HTTP_PROXY wget -q -T 3 -O - http://" + server.String() + "/"); ok {
		t.Errorf("a direct GET of %s = %q: reached; want no network", server, body)
	}
	// A request through the proxy for the proxy's own address (the
	// tunnel's end) is refused, and the proxy serves on.
	if out, _ := sh(`wget -S -O - "http://127.0.0.1:${HTTP_PROXY##*:}/" 2>&1`); !strings.Contains(out, "403") {
		t.Errorf("a request for the proxy itself got %q; want a 403", out)
	}
	if body, ok := sh("wget -q -O - http://allowed.test/"); !ok || body != "hello-from-the-internet" {
		t.Errorf("GET allowed.test after the refusals = %q, ok %v", body, ok)
	}
	var allowed, denied int
	testenv.Eventually(t, 30*time.Second, func() error {
		allowed, denied = 0, 0
		for _, e := range egressEvents(t, st, s.SessionID) {
			if e.finish == nil {
				return fmt.Errorf("egress to %s: no finish yet", e.start.Host)
			}
			switch {
			case e.start.Allowed && e.finish.OK != nil && *e.finish.OK:
				allowed++
			case !e.start.Allowed && e.finish.ErrorCode == string(errcode.PolicyDenied):
				denied++
			}
		}
		return nil
	})
	if allowed != 2 || denied != 2 {
		t.Errorf("egress records: %d allowed, %d refused; want 2 and 2", allowed, denied)
	}

	if _, err := st.Client.WriteFile(ctx, s.SessionID, "www/index.html", []byte("hello from gvisor\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.ProcStart(ctx, s.SessionID, commands.ProcStartArgs{Argv: []string{"httpd", "-f", "-p", "127.0.0.1:8080", "-h", "/workspace/www"}}); err != nil {
		t.Fatal(err)
	}
	p, err := st.Client.Port(ctx, s.SessionID, 8080)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(p.Host, strconv.Itoa(p.Port))
	testenv.Eventually(t, 30*time.Second, func() error { // httpd may still be starting
		body, err := get(addr)
		if err == nil && body != "hello from gvisor\n" {
			t.Fatalf("GET %s = %q", addr, body)
		}
		return err
	})
	quiet, err := st.Client.Port(ctx, s.SessionID, 9000)
	if err != nil {
		t.Fatal(err)
	}
	if body, err := get(net.JoinHostPort(quiet.Host, strconv.Itoa(quiet.Port))); err == nil {
		t.Errorf("GET of port 9000, where nothing listens, = %q; want an error", body)
	}
	if _, err := st.Client.Port(ctx, s.SessionID, 8081); errcode.Of(err) != errcode.InvalidRequest {
		t.Errorf("port 8081, not exposed: %v; want invalid_request", err)
	}
}
