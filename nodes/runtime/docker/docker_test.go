package docker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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

// TestHardening inspects a created container and checks every hardening
// default, then that a spec loosens only what it names.
func TestHardening(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	cli := testenv.DockerClient(t)
	rt := newRuntime(t)
	s := spec(rt, image)
	s.Labels = map[string]string{"team": "a"}
	sb := create(t, rt, s)
	c, err := cli.ContainerInspect(t.Context(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	h, cfg := c.HostConfig, c.Config
	check := func(what string, ok bool, got any) {
		t.Helper()
		if !ok {
			t.Errorf("%s: got %v", what, got)
		}
	}
	check("CapDrop ALL", slices.Contains(h.CapDrop, "ALL") && len(h.CapAdd) == 0, h.CapDrop)
	check("no-new-privileges", slices.Contains(h.SecurityOpt, "no-new-privileges:true"), h.SecurityOpt)
	check("default seccomp", !slices.ContainsFunc(h.SecurityOpt, func(o string) bool { return strings.Contains(o, "seccomp") }), h.SecurityOpt)
	check("not privileged", !h.Privileged, h.Privileged)
	check("pids limit", h.PidsLimit != nil && *h.PidsLimit == docker.DefaultPidsLimit, h.PidsLimit)
	check("memory", h.Memory == docker.DefaultMemoryBytes, h.Memory)
	check("swap equal to memory", h.MemorySwap == h.Memory, h.MemorySwap)
	check("cpus", h.NanoCPUs == 1e9, h.NanoCPUs)
	check("network none", h.NetworkMode == "none", h.NetworkMode)
	check("init", h.Init != nil && *h.Init, h.Init)
	check("log driver bounded", h.LogConfig.Type == "json-file" && h.LogConfig.Config["max-size"] == docker.DefaultLogMaxSize, h.LogConfig)
	check("non-root user", cfg.User == docker.DefaultUser, cfg.User)
	check("name", c.Name == "/"+docker.ContainerName("t", s.SessionID, 1), c.Name)
	for k, v := range map[string]string{
		docker.LabelSession: s.SessionID, docker.LabelTenant: "t", docker.LabelNode: rt.Node(),
		docker.LabelEpoch: "1", docker.LabelUserPrefix + "team": "a",
	} {
		check("label "+k, cfg.Labels[k] == v, cfg.Labels[k])
	}
	res, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"id", "-u"}})
	if err != nil || string(res.Stdout) != "65534\n" {
		t.Errorf("id -u = %q, %v; want 65534", res.Stdout, err)
	}

	loose := spec(rt, image)
	loose.Network, loose.User, loose.PidsLimit, loose.MemoryBytes, loose.CPUs = true, "0", 100, 64<<20, 0.5
	lsb := create(t, rt, loose)
	c, err = cli.ContainerInspect(t.Context(), lsb.ID())
	if err != nil {
		t.Fatal(err)
	}
	h = c.HostConfig
	check("loosened network", h.NetworkMode == "bridge", h.NetworkMode)
	check("loosened pids", *h.PidsLimit == 100, *h.PidsLimit)
	check("memory", h.Memory == 64<<20 && h.MemorySwap == 64<<20, h.Memory)
	check("cpus", h.NanoCPUs == 5e8, h.NanoCPUs)
	check("still CapDrop ALL", slices.Contains(h.CapDrop, "ALL"), h.CapDrop)
	res, err = lsb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"id", "-u"}})
	if err != nil || string(res.Stdout) != "0\n" {
		t.Errorf("id -u as root = %q, %v; want 0", res.Stdout, err)
	}
}

// TestBadSpecs: bad limits and images are refused with their codes, and
// nothing is left behind.
func TestBadSpecs(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	cli := testenv.DockerClient(t)
	rt, err := docker.New(docker.Config{Client: cli, Node: "bad-" + uuid.NewString()[:8], PullTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.RemoveContainers(t, cli, docker.LabelNode+"="+rt.Node()) })
	for _, tc := range []struct {
		name string
		edit func(*runtime.Spec)
		code errcode.Code
	}{
		{"negative pids", func(s *runtime.Spec) { s.PidsLimit = -1 }, errcode.InvalidRequest},
		{"negative memory", func(s *runtime.Spec) { s.MemoryBytes = -1 }, errcode.InvalidRequest},
		{"tiny memory", func(s *runtime.Spec) { s.MemoryBytes = 1 << 20 }, errcode.InvalidRequest},
		{"negative cpus", func(s *runtime.Spec) { s.CPUs = -2 }, errcode.InvalidRequest},
		{"absurd cpus", func(s *runtime.Spec) { s.CPUs = 100000 }, errcode.InvalidRequest},
		{"relative root", func(s *runtime.Spec) { s.WorkspaceRoot = "work" }, errcode.InvalidRequest},
		{"unknown user", func(s *runtime.Spec) { s.User = "nosuchuser" }, errcode.InvalidRequest},
		{"missing image", func(s *runtime.Spec) { s.Image = "paddock/does-not-exist:nope" }, errcode.ImageNotFound},
	} {
		s := spec(rt, image)
		tc.edit(&s)
		sb, err := rt.Create(t.Context(), s)
		if sb != nil {
			_ = sb.Shutdown(context.Background())
		}
		wantCode(t, tc.name, err, tc.code)
	}
	found, err := rt.FindSandboxes(t.Context())
	if err != nil || len(found) != 0 {
		t.Fatalf("after refused creates: %d containers left, %v", len(found), err)
	}
}

// TestOutputFlood: a command that floods stdout is capped in memory and
// counted in full.
func TestOutputFlood(t *testing.T) {
	rt := newRuntime(t)
	sb := create(t, rt, spec(rt, testenv.SandboxBaseImage(t)))
	res, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"head", "-c", "50000000", "/dev/zero"}, MaxOutput: 1000, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != 1000 || res.StdoutBytes != 50000000 || !res.StdoutTruncated {
		t.Fatalf("flood: kept %d, counted %d, truncated %v; want 1000, 50000000, true", len(res.Stdout), res.StdoutBytes, res.StdoutTruncated)
	}
}

// TestNeverEnds: a command that never ends is killed at its timeout, with
// nothing of it left running.
func TestNeverEnds(t *testing.T) {
	rt := newRuntime(t)
	sb := create(t, rt, spec(rt, testenv.SandboxBaseImage(t)))
	_, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"sh", "-c", "sleep 100000 & sleep 100001"}, Timeout: time.Second})
	wantCode(t, "exec past its timeout", err, errcode.ExecTimeout)
	res, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"sh", "-c", "ps -o args | grep '^sleep 10000' || true"}})
	if err != nil || len(res.Stdout) != 0 {
		t.Fatalf("left running after the timeout: %q, %v", res.Stdout, err)
	}
}

// TestForkBomb: a fork bomb hits the pids limit; its exec ends at the
// timeout, the sandbox answers again, and so does another sandbox.
func TestForkBomb(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	rt := newRuntime(t)
	s := spec(rt, image)
	s.PidsLimit = 64
	sb := create(t, rt, s)
	other := create(t, rt, spec(rt, image))
	_, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"sh", "-c", "b(){ b | b & }; b; sleep 100000"}, Timeout: 3 * time.Second})
	if errcode.Of(err) != errcode.ExecTimeout {
		t.Errorf("fork bomb: got %v, want exec_timeout", err)
	}
	res, err := other.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"echo", "ok"}})
	if err != nil || string(res.Stdout) != "ok\n" {
		t.Fatalf("other sandbox after the bomb: %q, %v", res.Stdout, err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		res, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"echo", "ok"}, Timeout: 10 * time.Second})
		if err != nil {
			return err
		}
		if string(res.Stdout) != "ok\n" {
			return fmt.Errorf("echo printed %q (stderr %q)", res.Stdout, res.Stderr)
		}
		return nil
	})
}

// TestPlantedSymlink: symlinks a command plants inside the container that
// lead out of the workspace are refused by every file operation, and
// nothing outside is touched.
func TestPlantedSymlink(t *testing.T) {
	rt := newRuntime(t)
	sb := create(t, rt, spec(rt, testenv.SandboxBaseImage(t)))
	ctx := t.Context()
	res, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"sh", "-c", "ln -s / esc && mkdir d && ln -s /etc d/e && ln -s ../../tmp up"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("plant: %+v, %v", res, err)
	}
	_, _, err = sb.ReadFile(ctx, "esc/etc/passwd", 1<<20)
	wantCode(t, "read through esc", err, errcode.InvalidPath)
	_, _, err = sb.ReadFile(ctx, "up", 1<<20)
	wantCode(t, "read relative escape", err, errcode.InvalidPath)
	wantCode(t, "write through d/e", sb.WriteFile(ctx, "d/e/x", []byte("x"), 0o644), errcode.InvalidPath)
	wantCode(t, "write through up", sb.WriteFile(ctx, "up/x", []byte("x"), 0o644), errcode.InvalidPath)
	_, err = sb.List(ctx, "esc")
	wantCode(t, "ls esc", err, errcode.InvalidPath)
	wantCode(t, "rm through esc", sb.Remove(ctx, "esc/etc", true), errcode.InvalidPath)
	wantCode(t, "mkdir through esc", sb.Mkdir(ctx, "esc/new", true), errcode.InvalidPath)
	_, err = sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"pwd"}, Cwd: "d/e"})
	wantCode(t, "cwd through d/e", err, errcode.InvalidPath)
	res, err = sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"sh", "-c", "ls /etc/x /tmp/x /new 2>&1; ls /etc/passwd"}, User: "0"})
	if err != nil || string(res.Stdout) == "" || strings.Count(string(res.Stdout), "No such file") != 3 {
		t.Fatalf("outside the workspace: %q, %v; want nothing made and /etc intact", res.Stdout, err)
	}
	// The links themselves live in the workspace: removing one is fine.
	if err := sb.Remove(ctx, "esc", false); err != nil {
		t.Fatalf("rm the link itself: %v", err)
	}
}

// TestFindSandboxes: the runtime finds its node's containers by label,
// with their session, epoch, environment and state.
func TestFindSandboxes(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	rt := newRuntime(t)
	a := spec(rt, image)
	a.Env = map[string]string{"K": "v"}
	a.Epoch = 7
	sa := create(t, rt, a)
	b := spec(rt, image)
	sbb := create(t, rt, b)
	if err := sbb.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	found, err := rt.FindSandboxes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]runtime.Found{}
	for _, fd := range found {
		got[fd.SessionID] = fd
	}
	fa, fb := got[a.SessionID], got[b.SessionID]
	if len(found) != 2 || fa.Tenant != "t" || fa.Epoch != 7 || fa.Env["K"] != "v" || !fa.Running || fb.Running {
		t.Fatalf("found %+v, want a (epoch 7, K=v, running) and b (stopped)", found)
	}
	if fa.Created.IsZero() || time.Since(fa.Created) > time.Hour {
		t.Errorf("created = %v", fa.Created)
	}
	res, err := fa.Sandbox.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"sh", "-c", "echo $K"}})
	if err != nil || string(res.Stdout) != "v\n" {
		t.Fatalf("exec through the found sandbox: %q, %v", res.Stdout, err)
	}
	_ = sa
}
