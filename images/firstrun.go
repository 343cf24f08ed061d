package images

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
)

// A first `engine serve` on a fresh machine makes its own sandbox images,
// so that nothing has to be installed or built by hand:
//
//	base:   present? → static busybox? → build (BuildBase)
//	                 → none: Install("busybox-static") (apt-get as root) → build
//	python: present? → pull PythonRegistryImage within PullTimeout → derive
//	                 → no registry: BuildPython (debootstrap, cached)
//
// Each step says on Progress what it does; a step that cannot run says
// what to do instead.

// Installer installs a package of the machine's package manager and
// writes the package manager's progress to w. It returns an error that
// says what to run by hand when it cannot.
type Installer func(ctx context.Context, pkg string, w io.Writer) error

// AptInstall installs pkg with apt-get (Debian, Ubuntu), non-interactive,
// its progress on w, running apt-get update first when the install fails
// for want of package lists. It refuses, with an error naming the command
// to run, unless this process is root and apt-get is on PATH.
func AptInstall(ctx context.Context, pkg string, w io.Writer) error {
	apt, err := exec.LookPath("apt-get")
	if err != nil {
		return fmt.Errorf("install %s: no apt-get on this machine: install it with its package manager", pkg)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("install %s: not root: run sudo apt-get install -y %s", pkg, pkg)
	}
	run := func(args ...string) error {
		cmd := exec.CommandContext(ctx, apt, args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = w, w
		return cmd.Run()
	}
	fmt.Fprintf(w, "apt-get install -y %s\n", pkg)
	if err := run("install", "-y", "-q", pkg); err == nil {
		return nil
	}
	fmt.Fprintln(w, "apt-get update (the install failed; the package lists may be missing or stale)")
	if err := run("update", "-q"); err != nil {
		return fmt.Errorf("install %s: apt-get update: %w", pkg, err)
	}
	if err := run("install", "-y", "-q", pkg); err != nil {
		return fmt.Errorf("install %s: apt-get install: %w", pkg, err)
	}
	return nil
}

// BaseSource says where EnsureBaseFrom gets a static busybox.
type BaseSource struct {
	// Busybox is the static busybox binary (default DefaultBusybox).
	Busybox string
	// Package is the package that installs it (default "busybox-static").
	Package string
	// Install, when set, installs Package when Busybox is missing.
	Install Installer
	// Progress receives what is done (default: discarded).
	Progress io.Writer
}

// EnsureBaseFrom makes sure the sandbox base image is on the engine under
// tag, as EnsureBase does, and when no static busybox is there installs
// src.Package with src.Install first. It reports whether it built the
// image; the error says what to install or run when it could not.
func EnsureBaseFrom(ctx context.Context, cli *client.Client, tag string, src BaseSource) (bool, error) {
	if src.Busybox == "" {
		src.Busybox = DefaultBusybox
	}
	if src.Package == "" {
		src.Package = "busybox-static"
	}
	if src.Progress == nil {
		src.Progress = io.Discard
	}
	if _, err := cli.ImageInspect(ctx, tag); err == nil {
		return false, nil
	} else if !errdefs.IsNotFound(err) {
		return false, fmt.Errorf("inspect image %s: %w", tag, err)
	}
	if CheckBusybox(src.Busybox) != nil && src.Install != nil {
		fmt.Fprintf(src.Progress, "the sandbox base image %s is missing and %s is not a static busybox: installing %s\n", tag, src.Busybox, src.Package)
		if err := src.Install(ctx, src.Package, src.Progress); err != nil {
			return false, fmt.Errorf("the sandbox base image %s is missing and cannot be built here: %w; then run: engine image build-base", tag, err)
		}
	}
	if err := CheckBusybox(src.Busybox); err != nil {
		return false, fmt.Errorf("the sandbox base image %s is missing and cannot be built here: %w; then run: engine image build-base", tag, err)
	}
	fmt.Fprintf(src.Progress, "building the sandbox base image %s from %s\n", tag, src.Busybox)
	if err := BuildBase(ctx, cli, tag, src.Busybox); err != nil {
		return false, err
	}
	return true, nil
}

// PythonRegistryImage is the image a registry gives the Python sandbox
// image from: the OpenAI Agents SDK's DockerSandbox default.
const PythonRegistryImage = "python:3.12-slim"

// How EnsurePython got the image.
const (
	// PythonPresent: the image was there.
	PythonPresent = "present"
	// PythonPulled: pulled from a registry and derived.
	PythonPulled = "pulled"
	// PythonBuilt: built from Debian's packages (BuildPython).
	PythonBuilt = "built"
)

// PythonSource says where EnsurePython gets the Python image.
type PythonSource struct {
	// Pull is the registry image to derive it from (default
	// PythonRegistryImage; "-" tries no registry).
	Pull string
	// PullTimeout bounds the pull (default 20s): a machine without a
	// registry must not wait long before building instead.
	PullTimeout time.Duration
	// Build says how to build it when no registry answers.
	Build PythonConfig
	// Progress receives what is done (default: discarded).
	Progress io.Writer
}

// EnsurePython makes sure the Python sandbox image is on the engine under
// tag: there already, else derived from src.Pull where a registry answers
// within src.PullTimeout (/workspace owned by nobody, as the base image
// has it), else built from Debian's packages (BuildPython: debootstrap as
// root, its root file system cached, so minutes once and seconds after).
// It returns PythonPresent, PythonPulled or PythonBuilt; the error says
// what failed of the pull and of the build.
func EnsurePython(ctx context.Context, cli *client.Client, tag string, src PythonSource) (string, error) {
	if src.Pull == "" {
		src.Pull = PythonRegistryImage
	}
	if src.PullTimeout == 0 {
		src.PullTimeout = 20 * time.Second
	}
	if src.Progress == nil {
		src.Progress = io.Discard
	}
	if _, err := cli.ImageInspect(ctx, tag); err == nil {
		return PythonPresent, nil
	} else if !errdefs.IsNotFound(err) {
		return "", fmt.Errorf("inspect image %s: %w", tag, err)
	}
	var pullErr error
	if src.Pull != "-" {
		fmt.Fprintf(src.Progress, "the Python sandbox image %s is missing: pulling %s (at most %s)\n", tag, src.Pull, src.PullTimeout)
		if pullErr = pullDerive(ctx, cli, tag, src.Pull, src.PullTimeout); pullErr == nil {
			return PythonPulled, nil
		}
		fmt.Fprintf(src.Progress, "no registry gave %s (%v): building %s from Debian's packages instead (debootstrap; minutes the first time, cached after)\n", src.Pull, pullErr, tag)
	}
	if err := BuildPython(ctx, cli, tag, src.Build); err != nil {
		return "", errors.Join(pullErr, err)
	}
	return PythonBuilt, nil
}

// pullDerive pulls ref within timeout and builds tag FROM it with a
// /workspace owned by nobody as the working directory.
func pullDerive(ctx context.Context, cli *client.Client, tag, ref string, timeout time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rc, err := cli.ImagePull(pctx, ref, image.PullOptions{})
	if err != nil {
		return err
	}
	err = ProgressErr(rc)
	rc.Close()
	if err != nil {
		return err
	}
	dockerfile := []byte("FROM " + ref + "\nRUN mkdir -p /workspace && chown 65534:65534 /workspace && chmod 1777 /tmp\nWORKDIR /workspace\n")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile))}); err != nil {
		return err
	}
	if _, err := tw.Write(dockerfile); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	res, err := cli.ImageBuild(ctx, &buf, build.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true})
	if err != nil {
		return fmt.Errorf("derive %s from %s: %w", tag, ref, err)
	}
	defer res.Body.Close()
	if err := ProgressErr(res.Body); err != nil {
		return fmt.Errorf("derive %s from %s: %w", tag, ref, err)
	}
	return nil
}
