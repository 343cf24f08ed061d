package docker_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/nodes/runtime/runtimetest"
	"github.com/paddock-dev/paddock/testenv"
)

// gvisorRuntime is supervisedRuntime on gVisor (runsc), with a loopfs
// disk directory of the test's: the runtime agent-node --runtime gvisor
// opens.
func gvisorRuntime(t *testing.T) *docker.Runtime {
	t.Helper()
	return newRuntimeWith(t, docker.Config{GVisor: testenv.GVisorRuntime(t),
		Supervisor: testenv.SupervisorBinary(t), SupervisorDir: testenv.SupervisorDir(t)})
}

// TestGVisorContract runs the runtime contract on gVisor, through the
// in-sandbox supervisor (which reaches the node's socket on its bind
// mount: runsc --host-uds=open).
func TestGVisorContract(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	runtimetest.Run(t, func(t *testing.T) runtime.Runtime {
		return supervisedNode{nodeRuntime{gvisorRuntime(t)}, t}
	}, runtimetest.Options{Image: image})
}

// TestGVisorNeedsSupervisor: a gvisor runtime without the supervisor is
// refused (under runsc a Docker API exec outlives its container's stop,
// which the contract's StopKillsCommands showed).
func TestGVisorNeedsSupervisor(t *testing.T) {
	if _, err := docker.New(docker.Config{Client: testenv.DockerClient(t), GVisor: docker.GVisorOCIRuntime}); err == nil || !strings.Contains(err.Error(), "supervisor") {
		t.Errorf("New(gvisor without the supervisor) = %v; want an error naming the supervisor", err)
	}
}

// TestGVisorProcesses runs the Docker runtime's process tests, those with
// a terminal too, on gVisor through the supervisor (which ends a
// terminal's output when its process has exited and turns ^C into SIGINT,
// as Linux's terminal does and gVisor's does not).
func TestGVisorProcesses(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	rt := gvisorRuntime(t)
	for _, tc := range processTests {
		t.Run(tc.name, func(t *testing.T) {
			sb := create(t, rt, spec(rt, image))
			if !sb.Supervisor().Connected {
				t.Fatal("the supervisor is not connected")
			}
			tc.fn(t, sb)
		})
	}
}

// TestGVisorHardening: a gvisor sandbox runs under runsc and sees gVisor's
// kernel, not the host's, with every hardening default of the Docker
// runtime still in place: no capabilities, no new privileges, the
// non-root user, no network but loopback, a read-only root (loopfs), the
// limits.
func TestGVisorHardening(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	cli := testenv.DockerClient(t)
	rt := gvisorRuntime(t)
	if rt.Name() != docker.NameGVisor {
		t.Fatalf("Name() = %q, want %q", rt.Name(), docker.NameGVisor)
	}
	sb := create(t, rt, spec(rt, image))
	c, err := cli.ContainerInspect(t.Context(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	h := c.HostConfig
	check := func(what string, ok bool, got any) {
		t.Helper()
		if !ok {
			t.Errorf("%s: got %v", what, got)
		}
	}
	check("OCI runtime runsc", h.Runtime == testenv.GVisorRuntime(t), h.Runtime)
	check("runtime label", c.Config.Labels[docker.LabelRuntime] == docker.NameGVisor, c.Config.Labels)
	check("CapDrop ALL", slices.Contains(h.CapDrop, "ALL") && len(h.CapAdd) == 0, h.CapDrop)
	check("no-new-privileges", slices.Contains(h.SecurityOpt, "no-new-privileges:true"), h.SecurityOpt)
	check("not privileged", !h.Privileged, h.Privileged)
	check("pids limit", h.PidsLimit != nil && *h.PidsLimit == docker.GVisorPids(docker.DefaultPidsLimit), h.PidsLimit)
	check("memory", h.Memory == docker.DefaultMemoryBytes && h.MemorySwap == h.Memory, h.Memory)
	check("network none", h.NetworkMode == "none", h.NetworkMode)
	check("non-root user", c.Config.User == docker.DefaultUser, c.Config.User)

	host, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"uname", "-r"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(host.Stdout)); got != docker.GVisorKernel {
		t.Errorf("uname -r in the sandbox = %q, want gVisor's %s", got, docker.GVisorKernel)
	}
	if got := sh(t, sb, "id -u; id -g"); got != "65534\n65534\n" {
		t.Errorf("user: got %q, want 65534 65534", got)
	}
	if got := sh(t, sb, "grep -E '^(CapEff|CapPrm|CapBnd)' /proc/self/status | tr -s ' \t' ' '"); got != "CapPrm: 0000000000000000\nCapEff: 0000000000000000\nCapBnd: 0000000000000000\n" {
		t.Errorf("capabilities: got %q", got)
	}
	// No interface but loopback: gVisor runs without a network stack of
	// the host's (runsc --network=none).
	if got := sh(t, sb, "ls /sys/class/net 2>/dev/null; cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '"); strings.Contains(got, "eth") {
		t.Errorf("network interfaces: got %q, want loopback only", got)
	}
	if _, mech := sb.DiskLimit(); mech == runtime.DiskLoopFS {
		// As root too (uid 0 without capabilities): the root file system
		// refuses writes; only the disk's places take them.
		code, out := run(t, sb, "0", "touch /etc/x || touch /bin/x || touch /x")
		if code == 0 || strings.Count(out, "Read-only file system") != 3 {
			t.Errorf("writes to the root as root: exit %d, %q; want a read-only /", code, out)
		}
		sh(t, sb, "touch /workspace/ok /tmp/ok")
	} else {
		t.Logf("disk limit %s: the read-only root is loopfs's", mech)
	}
	// Root in the sandbox gains nothing: no capability to mount, to change
	// a file's owner or to load a module.
	if code, out := run(t, sb, "0", "mount -t tmpfs none /mnt 2>&1; chown 0 /workspace 2>&1"); code == 0 {
		t.Errorf("mount/chown as capability-less root succeeded: %q", out)
	}
}

// TestGVisorManyProcesses: a sandbox with the default limits runs 150
// processes at once (under a host pids limit of the default, 512, gVisor's
// own threads used it up and the whole sandbox stopped). A fork bomb past
// the limit stops its own sandbox at the bound (runsc cannot make more
// threads) and nothing else: the exec ends, another sandbox of the node
// runs on.
func TestGVisorManyProcesses(t *testing.T) {
	rt := gvisorRuntime(t)
	image := testenv.SandboxBaseImage(t)
	sb := create(t, rt, spec(rt, image))
	other := create(t, rt, spec(rt, image))
	if got := sh(t, sb, "n=0; while [ $n -lt 150 ]; do sleep 30 & n=$((n+1)); done; echo $n; kill $(jobs -p); wait 2>/dev/null; true"); got != "150\n" {
		t.Errorf("150 background processes: got %q", got)
	}
	res, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"sh", "-c", "n=0; while [ $n -lt 5000 ]; do sleep 60 & n=$((n+1)); done 2>/dev/null; echo $n"}, Timeout: 2 * time.Minute})
	t.Logf("5000 processes: %q, %v", res.Stdout, err)
	if err == nil && strings.TrimSpace(string(res.Stdout)) == "5000" {
		t.Errorf("5000 processes all started under a pids limit of %d", docker.GVisorPids(docker.DefaultPidsLimit))
	}
	if got := sh(t, other, "echo alive"); got != "alive\n" {
		t.Errorf("the other sandbox after the bomb: %q", got)
	}
}

// TestGVisorNetwork: a network of the sandbox's own is refused with
// policy_denied (gVisor's netstack cannot run here); the sandbox's
// loopback is reached through its supervisor instead: DialPort reaches a
// server a process runs there (invalid_state where nothing listens), and
// ListenEgress gets the connections a process makes to the port (a second
// listener on it is already_exists).
func TestGVisorNetwork(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	rt := gvisorRuntime(t)
	s := spec(rt, image)
	s.Network = true
	if _, err := rt.Create(t.Context(), s); errcode.Of(err) != errcode.PolicyDenied {
		t.Errorf("Create with a network = %v; want policy_denied", err)
	}
	if !rt.EnforcesEgress() || !rt.ForwardsPorts() {
		t.Errorf("EnforcesEgress %v, ForwardsPorts %v; want both true on gvisor", rt.EnforcesEgress(), rt.ForwardsPorts())
	}
	sb := create(t, rt, spec(rt, image))
	ctx := testenv.Context(t, time.Minute)
	if _, err := sb.DialPort(ctx, 8080); errcode.Of(err) != errcode.InvalidState {
		t.Errorf("DialPort where nothing listens = %v; want invalid_state", err)
	}
	srv, _ := startProcess(t, sb, runtime.ProcessSpec{Argv: []string{"sh", "-c", "echo tunnelled > /workspace/index.html && exec httpd -f -p 127.0.0.1:8080 -h /workspace"}})
	defer srv.Close()
	testenv.Eventually(t, 30*time.Second, func() error { // httpd may still be starting
		c, err := sb.DialPort(ctx, 8080)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /index.html HTTP/1.0\r\n\r\n"); err != nil {
			return err
		}
		b, err := io.ReadAll(c)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), "tunnelled") {
			return fmt.Errorf("GET through DialPort = %q", b)
		}
		return nil
	})

	ln, err := sb.ListenEgress(ctx, 3128)
	if err != nil {
		t.Fatalf("ListenEgress: %v", err)
	}
	defer ln.Close()
	if _, err := sb.ListenEgress(ctx, 3128); errcode.Of(err) != errcode.AlreadyExists {
		t.Errorf("a second ListenEgress on the port = %v; want already_exists", err)
	}
	accepted := make(chan string, 1)
	go func() { // the node's end answers one HTTP request
		c, err := ln.Accept()
		if err != nil {
			accepted <- err.Error()
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		_, _ = io.WriteString(c, "HTTP/1.0 200 OK\r\nContent-Length: 13\r\n\r\nfrom-the-node")
		accepted <- line
	}()
	got := sh(t, sb, "env -u http_proxy -u HTTP_PROXY wget -q -O - http://127.0.0.1:3128/from-the-sandbox")
	select {
	case line := <-accepted:
		if !strings.HasPrefix(line, "GET /from-the-sandbox ") {
			t.Errorf("the node accepted %q; want the sandbox's GET", line)
		}
	case <-ctx.Done():
		t.Fatal("the node accepted nothing")
	}
	if got != "from-the-node" {
		t.Errorf("the sandbox's process read %q; want from-the-node", got)
	}
	plain := newRuntime(t)
	if !plain.ForwardsPorts() || plain.Name() != "docker" {
		t.Errorf("docker runtime: ForwardsPorts %v, Name %q", plain.ForwardsPorts(), plain.Name())
	}
}

// TestGVisorCheck: the start check passes on an engine that runs runsc,
// and fails, saying how to register it, for a runtime Docker lacks.
func TestGVisorCheck(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	rt := gvisorRuntime(t)
	if err := rt.CheckGVisor(t.Context(), image); err != nil {
		t.Fatalf("CheckGVisor: %v", err)
	}
	if err := newRuntime(t).CheckGVisor(t.Context(), image); err != nil {
		t.Errorf("CheckGVisor of the docker runtime: %v; want a no-op", err)
	}
	bad := newRuntimeWith(t, docker.Config{GVisor: "no-such-runtime", Supervisor: testenv.SupervisorBinary(t), SupervisorDir: testenv.SupervisorDir(t)})
	err := bad.CheckGVisor(t.Context(), image)
	var p *docker.GVisorProblem
	if !errors.As(err, &p) || !strings.Contains(err.Error(), "register-gvisor") || !strings.Contains(err.Error(), `"runtimeArgs"`) || !strings.Contains(err.Error(), "SIGHUP") {
		t.Errorf("CheckGVisor of a missing runtime = %v; want a GVisorProblem saying how to register it", err)
	}
	// runc is there but is not gVisor: the probe sees the host's kernel.
	runc := newRuntimeWith(t, docker.Config{GVisor: "runc", Supervisor: testenv.SupervisorBinary(t), SupervisorDir: testenv.SupervisorDir(t)})
	if err := runc.CheckGVisor(t.Context(), image); !errors.As(err, &p) || !strings.Contains(err.Error(), "kernel") {
		t.Errorf("CheckGVisor under runc = %v; want a GVisorProblem about the kernel", err)
	}
	if found, err := rt.FindSandboxes(context.Background()); err != nil || len(found) != 0 {
		t.Errorf("the probe left sandboxes: %v, %v", found, err)
	}
}

// TestGVisorFindOwn: a docker and a gvisor runtime of one node each find
// (and so adopt or reap) only their own containers.
func TestGVisorFindOwn(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	g := gvisorRuntime(t)
	d, err := docker.New(docker.Config{Client: testenv.DockerClient(t), Node: g.Node(), DiskDir: testenv.DiskDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	gs, ds := spec(g, image), spec(d, image)
	create(t, g, gs)
	create(t, d, ds)
	for _, c := range []struct {
		rt   *docker.Runtime
		want string
	}{{g, gs.SessionID}, {d, ds.SessionID}} {
		found, err := c.rt.FindSandboxes(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(found) != 1 || found[0].SessionID != c.want {
			t.Errorf("%s FindSandboxes = %d sandboxes; want only %s", c.rt.Name(), len(found), c.want)
		}
	}
}
