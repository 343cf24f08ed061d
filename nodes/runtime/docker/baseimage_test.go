package docker_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// TestBuildBaseImage builds the base image under a tag of its own (the
// shared one may be in use) and checks what a sandbox of it sees.
func TestBuildBaseImage(t *testing.T) {
	cli := testenv.DockerClient(t)
	if err := docker.CheckBusybox(docker.DefaultBusybox); err != nil {
		t.Skip(err)
	}
	tag := "paddock/sandbox-base:selftest-" + uuid.NewString()[:8]
	if err := testenv.BuildSandboxImage(t.Context(), cli, tag); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := cli.ImageRemove(ctx, tag, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil {
			t.Errorf("remove %s: %v", tag, err)
		}
	})
	img, err := cli.ImageInspect(t.Context(), tag)
	if err != nil {
		t.Fatal(err)
	}
	if img.Config == nil || img.Config.WorkingDir != "/workspace" || len(img.Config.Env) != 1 || img.Config.Env[0] != "PATH=/bin" {
		t.Errorf("image config: %+v, want WORKDIR /workspace and PATH=/bin", img.Config)
	}
	rt := newRuntime(t)
	sb := create(t, rt, spec(rt, tag))
	want := "65534:65534 755 /workspace\n1777\nnobody:x:65534:65534:nobody:/workspace:/bin/sh\n"
	if got := sh(t, sb, "stat -c '%u:%g %a %n' /workspace; stat -c %a /tmp; grep ^nobody /etc/passwd"); got != want {
		t.Errorf("image layout: got %q, want %q", got, want)
	}
	for _, applet := range []string{"sh", "ls", "cat", "tar", "sleep", "kill", "setsid", "stat", "ps"} {
		if got := sh(t, sb, "readlink /bin/"+applet); got != "busybox\n" {
			t.Errorf("applet %s: got %q", applet, got)
		}
	}

	// A dynamically linked or missing busybox is refused with the hint.
	dyn := filepath.Join(t.TempDir(), "busybox")
	if err := os.WriteFile(dyn, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dyn, filepath.Join(t.TempDir(), "missing")} {
		if err := docker.CheckBusybox(p); err == nil {
			t.Errorf("CheckBusybox(%s): got nil, want an error", p)
		}
		if err := docker.BuildBaseImage(t.Context(), cli, tag+"x", p); err == nil {
			t.Errorf("BuildBaseImage from %s: got nil, want an error", p)
		}
	}
}

// TestEnsureImage: a missing base image is built (once: a second call
// finds it), and without a static busybox the error says what to install
// and run.
func TestEnsureImage(t *testing.T) {
	cli := testenv.DockerClient(t)
	if err := docker.CheckBusybox(docker.DefaultBusybox); err != nil {
		t.Skip(err)
	}
	rt := newRuntime(t)
	tag := "paddock/sandbox-base:ensure-" + uuid.NewString()[:8]
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = cli.ImageRemove(ctx, tag, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	built, err := rt.EnsureImage(t.Context(), tag, docker.DefaultBusybox)
	if err != nil || !built {
		t.Fatalf("first EnsureImage = %v, %v; want built", built, err)
	}
	if built, err := rt.EnsureImage(t.Context(), tag, docker.DefaultBusybox); err != nil || built {
		t.Fatalf("second EnsureImage = %v, %v; want found, not built", built, err)
	}
	_, err = rt.EnsureImage(t.Context(), tag+"-other", filepath.Join(t.TempDir(), "no-busybox"))
	if err == nil || !strings.Contains(err.Error(), "busybox-static") || !strings.Contains(err.Error(), "engine image build-base") {
		t.Fatalf("EnsureImage without busybox: got %v, want an error naming busybox-static and the command", err)
	}
}
