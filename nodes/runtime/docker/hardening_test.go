package docker_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// TestHardening inspects a created container and checks every hardening
// default, then that a spec loosens only what it names.
func TestHardening(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	cli := testenv.DockerClient(t)
	rt := newRuntime(t)
	s := spec(rt, image)
	s.Epoch = 3
	s.Labels = map[string]string{"team": "a", "paddock.node": "spoofed"}
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
	check("log driver bounded", h.LogConfig.Type == "json-file" && h.LogConfig.Config["max-size"] == docker.DefaultLogMaxSize && h.LogConfig.Config["max-file"] == "1", h.LogConfig)
	check("non-root user", cfg.User == docker.DefaultUser, cfg.User)
	check("working dir", cfg.WorkingDir == runtime.DefaultWorkspaceRoot, cfg.WorkingDir)
	check("name", c.Name == "/paddock-t-"+s.SessionID+".e3" && c.Name == "/"+docker.ContainerName("t", s.SessionID, 3), c.Name)
	for k, v := range map[string]string{
		docker.LabelSession: s.SessionID, docker.LabelTenant: "t", docker.LabelNode: rt.Node(),
		docker.LabelEpoch: "3", docker.LabelWorkspaceRoot: runtime.DefaultWorkspaceRoot,
		docker.LabelUserPrefix + "team": "a", docker.LabelUserPrefix + "paddock.node": "spoofed",
	} {
		check("label "+k, cfg.Labels[k] == v, cfg.Labels[k])
	}
	if got := sh(t, sb, "id -u; id -g; stat -c '%u:%g %a' /workspace"); got != "65534\n65534\n65534:65534 755\n" {
		t.Errorf("user and workspace owner: got %q, want 65534, 65534 and 65534:65534 755", got)
	}
	// No capability is left in any set (CapDrop ALL), and no new ones can
	// be gained.
	if got := sh(t, sb, "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status | tr -s ' \t' ' '"); got != "CapPrm: 0000000000000000\nCapEff: 0000000000000000\nCapBnd: 0000000000000000\nNoNewPrivs: 1\n" {
		t.Errorf("capabilities: got %q", got)
	}
	if got := sh(t, sb, "ls /sys/class/net"); got != "lo\n" {
		t.Errorf("network interfaces: got %q, want only lo", got)
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
	check("loosened pids", h.PidsLimit != nil && *h.PidsLimit == 100, h.PidsLimit)
	check("loosened memory", h.Memory == 64<<20 && h.MemorySwap == 64<<20, h.Memory)
	check("loosened cpus", h.NanoCPUs == 5e8, h.NanoCPUs)
	check("loosened user", c.Config.User == "0", c.Config.User)
	check("still CapDrop ALL", slices.Contains(h.CapDrop, "ALL"), h.CapDrop)
	check("still no-new-privileges", slices.Contains(h.SecurityOpt, "no-new-privileges:true"), h.SecurityOpt)
	if got := sh(t, lsb, "id -u; ls /sys/class/net | grep -c eth"); got != "0\n1\n" {
		t.Errorf("as root with a network: got %q, want uid 0 and one eth interface", got)
	}
}

// TestContainerName: names are valid for Docker and unique per tenant,
// session and epoch, even where identifiers could be read two ways.
func TestContainerName(t *testing.T) {
	valid := regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)
	type key struct {
		tenant, session string
		epoch           uint64
	}
	keys := []key{
		{"t", "550e8400-e29b-41d4-a716-446655440000", 1},
		{"a-b", "c", 1}, {"a", "b-c", 1}, // the same plain name
		{"a", "b-e2", 1}, {"a", "b", 2}, // an epoch suffix in the session
		{"a", "b.e2", 1}, {"a", "b:c", 1}, {"a", "b_c", 1}, {"a", "b@c", 1},
		{"a", "b_c.h0123456789abcdef", 1},
		{"ü", "x", 1}, {"u", "x", 1}, {"é", "x", 1}, {"a:b", "c", 1}, {"a", "b:c", 2},
		{"a", "b", 0}, {"a", "b", 10},
	}
	seen := map[string]key{}
	for _, k := range keys {
		name := docker.ContainerName(k.tenant, k.session, k.epoch)
		if !valid.MatchString(name) {
			t.Errorf("ContainerName(%q, %q, %d) = %q: not a valid container name", k.tenant, k.session, k.epoch, name)
		}
		if prev, ok := seen[name]; ok && !(prev.tenant == k.tenant && prev.session == k.session && max(prev.epoch, 1) == max(k.epoch, 1)) {
			t.Errorf("ContainerName: %+v and %+v both give %q", prev, k, name)
		}
		seen[name] = k
	}
	if got, want := docker.ContainerName("t", "s-1", 1), "paddock-t-s-1"; got != want {
		t.Errorf("plain name: got %q, want %q", got, want)
	}
}
