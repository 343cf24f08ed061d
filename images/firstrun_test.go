package images_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/images"
	"github.com/paddock-dev/paddock/testenv"
)

// removeImage removes tag when the test ends (the test made it).
func removeImage(t *testing.T, cli *client.Client, tag string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // the test's context is gone
		defer cancel()
		if _, err := cli.ImageRemove(ctx, tag, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil && !strings.Contains(err.Error(), "No such image") {
			t.Errorf("remove %s: %v", tag, err)
		}
	})
}

// TestEnsureBaseFromInstalls: on a machine without a static busybox the
// first start installs the package (here an installer that copies the
// real binary where the package would put it), says so on its progress,
// and builds the image; a second call finds it there.
func TestEnsureBaseFromInstalls(t *testing.T) {
	cli := testenv.DockerClient(t)
	if err := images.CheckBusybox(images.DefaultBusybox); err != nil {
		t.Skip(err)
	}
	tag := "paddock/sandbox-base:firstrun-" + uuid.NewString()[:8]
	removeImage(t, cli, tag)
	busybox := filepath.Join(t.TempDir(), "busybox")
	var installed []string
	install := func(_ context.Context, pkg string, w io.Writer) error {
		installed = append(installed, pkg)
		fmt.Fprintf(w, "Setting up %s ...\n", pkg)
		b, err := os.ReadFile(images.DefaultBusybox)
		if err != nil {
			return err
		}
		return os.WriteFile(busybox, b, 0o755)
	}
	var progress bytes.Buffer
	built, err := images.EnsureBaseFrom(t.Context(), cli, tag, images.BaseSource{Busybox: busybox, Install: install, Progress: &progress})
	if err != nil || !built {
		t.Fatalf("EnsureBaseFrom: built %v, err %v; want built", built, err)
	}
	if strings.Join(installed, ",") != "busybox-static" {
		t.Errorf("installed %v, want busybox-static", installed)
	}
	for _, want := range []string{"installing busybox-static", "Setting up busybox-static", "building the sandbox base image " + tag} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress %q does not say %q", progress.String(), want)
		}
	}
	if _, err := cli.ImageInspect(t.Context(), tag); err != nil {
		t.Fatalf("the image is not there: %v", err)
	}
	installed = nil
	if built, err := images.EnsureBaseFrom(t.Context(), cli, tag, images.BaseSource{Busybox: busybox, Install: install}); err != nil || built || installed != nil {
		t.Errorf("second EnsureBaseFrom: built %v, err %v, installed %v; want nothing done", built, err, installed)
	}
}

// TestEnsureBaseFromCannot: when the install fails (or there is no
// installer) the error says what to install and run, and no image is
// made.
func TestEnsureBaseFromCannot(t *testing.T) {
	cli := testenv.DockerClient(t)
	tag := "paddock/sandbox-base:firstrun-" + uuid.NewString()[:8]
	removeImage(t, cli, tag)
	busybox := filepath.Join(t.TempDir(), "busybox")
	refused := errors.New("install busybox-static: not root: run sudo apt-get install -y busybox-static")
	for name, install := range map[string]images.Installer{
		"install fails": func(context.Context, string, io.Writer) error { return refused },
		"no installer":  nil,
	} {
		built, err := images.EnsureBaseFrom(t.Context(), cli, tag, images.BaseSource{Busybox: busybox, Install: install})
		if err == nil || built || !strings.Contains(err.Error(), "busybox-static") || !strings.Contains(err.Error(), "engine image build-base") {
			t.Errorf("%s: built %v, err %v; want an error naming busybox-static and engine image build-base", name, built, err)
		}
		if install != nil && !errors.Is(err, refused) {
			t.Errorf("%s: %v does not wrap the installer's error", name, err)
		}
	}
	if _, err := cli.ImageInspect(t.Context(), tag); err == nil {
		t.Error("an image was made without a busybox")
	}
}

// TestAptInstallWithoutApt: AptInstall on a machine without apt-get says
// so instead of running anything.
func TestAptInstallWithoutApt(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var progress bytes.Buffer
	err := images.AptInstall(t.Context(), "busybox-static", &progress)
	if err == nil || !strings.Contains(err.Error(), "no apt-get") {
		t.Errorf("AptInstall without apt-get: %v, want an error saying there is no apt-get", err)
	}
	if progress.Len() != 0 {
		t.Errorf("AptInstall without apt-get wrote %q", progress.String())
	}
}

// TestEnsurePythonWithoutRegistry: no registry answers here, so the pull
// fails within its bound, the progress says so, and the image is built
// from the cached Debian root file system (.ci/run's build-python made
// it; without it the test skips, and fails with CI=true). A second call
// finds it there.
func TestEnsurePythonWithoutRegistry(t *testing.T) {
	cli := testenv.DockerClient(t)
	var cfg images.PythonConfig
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Skip(err)
	}
	cfg.CacheDir = filepath.Join(cache, "paddock")
	if _, err := os.Stat(filepath.Join(cfg.CacheDir, "rootfs-python-bookworm-amd64.tar")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but no cached Python root file system (engine image build-python makes it): %v", err)
		}
		t.Skip("no cached Python root file system: engine image build-python")
	}
	tag := "paddock/sandbox-python:firstrun-" + uuid.NewString()[:8]
	removeImage(t, cli, tag)
	// A name no registry has, so that the test does not depend on there
	// being none.
	pull := "paddock-test.invalid/python:none"
	var progress bytes.Buffer
	how, err := images.EnsurePython(t.Context(), cli, tag, images.PythonSource{Pull: pull, PullTimeout: 10 * time.Second, Build: cfg, Progress: &progress})
	if err != nil || how != images.PythonBuilt {
		t.Fatalf("EnsurePython: %q, %v; want built", how, err)
	}
	if !strings.Contains(progress.String(), "no registry gave "+pull) {
		t.Errorf("progress %q does not say the pull failed", progress.String())
	}
	if how, err := images.EnsurePython(t.Context(), cli, tag, images.PythonSource{Pull: pull, Build: cfg}); err != nil || how != images.PythonPresent {
		t.Errorf("second EnsurePython: %q, %v; want present", how, err)
	}
}
