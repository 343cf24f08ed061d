package runtimes

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// TestOpenGVisor: --runtime gvisor opens the Docker runtime under runsc
// once a probe container ran on gVisor's kernel; a runtime name Docker
// does not list fails the start with what to do; auto never picks gvisor.
func TestOpenGVisor(t *testing.T) {
	testenv.SandboxBaseImage(t)
	logger := slog.New(slog.DiscardHandler)
	o := Options{Mode: "gvisor", Node: "gvisor-open-test", LocalDir: t.TempDir(),
		Docker: DockerFlags{Supervisor: testenv.SupervisorBinary(t), SupervisorDir: testenv.SupervisorDir(t), GVisorRuntime: testenv.GVisorRuntime(t), DiskDir: t.TempDir()}}
	rts, closeAll, err := Open(t.Context(), o, logger)
	if err != nil {
		t.Fatal(err)
	}
	if len(rts) != 1 || rts[0].Name() != docker.NameGVisor {
		t.Errorf("--runtime gvisor opened %v; want the gvisor runtime", rts)
	}
	if err := closeAll(); err != nil {
		t.Error(err)
	}

	o.Docker.GVisorRuntime = "no-such-runtime"
	if _, _, err := Open(t.Context(), o, logger); err == nil || !strings.Contains(err.Error(), "register-gvisor") || !strings.Contains(err.Error(), "SIGHUP") {
		t.Errorf("--runtime gvisor without runsc registered: %v; want an error saying how to register it", err)
	}

	o.Docker.GVisorRuntime, o.Docker.Supervisor = testenv.GVisorRuntime(t), "off"
	if _, _, err := Open(t.Context(), o, logger); err == nil || !strings.Contains(err.Error(), "supervisor") {
		t.Errorf("--runtime gvisor --supervisor off: %v; want an error naming the supervisor", err)
	}

	o.Mode = "auto"
	rts, closeAll, err = Open(t.Context(), o, logger)
	if err != nil {
		t.Fatal(err)
	}
	if rts[0].Name() != "docker" {
		t.Errorf("auto opened %s; want docker (gvisor must be named)", rts[0].Name())
	}
	_ = closeAll()
}
