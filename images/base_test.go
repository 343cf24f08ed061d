package images_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/images"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// TestBuildBase builds the base image under a tag of its own (the
// shared one may be in use) and checks what a sandbox of it sees.
func TestBuildBase(t *testing.T) {
	cli := testenv.DockerClient(t)
	if err := images.CheckBusybox(images.DefaultBusybox); err != nil {
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
	sb := sandboxOf(t, tag)
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
		if err := images.CheckBusybox(p); err == nil {
			t.Errorf("CheckBusybox(%s): got nil, want an error", p)
		}
		if err := images.BuildBase(t.Context(), cli, tag+"x", p); err == nil {
			t.Errorf("BuildBaseImage from %s: got nil, want an error", p)
		}
	}
}

// TestEnsureBase: a missing base image is built (once: a second call
// finds it), and without a static busybox the error says what to install
// and run.
func TestEnsureBase(t *testing.T) {
	cli := testenv.DockerClient(t)
	if err := images.CheckBusybox(images.DefaultBusybox); err != nil {
		t.Skip(err)
	}
	tag := "paddock/sandbox-base:ensure-" + uuid.NewString()[:8]
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = cli.ImageRemove(ctx, tag, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	built, err := images.EnsureBase(t.Context(), cli, tag, images.DefaultBusybox)
	if err != nil || !built {
		t.Fatalf("first EnsureBase = %v, %v; want built", built, err)
	}
	if built, err := images.EnsureBase(t.Context(), cli, tag, images.DefaultBusybox); err != nil || built {
		t.Fatalf("second EnsureBase = %v, %v; want found, not built", built, err)
	}
	_, err = images.EnsureBase(t.Context(), cli, tag+"-other", filepath.Join(t.TempDir(), "no-busybox"))
	if err == nil || !strings.Contains(err.Error(), "busybox-static") || !strings.Contains(err.Error(), "engine image build-base") {
		t.Fatalf("EnsureBase without busybox: got %v, want an error naming busybox-static and the command", err)
	}
}

// sandboxOf returns a running sandbox of image on a Docker runtime of the
// test's, shut down when the test ends.
func sandboxOf(t testing.TB, image string) runtime.Sandbox {
	t.Helper()
	rt, err := docker.New(docker.Config{Client: testenv.DockerClient(t), Node: "test-" + uuid.NewString(), DiskDir: testenv.DiskDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	sb, err := rt.Create(t.Context(), runtime.Spec{Tenant: "t", SessionID: uuid.NewString(), Node: rt.Node(), Epoch: 1, Image: image})
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
	return sb
}

// sh runs script in sb and returns its stdout; anything but exit 0 fails
// the test.
func sh(t *testing.T, sb runtime.Sandbox, script string) string {
	t.Helper()
	res, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"sh", "-c", script}, Timeout: time.Minute})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("sh -c %q: exit %d, stderr %q, %v", script, res.ExitCode, res.Stderr, err)
	}
	return string(res.Stdout)
}
