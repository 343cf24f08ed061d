package deploy_test

import (
	"os"
	"os/exec"
	"testing"
)

// tool returns the path of a command the test needs: a skip when it is
// missing, a failure with CI=true (.ci/run installs it from pkg).
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is missing (Debian package %s; .ci/run installs it): %v", name, pkg, err)
	}
	t.Skipf("%s is missing (apt-get install %s)", name, pkg)
	return ""
}
