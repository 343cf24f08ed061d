package docker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// pooledRuntime is a supervised runtime with a warm pool of n containers
// of the base image, filled before it returns. dir is its supervisor
// directory ("" for a new one).
func pooledRuntime(t *testing.T, n int, maxIdle time.Duration) (*docker.Runtime, string) {
	t.Helper()
	image := testenv.SandboxBaseImage(t)
	rt := newRuntimeWith(t, docker.Config{Supervisor: testenv.SupervisorBinary(t), SupervisorDir: testenv.SupervisorDir(t)})
	if err := rt.StartPools(t.Context(), docker.PoolConfig{Pools: []docker.PoolSpec{{Image: image, Size: n}}, MaxIdle: maxIdle}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pool to fill", 60*time.Second, func() bool { return rt.PoolFree()[image] == n })
	return rt, image
}

// waitFor waits, with a deadline of d, until cond holds (see
// testenv.Eventually).
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, d, func() error {
		if !cond() {
			return fmt.Errorf("still waiting for %s", what)
		}
		return nil
	})
}

// poolIDs lists the node's unclaimed-or-claimed pool containers.
func poolIDs(t *testing.T, rt *docker.Runtime) []string {
	t.Helper()
	list, err := testenv.DockerClient(t).ContainerList(t.Context(), container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", docker.LabelNode+"="+rt.Node()), filters.Arg("label", docker.LabelPool))})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range list {
		ids = append(ids, c.ID)
	}
	slices.Sort(ids)
	return ids
}

// TestPoolClaim: a create that matches the pool claims a ready container,
// says so, runs with its session's variables through the supervisor and
// through the Docker API alike, is found again as its session, leaves
// nothing behind at shutdown, and the pool refills.
func TestPoolClaim(t *testing.T) {
	rt, image := pooledRuntime(t, 2, 0)
	s := spec(rt, image)
	s.Env = map[string]string{"GREETING": "hello pool"}
	sb := create(t, rt, s)
	sup, pooled, claim := sb.Provenance()
	if !pooled || claim <= 0 || sup != "connected" {
		t.Fatalf("Provenance: got %q, pooled %v, claim %s; want connected, pooled, a claim time", sup, pooled, claim)
	}
	if got := sh(t, sb, `echo "$GREETING"`); got != "hello pool\n" {
		t.Errorf("exec through the supervisor: got %q", got)
	}
	res, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"sh", "-c", `echo "$GREETING"; id -u`}, User: "0"})
	if err != nil || string(res.Stdout) != "hello pool\n0\n" {
		t.Errorf("exec through the Docker API (as root): got %q, %v", res.Stdout, err)
	}
	found, err := rt.FindSandboxes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].SessionID != s.SessionID || found[0].Tenant != "t" || found[0].Env["GREETING"] != "hello pool" {
		t.Fatalf("FindSandboxes: got %+v, want the claimed session with its variables", found)
	}
	waitFor(t, "the pool to refill", 60*time.Second, func() bool { return rt.PoolFree()[image] == 2 })
	if err := sb.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if ids := poolIDs(t, rt); slices.Contains(ids, sb.ID()) || len(ids) != 2 {
		t.Errorf("after shutdown: pool containers %v; want the 2 ready ones, not the claimed one", ids)
	}
}

// TestPoolConcurrentClaims: many creates at once never share a container;
// those the pool cannot serve are made cold.
func TestPoolConcurrentClaims(t *testing.T) {
	rt, image := pooledRuntime(t, 3, 0)
	const n = 8
	var mu sync.Mutex
	var ids []string
	pooled := 0
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			sb := create(t, rt, spec(rt, image))
			_, p, _ := sb.Provenance()
			mu.Lock()
			defer mu.Unlock()
			ids = append(ids, sb.ID())
			if p {
				pooled++
			}
		})
	}
	wg.Wait()
	slices.Sort(ids)
	if len(slices.Compact(slices.Clone(ids))) != n {
		t.Fatalf("%d creates got containers %v: some shared", n, ids)
	}
	// All 8 ask at once, while the pool holds 3; a refill that finishes
	// during the burst may serve one more.
	if pooled < 3 {
		t.Errorf("%d creates claimed from the pool, want at least 3 (its size)", pooled)
	}
}

// TestPoolHardenedLikeCold: a pool container is configured exactly as a
// cold create's container, and runs as the same unprivileged user.
func TestPoolHardenedLikeCold(t *testing.T) {
	rt, image := pooledRuntime(t, 1, 0)
	warm := create(t, rt, spec(rt, image))
	if _, p, _ := warm.Provenance(); !p {
		t.Fatal("the first create was not claimed from the pool")
	}
	cold := create(t, rt, spec(rt, image))
	if _, p, _ := cold.Provenance(); p {
		t.Fatal("the second create was claimed too; the pool holds one")
	}
	cli := testenv.DockerClient(t)
	w, err := cli.ContainerInspect(t.Context(), warm.ID())
	if err != nil {
		t.Fatal(err)
	}
	c, err := cli.ContainerInspect(t.Context(), cold.ID())
	if err != nil {
		t.Fatal(err)
	}
	wh, ch := w.HostConfig, c.HostConfig
	for _, f := range []struct {
		what       string
		warm, cold any
	}{
		{"CapDrop", wh.CapDrop, ch.CapDrop}, {"CapAdd", wh.CapAdd, ch.CapAdd},
		{"SecurityOpt", wh.SecurityOpt, ch.SecurityOpt}, {"Privileged", wh.Privileged, ch.Privileged},
		{"PidsLimit", *wh.PidsLimit, *ch.PidsLimit}, {"Memory", wh.Memory, ch.Memory}, {"MemorySwap", wh.MemorySwap, ch.MemorySwap},
		{"NanoCPUs", wh.NanoCPUs, ch.NanoCPUs}, {"NetworkMode", wh.NetworkMode, ch.NetworkMode}, {"Init", *wh.Init, *ch.Init},
		{"LogConfig", wh.LogConfig.Config["max-size"] + wh.LogConfig.Type, ch.LogConfig.Config["max-size"] + ch.LogConfig.Type},
		{"ReadonlyRootfs", wh.ReadonlyRootfs, ch.ReadonlyRootfs}, {"mounts", len(wh.Mounts), len(ch.Mounts)},
		{"User", w.Config.User, c.Config.User}, {"WorkingDir", w.Config.WorkingDir, c.Config.WorkingDir},
		{"Cmd[:3]", w.Config.Cmd[:3], c.Config.Cmd[:3]}, {"Env", w.Config.Env, c.Config.Env},
	} {
		if !equalAny(f.warm, f.cold) {
			t.Errorf("%s: pool container %v, cold container %v", f.what, f.warm, f.cold)
		}
	}
	for _, m := range wh.Mounts {
		// Only the disk's directories (loopfs) are writable.
		loopfs := strings.HasPrefix(w.Config.Labels[docker.LabelDisk], runtime.DiskLoopFS+":")
		if !m.ReadOnly && !(loopfs && strings.Contains(m.Source, "/mnt/")) {
			t.Errorf("pool container mount %s (%s) is writable", m.Target, m.Source)
		}
	}
	if got := sh(t, warm, "id -u; id -g; stat -c '%u:%g' /workspace"); got != "65534\n65534\n65534:65534\n" {
		t.Errorf("pool container's user and workspace: got %q", got)
	}
}

// equalAny compares two inspected values by their printed form.
func equalAny(a, b any) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// TestPoolNoCarryOver: a pool container serves one session only; the next
// session gets another container, with none of the first's files,
// processes or variables.
func TestPoolNoCarryOver(t *testing.T) {
	rt, image := pooledRuntime(t, 2, 0)
	s1 := spec(rt, image)
	s1.Env = map[string]string{"SECRET": "s1"}
	first := create(t, rt, s1)
	sh(t, first, "echo mine > /workspace/note; (sleep 600 &) ; true")
	if err := first.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	second := create(t, rt, spec(rt, image))
	if _, p, _ := second.Provenance(); !p || second.ID() == first.ID() {
		t.Fatalf("second session: pooled %v, container %s (first %s)", p, second.ID(), first.ID())
	}
	if got := sh(t, second, `ls -A /workspace; echo "secret=$SECRET"; ps -o args | grep -c '[s]leep 600' || true`); got != "secret=\n0\n" {
		t.Errorf("the second session sees %q; want an empty workspace, no SECRET and no sleep", got)
	}
}

// TestPoolRenewsIdle: containers older than MaxIdle are removed and made
// anew.
func TestPoolRenewsIdle(t *testing.T) {
	rt, _ := pooledRuntime(t, 1, 2*time.Second)
	before := poolIDs(t, rt)
	waitFor(t, "the idle pool container to be renewed", 60*time.Second, func() bool {
		now := poolIDs(t, rt)
		return len(now) == 1 && !slices.Contains(now, before[0])
	})
}

// TestPoolStaleRemoved: StartPools removes the unclaimed pool containers a
// previous run of the node left; Close removes the ready ones.
func TestPoolStaleRemoved(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	cli := testenv.DockerClient(t)
	rt := newRuntimeWith(t, docker.Config{Supervisor: testenv.SupervisorBinary(t), SupervisorDir: testenv.SupervisorDir(t)})
	stale := testenv.StartLabelledContainer(t, cli, image, map[string]string{docker.LabelNode: rt.Node(), docker.LabelPool: image})
	if err := rt.StartPools(t.Context(), docker.PoolConfig{Pools: []docker.PoolSpec{{Image: image, Size: 1}}}); err != nil {
		t.Fatal(err)
	}
	if testenv.ContainerExists(t, cli, stale) {
		t.Error("the previous run's pool container is still there")
	}
	waitFor(t, "the pool to fill", 60*time.Second, func() bool { return rt.PoolFree()[image] == 1 })
	rt.Close()
	if ids := poolIDs(t, rt); len(ids) != 0 {
		t.Errorf("after Close: pool containers %v left", ids)
	}
}

// TestPoolClaimReattached: a claimed pool container is found again by a
// restarted node (a new runtime on the same node and directory), with its
// session's variables given to its supervisor again.
func TestPoolClaimReattached(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	cli := testenv.DockerClient(t)
	node := "test-" + uuid.NewString()
	dir := testenv.SupervisorDir(t)
	cfg := docker.Config{Client: cli, Node: node, Supervisor: testenv.SupervisorBinary(t), SupervisorDir: dir}
	t.Cleanup(func() { testenv.RemoveContainers(t, cli, docker.LabelNode+"="+node) })
	first, err := docker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.StartPools(t.Context(), docker.PoolConfig{Pools: []docker.PoolSpec{{Image: image, Size: 1}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pool to fill", 60*time.Second, func() bool { return first.PoolFree()[image] == 1 })
	s := runtime.Spec{Tenant: "t", SessionID: uuid.NewString(), Node: node, Epoch: 1, Image: image, Env: map[string]string{"V": "kept"}}
	sb, err := first.Create(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	id := sb.(*docker.Sandbox).ID()
	first.Close() // the node goes; the claimed container stays, the ready ones go
	second, err := docker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	found, err := second.FindSandboxes(t.Context())
	if err != nil || len(found) != 1 || found[0].SessionID != s.SessionID || found[0].Env["V"] != "kept" {
		t.Fatalf("FindSandboxes after the restart: %+v, %v", found, err)
	}
	again := found[0].Sandbox.(*docker.Sandbox)
	waitFor(t, "the supervisor to reconnect", 30*time.Second, func() bool { return again.Supervisor().Connected })
	if got := sh(t, again, `echo "$V"`); got != "kept\n" {
		t.Errorf("after the restart: got %q, want the session's variable", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := again.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if testenv.ContainerExists(t, cli, id) {
		t.Error("the claimed container outlived its shutdown")
	}
	if _, err := os.Stat(filepath.Join(dir, "claims", id+".json")); !os.IsNotExist(err) {
		t.Errorf("the claim file outlived the shutdown: %v", err)
	}
}

func TestParsePoolSpec(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want docker.PoolSpec
		ok   bool
	}{
		{"paddock/sandbox-base:test=4", docker.PoolSpec{Image: "paddock/sandbox-base:test", Size: 4}, true},
		{"a=b=2", docker.PoolSpec{Image: "a=b", Size: 2}, true},
		{"img=64", docker.PoolSpec{Image: "img", Size: 64}, true},
		{"img", docker.PoolSpec{}, false},
		{"=3", docker.PoolSpec{}, false},
		{"img=0", docker.PoolSpec{}, false},
		{"img=65", docker.PoolSpec{}, false},
		{"img=-1", docker.PoolSpec{}, false},
		{"img=x", docker.PoolSpec{}, false},
		{"img=", docker.PoolSpec{}, false},
	} {
		got, err := docker.ParsePoolSpec(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParsePoolSpec(%q) = %+v, %v; want %+v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && errcode.Of(err) != errcode.InvalidRequest {
			t.Errorf("ParsePoolSpec(%q): code %q, want invalid_request", tc.in, errcode.Of(err))
		}
	}
}

// TestStartPoolsNeedsSupervisor: pools without the supervisor, or with a
// bad spec, are refused.
func TestStartPoolsNeedsSupervisor(t *testing.T) {
	rt := newRuntime(t)
	if err := rt.StartPools(t.Context(), docker.PoolConfig{Pools: []docker.PoolSpec{{Image: "x", Size: 1}}}); err == nil {
		t.Error("StartPools without the supervisor: no error")
	}
	sup := supervisedRuntime(t)
	if err := sup.StartPools(t.Context(), docker.PoolConfig{Pools: []docker.PoolSpec{{Image: "", Size: 1}}}); err == nil {
		t.Error("StartPools of an empty image: no error")
	}
}

// TestReaperRemovesStalePool: the reaper's pass (FindSandboxes) removes an
// unclaimed pool container no pool of the node holds, and leaves the
// pool's own ready ones alone.
func TestReaperRemovesStalePool(t *testing.T) {
	defer docker.SetStaleAge(0)()
	rt, image := pooledRuntime(t, 1, 0)
	cli := testenv.DockerClient(t)
	ready := poolIDs(t, rt)
	stale := testenv.StartLabelledContainer(t, cli, image, map[string]string{docker.LabelNode: rt.Node(), docker.LabelPool: image})
	if _, err := rt.FindSandboxes(t.Context()); err != nil {
		t.Fatal(err)
	}
	if testenv.ContainerExists(t, cli, stale) {
		t.Error("the stale pool container is still there after the reaper's pass")
	}
	if got := poolIDs(t, rt); !slices.Equal(got, ready) || rt.PoolFree()[image] != 1 {
		t.Errorf("the pool's own containers: got %v (free %d), want %v", got, rt.PoolFree()[image], ready)
	}
}

// TestPoolLimitsProfile: a pool of one limits profile serves the creates
// that ask for those limits (zeros being the defaults), and only them;
// two pools of one image and limits are refused.
func TestPoolLimitsProfile(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	rt := supervisedRuntime(t)
	small := docker.PoolSpec{Image: image, Size: 1, CPUs: 0.5, MemoryBytes: 64 << 20}
	dup := docker.PoolSpec{Image: image, Size: 1, CPUs: docker.DefaultCPUs, MemoryBytes: docker.DefaultMemoryBytes}
	if err := rt.StartPools(t.Context(), docker.PoolConfig{Pools: []docker.PoolSpec{{Image: image, Size: 1}, dup}}); err == nil {
		t.Fatal("two pools of the same image and (effective) limits: no error")
	}
	if err := rt.StartPools(t.Context(), docker.PoolConfig{Pools: []docker.PoolSpec{small}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pool to fill", 60*time.Second, func() bool { return rt.PoolFree()[image] == 1 })
	def := create(t, rt, spec(rt, image))
	if _, p, _ := def.Provenance(); p {
		t.Error("a create with the default limits claimed from the small pool")
	}
	s := spec(rt, image)
	s.CPUs, s.MemoryBytes = 0.5, 64<<20
	sb := create(t, rt, s)
	if _, p, _ := sb.Provenance(); !p {
		t.Fatal("a create with the pool's limits was not claimed from it")
	}
	c, err := testenv.DockerClient(t).ContainerInspect(t.Context(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if c.HostConfig.NanoCPUs != 5e8 || c.HostConfig.Memory != 64<<20 || c.HostConfig.MemorySwap != 64<<20 {
		t.Errorf("the pooled container's limits: cpus %d nano, memory %d, swap %d", c.HostConfig.NanoCPUs, c.HostConfig.Memory, c.HostConfig.MemorySwap)
	}
}

// TestSupervisorDirPrivate: the runtime makes its socket directory 0700,
// so that only the node reaches the sandboxes' sockets.
func TestSupervisorDirPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sup")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rt, err := docker.New(docker.Config{Supervisor: testenv.SupervisorBinary(t), SupervisorDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("supervisor directory: %v, %v; want 0700", fi.Mode(), err)
	}
}

// TestPoolDisk: pool containers have the default disk; a create asking
// that disk claims one, a create asking another makes its own.
func TestPoolDisk(t *testing.T) {
	rt, image := pooledRuntime(t, 1, 0)
	other := spec(rt, image)
	other.DiskBytes = 64 << 20
	sb := create(t, rt, other)
	if _, p, _ := sb.Provenance(); p {
		t.Error("a create asking a 64 MiB disk claimed a pool container of the default disk")
	}
	if b, m := sb.DiskLimit(); m != runtime.DiskNone && b != 64<<20 {
		t.Errorf("its disk: %d by %s, want 64 MiB", b, m)
	}
	def := spec(rt, image)
	def.DiskBytes = docker.DefaultDiskBytes
	pooled := create(t, rt, def)
	if _, p, _ := pooled.Provenance(); !p {
		t.Fatal("a create asking the default disk was not claimed from the pool")
	}
	if b, m := pooled.DiskLimit(); m != runtime.DiskNone && b != docker.DefaultDiskBytes {
		t.Errorf("the pooled container's disk: %d by %s, want the default", b, m)
	}
}
