package runtimetest

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoTestenv checks the rule of the package doc: runtimetest, a library
// package, does not link testenv.
func TestNoTestenv(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go tool on PATH: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "github.com/paddock-dev/paddock/testenv" {
			t.Fatalf("runtimetest links %s; take what it needs as parameters instead", p)
		}
	}
}
