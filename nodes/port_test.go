package nodes_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/testenv"
)

// get fetches http://addr/ with a short client timeout.
func get(addr string) (string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	res, err := c.Get("http://" + addr + "/")
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return "", err
	}
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %s", res.Status)
	}
	return string(b), nil
}

// TestDockerExposedPort: an HTTP server in a sandbox without a network is
// reached through the address op port returns; a port the create did not
// expose is refused; another sandbox cannot use the forward; after a stop
// the address answers no more, and after a start port gives a new one.
// Each port call is recorded with the address.
func TestDockerExposedPort(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	node := "port-" + uuid.NewString()[:8]
	rt := dockerRuntime(t, node)
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	ctx := testenv.Context(t, 3*time.Minute)
	startAgent(t, st, nodes.Config{ID: node}, rt)

	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image, ExposedPorts: []int{8080, 9000}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Client.Do(testenv.Context(t, time.Minute), s.SessionID, commands.OpDelete, nil, nil) }()
	other, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = st.Client.Do(testenv.Context(t, time.Minute), other.SessionID, commands.OpDelete, nil, nil)
	}()

	serve := func() {
		t.Helper()
		if _, err := st.Client.WriteFile(ctx, s.SessionID, "www/index.html", []byte("hello from the sandbox\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Client.ProcStart(ctx, s.SessionID, commands.ProcStartArgs{Argv: []string{"httpd", "-f", "-p", "127.0.0.1:8080", "-h", "/workspace/www"}}); err != nil {
			t.Fatal(err)
		}
	}
	serve()
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
		if err == nil && body != "hello from the sandbox\n" {
			t.Fatalf("GET %s = %q", addr, body)
		}
		return err
	})
	if again, err := st.Client.Port(ctx, s.SessionID, 8080); err != nil || again.Port != res.Port {
		t.Errorf("port 8080 again = %+v, %v; want the same forward %d", again, err, res.Port)
	}

	// Nothing listens on 9000: the forward opens, a connection is closed.
	quiet, err := st.Client.Port(ctx, s.SessionID, 9000)
	if err != nil {
		t.Fatal(err)
	}
	if body, err := get(net.JoinHostPort(quiet.Host, strconv.Itoa(quiet.Port))); err == nil {
		t.Errorf("GET of port 9000, where nothing listens, = %q; want an error", body)
	}
	// Not exposed, out of range, or on a session that exposes nothing.
	for _, tc := range []struct {
		id   string
		port int
	}{{s.SessionID, 8081}, {s.SessionID, 0}, {s.SessionID, 70000}, {other.SessionID, 8080}} {
		_, err := st.Client.Port(ctx, tc.id, tc.port)
		var e *errcode.Error
		if !errors.As(err, &e) || e.Code != errcode.InvalidRequest {
			t.Errorf("port %d of %s: %v; want invalid_request", tc.port, tc.id, err)
		}
	}
	// Another sandbox has its own loopback and no network: the node's
	// forward is out of its reach.
	r, err := st.Client.Exec(ctx, other.SessionID, commands.ExecArgs{Argv: []string{"wget", "-q", "-T", "3", "-O", "-", "http://" + addr + "/"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode == 0 || strings.Contains(string(r.Stdout), "hello") {
		t.Errorf("another sandbox fetched the forward: exit %d, %q", r.ExitCode, r.Stdout)
	}

	// The history has each port call with its address.
	var recorded []events.PortFinish
	for _, ev := range sessionEvents(t, st, "default", s.SessionID) {
		if ev.Op == string(commands.OpPort) && ev.Phase == events.PhaseFinish && ev.OK != nil && *ev.OK {
			d, err := events.DecodeData[events.PortFinish](ev)
			if err != nil {
				t.Fatal(err)
			}
			recorded = append(recorded, d)
		}
	}
	if len(recorded) != 3 || recorded[0] != (events.PortFinish{Host: "127.0.0.1", Port: res.Port}) {
		t.Errorf("recorded port finishes %+v; want 3, the first 127.0.0.1:%d", recorded, res.Port)
	}

	if err := st.Client.Stop(ctx, s.SessionID); err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
		t.Errorf("%s still accepts after stop", addr)
	}
	if _, err := st.Client.Port(ctx, s.SessionID, 8080); errcode.Of(err) != errcode.InvalidState {
		t.Errorf("port of a stopped session: %v; want invalid_state", err)
	}
	if err := st.Client.Do(ctx, s.SessionID, commands.OpStart, nil, nil); err != nil {
		t.Fatal(err)
	}
	serve()
	res2, err := st.Client.Port(ctx, s.SessionID, 8080)
	if err != nil {
		t.Fatal(err)
	}
	addr2 := net.JoinHostPort(res2.Host, strconv.Itoa(res2.Port))
	testenv.Eventually(t, 30*time.Second, func() error {
		_, err := get(addr2)
		return err
	})
}
