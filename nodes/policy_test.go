package nodes

import (
	"testing"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
)

func TestIsRoot(t *testing.T) {
	for in, want := range map[string]bool{
		"root": true, "0": true, "00": true, "0:0": true, "root:wheel": true, "0:1000": true,
		"": false, "1000": false, "nobody": false, "10": false, ":0": false, "rooty": false, "1000:0": false,
	} {
		if got := isRoot(in); got != want {
			t.Errorf("isRoot(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestPolicyCheckCreate(t *testing.T) {
	base := commands.CreateArgs{Image: commands.DefaultImage}
	with := func(f func(*commands.CreateArgs)) commands.CreateArgs { a := base; f(&a); return a }
	open := Policy{Images: []string{"registry.test/team/*"}, AllowNetwork: true, AllowRoot: true, MaxCPUs: 2, MaxMemoryBytes: 1 << 30, MaxPids: 100, MaxDiskBytes: 4 << 30}
	for _, tc := range []struct {
		name   string
		policy Policy
		spec   commands.CreateArgs
		rt     string
		denied bool
	}{
		{"defaults, base image", Policy{}, base, "docker", false},
		{"defaults, another image", Policy{}, with(func(a *commands.CreateArgs) { a.Image = "alpine" }), "docker", true},
		{"defaults, image on local", Policy{}, with(func(a *commands.CreateArgs) { a.Image = "alpine" }), "local", false},
		{"defaults, network", Policy{}, with(func(a *commands.CreateArgs) { a.Network = true }), "docker", true},
		{"defaults, root", Policy{}, with(func(a *commands.CreateArgs) { a.User = "0" }), "docker", true},
		{"defaults, a user", Policy{}, with(func(a *commands.CreateArgs) { a.User = "1000" }), "docker", false},
		{"pattern match", open, with(func(a *commands.CreateArgs) { a.Image = "registry.test/team/py" }), "docker", false},
		{"pattern miss", open, with(func(a *commands.CreateArgs) { a.Image = "registry.test/other/py" }), "docker", true},
		{"pattern, base image not listed", open, base, "docker", true},
		{"open, network and root", open, with(func(a *commands.CreateArgs) { a.Image = "registry.test/team/py"; a.Network = true; a.User = "root" }), "docker", false},
		{"cpus over", open, with(func(a *commands.CreateArgs) { a.Image = "registry.test/team/py"; a.CPUs = 3 }), "docker", true},
		{"memory over", open, with(func(a *commands.CreateArgs) { a.Image = "registry.test/team/py"; a.MemoryBytes = 2 << 30 }), "docker", true},
		{"pids over", open, with(func(a *commands.CreateArgs) { a.Image = "registry.test/team/py"; a.PidsLimit = 101 }), "docker", true},
		{"disk at the max", open, with(func(a *commands.CreateArgs) { a.Image = "registry.test/team/py"; a.DiskBytes = 4 << 30 }), "docker", false},
		{"disk over", open, with(func(a *commands.CreateArgs) { a.Image = "registry.test/team/py"; a.DiskBytes = 4<<30 + 1 }), "docker", true},
		{"disk over, local", open, with(func(a *commands.CreateArgs) { a.DiskBytes = 5 << 30 }), "local", true},
		{"disk, no max", Policy{}, with(func(a *commands.CreateArgs) { a.DiskBytes = 1 << 40 }), "docker", false},
	} {
		err := tc.policy.checkCreate(tc.spec, tc.rt)
		if (err != nil) != tc.denied || (err != nil && errcode.Of(err) != errcode.PolicyDenied) {
			t.Errorf("%s: got %v, want denied=%v", tc.name, err, tc.denied)
		}
	}
	if err := (Policy{MaxDiskBytes: -1}).Validate(); err == nil {
		t.Error("a negative disk bound passed Validate")
	}
	if err := (Policy{Images: []string{"["}}).Validate(); err == nil {
		t.Error("a malformed image pattern passed Validate")
	}
}
