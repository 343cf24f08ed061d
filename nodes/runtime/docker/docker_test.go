package docker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/images"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/nodes/runtime/runtimetest"
	"github.com/paddock-dev/paddock/testenv"
)

// newRuntime returns a Docker runtime for a node of its own and checks, when
// the test ends, that none of the node's containers is left (removing any
// that is).
func newRuntime(t *testing.T) *docker.Runtime {
	t.Helper()
	return newRuntimeWith(t, docker.Config{})
}

// supervisedRuntime is newRuntime with the in-sandbox supervisor.
func supervisedRuntime(t *testing.T) *docker.Runtime {
	t.Helper()
	return newRuntimeWith(t, docker.Config{Supervisor: testenv.SupervisorBinary(t), SupervisorDir: testenv.SupervisorDir(t)})
}

// newRuntimeWith is newRuntime with cfg (its Client and Node are set,
// and a disk directory of the test's when it names none: the sandboxes
// get loopfs disks where the host offers them).
func newRuntimeWith(t *testing.T, cfg docker.Config) *docker.Runtime {
	t.Helper()
	cli := testenv.DockerClient(t)
	node := "test-" + uuid.NewString()
	cfg.Client, cfg.Node = cli, node
	if cfg.DiskDir == "" && cfg.DiskMechanism == "" {
		cfg.DiskDir = testenv.DiskDir(t) // checks that no disk is left behind
	}
	rt, err := docker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	t.Cleanup(func() {
		// Runs after the tests' own cleanups (registered later), which shut
		// their sandboxes down: anything found now was left behind.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		found, err := rt.FindSandboxes(ctx)
		if err != nil {
			t.Errorf("list leftovers: %v", err)
		}
		for _, fd := range found {
			t.Errorf("container of %s/%s left behind", fd.Tenant, fd.SessionID)
		}
		testenv.RemoveContainers(t, cli, docker.LabelNode+"="+node)
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
		// t.Context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sb.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return sb.(*docker.Sandbox)
}

// sandbox creates a sandbox of the base image with the defaults.
func sandbox(t *testing.T) *docker.Sandbox {
	t.Helper()
	rt := newRuntime(t)
	return create(t, rt, spec(rt, testenv.SandboxBaseImage(t)))
}

// sh runs a shell script in sb and returns its stdout, failing the test
// unless it exits 0.
func sh(t *testing.T, sb runtime.Sandbox, script string) string {
	t.Helper()
	res, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"sh", "-c", script}, Timeout: time.Minute})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("sh -c %q: exit %d, stderr %q, %v", script, res.ExitCode, res.Stderr, err)
	}
	return string(res.Stdout)
}

func wantCode(t *testing.T, what string, err error, code errcode.Code) {
	t.Helper()
	if got := errcode.Of(err); got != code {
		t.Errorf("%s: got error %v (code %q), want code %q", what, err, got, code)
	}
}

func TestContract(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	runtimetest.Run(t, func(t *testing.T) runtime.Runtime {
		return nodeRuntime{newRuntime(t)}
	}, runtimetest.Options{Image: image})
}

// nodeRuntime makes the contract suite's sandboxes on the runtime's own
// node (the suite names one node for all), so that the leftover check of
// each subtest finds exactly its own.
type nodeRuntime struct{ *docker.Runtime }

func (n nodeRuntime) Create(ctx context.Context, s runtime.Spec) (runtime.Sandbox, error) {
	s.Node = n.Node()
	return n.Runtime.Create(ctx, s)
}

// TestContractSupervised runs the runtime contract through the in-sandbox
// supervisor: exec, processes and file operations go through it.
func TestContractSupervised(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	runtimetest.Run(t, func(t *testing.T) runtime.Runtime {
		return supervisedNode{nodeRuntime{supervisedRuntime(t)}, t}
	}, runtimetest.Options{Image: image})
}

// supervisedNode checks that every sandbox of the contract suite has its
// supervisor connected once made.
type supervisedNode struct {
	nodeRuntime
	t *testing.T
}

func (n supervisedNode) Create(ctx context.Context, s runtime.Spec) (runtime.Sandbox, error) {
	sb, err := n.nodeRuntime.Create(ctx, s)
	if err == nil {
		if st := sb.(*docker.Sandbox).Supervisor(); !st.Connected {
			n.t.Errorf("create: the supervisor is not connected: %+v", st)
		}
	}
	return sb, err
}

func TestName(t *testing.T) {
	rt, err := docker.New(docker.Config{Client: testenv.DockerClient(t)})
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.Name(); got != "docker" {
		t.Errorf("Name: got %q, want docker", got)
	}
	if err := rt.Ping(t.Context()); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  docker.Config
		fail bool
	}{
		{docker.Config{}, false},
		{docker.Config{DefaultPidsLimit: 10, DefaultMemoryBytes: 64 << 20, DefaultCPUs: 0.5}, false},
		{docker.Config{DefaultPidsLimit: -1}, true},
		{docker.Config{DefaultMemoryBytes: -1}, true},
		{docker.Config{DefaultCPUs: -1}, true},
		{docker.Config{StopTimeout: -time.Second}, true},
	} {
		if err := tc.cfg.Validate(); (err != nil) != tc.fail {
			t.Errorf("Validate(%+v): got %v, want failure %v", tc.cfg, err, tc.fail)
		}
		if _, err := docker.New(tc.cfg); (err != nil) != tc.fail {
			t.Errorf("New(%+v): got %v, want failure %v", tc.cfg, err, tc.fail)
		}
	}
}

// TestEngineDown: a daemon that does not answer is runtime_error, which
// is retryable.
func TestEngineDown(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+t.TempDir()+"/no-daemon.sock")
	rt, err := docker.New(docker.Config{Node: "down"})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	err = rt.Ping(t.Context())
	wantCode(t, "Ping", err, errcode.RuntimeError)
	if !errcode.Of(err).Retryable() {
		t.Errorf("Ping error %v is not retryable", err)
	}
	_, err = rt.Create(t.Context(), runtime.Spec{Tenant: "t", SessionID: "s", Image: images.Base})
	wantCode(t, "Create", err, errcode.RuntimeError)
	_, err = rt.FindSandboxes(t.Context())
	wantCode(t, "FindSandboxes", err, errcode.RuntimeError)
}

// TestBadSpecs: invalid specs are refused with invalid_request before the
// engine is asked (the runtime's engine does not exist), and specs only the
// engine can judge are refused by it with nothing left behind.
func TestBadSpecs(t *testing.T) {
	// The shared client is made from the environment on first use: make it
	// before DOCKER_HOST points nowhere, in case this test runs first.
	image := testenv.SandboxBaseImage(t)
	t.Setenv("DOCKER_HOST", "unix://"+t.TempDir()+"/no-daemon.sock")
	offline, err := docker.New(docker.Config{Node: "offline"})
	if err != nil {
		t.Fatal(err)
	}
	defer offline.Close()
	base := runtime.Spec{Tenant: "t", SessionID: "s", Epoch: 1, Image: images.Base}
	for _, tc := range []struct {
		name string
		edit func(*runtime.Spec)
	}{
		{"negative pids", func(s *runtime.Spec) { s.PidsLimit = -1 }},
		{"negative memory", func(s *runtime.Spec) { s.MemoryBytes = -1 }},
		{"tiny memory", func(s *runtime.Spec) { s.MemoryBytes = 1 << 20 }},
		{"negative cpus", func(s *runtime.Spec) { s.CPUs = -2 }},
		{"relative root", func(s *runtime.Spec) { s.WorkspaceRoot = "work" }},
		{"root /", func(s *runtime.Spec) { s.WorkspaceRoot = "/" }},
		{"no image", func(s *runtime.Spec) { s.Image = "" }},
		{"no tenant", func(s *runtime.Spec) { s.Tenant = "" }},
		{"env name with =", func(s *runtime.Spec) { s.Env = map[string]string{"A=B": "v"} }},
		{"empty env name", func(s *runtime.Spec) { s.Env = map[string]string{"": "v"} }},
	} {
		s := base
		tc.edit(&s)
		_, err := offline.Create(t.Context(), s)
		wantCode(t, tc.name, err, errcode.InvalidRequest)
	}

	rt := newRuntime(t)
	for _, tc := range []struct {
		name string
		edit func(*runtime.Spec)
	}{
		{"absurd cpus", func(s *runtime.Spec) { s.CPUs = 100000 }},
		{"unknown user", func(s *runtime.Spec) { s.User = "nosuchuser" }},
	} {
		s := spec(rt, image)
		tc.edit(&s)
		sb, err := rt.Create(t.Context(), s)
		if sb != nil {
			_ = sb.Shutdown(context.Background())
		}
		wantCode(t, tc.name, err, errcode.InvalidRequest)
	}
}

// TestImageNotFound: an image that is not on the engine and cannot be
// pulled (no registry answers) is image_not_found, naming the image,
// within the pull bound, and no container is left.
func TestImageNotFound(t *testing.T) {
	rt := newRuntime(t)
	s := spec(rt, "paddock/does-not-exist:nope")
	start := time.Now()
	_, err := rt.Create(t.Context(), s)
	wantCode(t, "Create", err, errcode.ImageNotFound)
	if err != nil && !strings.Contains(err.Error(), "paddock/does-not-exist:nope") {
		t.Errorf("error %q does not name the image", err)
	}
	if d := time.Since(start); d > 40*time.Second {
		t.Errorf("Create took %s, want it bounded by the 30s pull timeout", d)
	}
	found, err := rt.FindSandboxes(t.Context())
	if err != nil || len(found) != 0 {
		t.Errorf("after the refused create: %d containers, %v; want none", len(found), err)
	}
}

// TestCreateExisting: a second create of the same session is
// already_exists and leaves the first alone.
func TestCreateExisting(t *testing.T) {
	rt := newRuntime(t)
	s := spec(rt, testenv.SandboxBaseImage(t))
	sb := create(t, rt, s)
	_, err := rt.Create(t.Context(), s)
	wantCode(t, "second Create", err, errcode.AlreadyExists)
	if got := sh(t, sb, "echo alive"); got != "alive\n" {
		t.Errorf("first sandbox after the refused create: got %q", got)
	}
}

// TestSecretsStayOutOfErrors: env values never appear in errors.
func TestSecretsStayOutOfErrors(t *testing.T) {
	const secret = "s3cr3t-value-do-not-print"
	rt := newRuntime(t)
	s := spec(rt, testenv.SandboxBaseImage(t))
	for _, env := range []map[string]string{{"BAD=NAME": secret}, {"TOKEN=" + secret: "v"}, {"X": secret + "\x00"}} {
		s.Env = env
		_, err := rt.Create(t.Context(), s)
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("Create with a bad env: got %v, want an error without the value", err)
		}
	}
	s.Env = map[string]string{"TOKEN": secret}
	s.Image = "paddock/does-not-exist:nope"
	if _, err := rt.Create(t.Context(), s); err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("Create of a missing image: got %v, want an error without the value", err)
	}
	sb := sandbox(t)
	_, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"true"}, Env: map[string]string{"X=" + secret: "v"}})
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("Exec with a bad env name: got %v, want an error without the value", err)
	}
}

// TestExecCancelled: cancelling ctx ends the exec and kills its tree.
func TestExecCancelled(t *testing.T) {
	sb := sandbox(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"sh", "-c", "sleep 100007 & echo > started; sleep 100008"}})
		done <- err
	}()
	testenv.Eventually(t, 30*time.Second, func() error {
		_, _, err := sb.ReadFile(t.Context(), "started", 10)
		return err
	})
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled Exec: got %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Exec did not return after cancel")
	}
	noProcess(t, sb, "sleep 10000[78]")
}

// noProcess waits until no process of sb has a command line matching the
// basic regular expression re.
func noProcess(t *testing.T, sb runtime.Sandbox, re string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() error {
		res, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"sh", "-c", "ps -o args | grep '^" + re + "' || true"}})
		if err != nil {
			return err
		}
		if len(res.Stdout) != 0 {
			return errors.New("still running: " + string(res.Stdout))
		}
		return nil
	})
}
