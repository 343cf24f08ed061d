package main

import (
	"flag"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// update rewrites deps.txt from what the package imports now:
//
//	go test ./cmd/paddock-supervisor/ -run TestDeps -update
var update = flag.Bool("update", false, "rewrite deps.txt")

// depsEnv is the build the supervisor is shipped as (see
// images.BuildSupervisor: static, for the Linux containers it runs in),
// pinned to one architecture so that the list is the same on every host.
var depsEnv = []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64"}

// forbidden are packages the in-sandbox binary must never link: it speaks
// to its node on a unix socket and needs neither HTTP nor TLS. Every
// byte it links runs in every sandbox, as the sandbox's user.
var forbidden = []string{"net/http", "crypto/tls"}

// TestDeps compares the packages the supervisor links (go list -deps)
// with deps.txt, after the fashion of Tailscale's depaware.txt: a new
// dependency shows in review as a change to that file.
func TestDeps(t *testing.T) {
	got := listDeps(t)
	for _, p := range got {
		for _, f := range forbidden {
			if p == f || strings.HasPrefix(p, f+"/") {
				t.Errorf("the supervisor links %s (through %s); it must not", f, p)
			}
		}
	}
	if *update {
		if err := os.WriteFile("deps.txt", []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile("deps.txt")
	if err != nil {
		t.Fatalf("%v (write it with -update)", err)
	}
	want := strings.Fields(string(b))
	var added, removed []string
	for _, p := range got {
		if !slices.Contains(want, p) {
			added = append(added, "+ "+p)
		}
	}
	for _, p := range want {
		if !slices.Contains(got, p) {
			removed = append(removed, "- "+p)
		}
	}
	if len(added)+len(removed) > 0 {
		t.Errorf("the supervisor's dependencies differ from deps.txt (review, then rewrite it with go test -run TestDeps -update):\n%s",
			strings.Join(append(added, removed...), "\n"))
	}
}

// listDeps returns the sorted import paths the package links, as built
// with depsEnv.
func listDeps(t *testing.T) []string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go tool on PATH: %v", err)
	}
	cmd := exec.Command(goTool, "list", "-deps", ".")
	cmd.Env = append(os.Environ(), depsEnv...)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	deps := strings.Fields(string(out))
	slices.Sort(deps)
	return deps
}
