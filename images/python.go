package images

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// Python is the tag of the sandbox image with Python and git that
// `engine image build-python` builds, for agents that run what they write
// (the OpenAI Agents SDK provider's tests use it). The base image stays the
// small default; a node must allow this one (--allow-image).
const Python = "paddock/sandbox-python:test"

// PythonConfig says how to make the Python image's root file system.
type PythonConfig struct {
	// Suite is the Debian release (default bookworm).
	Suite string
	// Mirror is the Debian mirror (default http://deb.debian.org/debian).
	Mirror string
	// CacheDir holds the root file system tarball between builds (default
	// <user cache dir>/paddock), so a machine runs debootstrap once.
	CacheDir string
	// Rootfs, when set, is an existing debootstrap tree to pack instead of
	// running debootstrap.
	Rootfs string
}

func (c *PythonConfig) defaults() error {
	if c.Suite == "" {
		c.Suite = "bookworm"
	}
	if c.Mirror == "" {
		c.Mirror = "http://deb.debian.org/debian"
	}
	if c.CacheDir == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			return fmt.Errorf("python image: no cache dir: %w", err)
		}
		c.CacheDir = filepath.Join(d, "paddock")
	}
	return nil
}

// RootfsTarball returns the path of the cached root file system tarball
// for cfg (which may not exist yet).
func (c PythonConfig) RootfsTarball() string {
	return filepath.Join(c.CacheDir, fmt.Sprintf("rootfs-python-%s-%s.tar", c.Suite, runtime.GOARCH))
}

// BuildPython makes the Python sandbox image under tag: Debian's
// minbase (debootstrap --variant=minbase) with python3 and git, the apt
// caches and documentation removed, /workspace owned by nobody (65534,
// which Debian's passwd names) and /tmp 1777, imported as one layer with
// PATH set and WORKDIR /workspace, as the base image has, and with
// Profile and RootProfile as /etc/profile and /root/.profile (a login
// shell as cheap as sh -c, issue 26). The root file
// system is packed once into cfg's cache and imported from there on later
// builds. Building it needs debootstrap, root and a reachable mirror; the
// error says which is missing.
func BuildPython(ctx context.Context, cli *client.Client, tag string, cfg PythonConfig) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	tarball := cfg.RootfsTarball()
	if _, err := os.Stat(tarball); errors.Is(err, os.ErrNotExist) {
		if err := buildPythonRootfs(ctx, cfg, tarball); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("python image: %w", err)
	}
	f, err := os.Open(tarball)
	if err != nil {
		return fmt.Errorf("python image: %w", err)
	}
	defer f.Close()
	src := withImageFiles(f)
	defer src.Close()
	rc, err := cli.ImageImport(ctx, image.ImportSource{Source: src, SourceName: "-"}, tag, image.ImportOptions{
		Changes: []string{"ENV PATH=/usr/local/bin:/usr/bin:/bin", "ENV LANG=C.UTF-8", "WORKDIR /workspace"},
		Message: "paddock sandbox python (debian " + cfg.Suite + " minbase, python3, git)",
	})
	if err != nil {
		return fmt.Errorf("python image: import: %w", err)
	}
	defer rc.Close()
	if err := ProgressErr(rc); err != nil {
		return fmt.Errorf("python image: import: %w", err)
	}
	return nil
}

// buildPythonRootfs runs debootstrap (unless cfg.Rootfs names a tree),
// trims the tree and packs it into tarball.
func buildPythonRootfs(ctx context.Context, cfg PythonConfig, tarball string) error {
	if err := os.MkdirAll(cfg.CacheDir, 0o755); err != nil {
		return fmt.Errorf("python image: %w", err)
	}
	dir := cfg.Rootfs
	if dir == "" {
		deb, err := exec.LookPath("debootstrap")
		if err != nil {
			return fmt.Errorf("python image: no debootstrap (on Debian: apt-get install debootstrap): %w", err)
		}
		if os.Geteuid() != 0 {
			return errors.New("python image: debootstrap needs root (or pass a prepared tree with --rootfs)")
		}
		tmp, err := os.MkdirTemp(cfg.CacheDir, "rootfs-python-")
		if err != nil {
			return fmt.Errorf("python image: %w", err)
		}
		defer os.RemoveAll(tmp)
		dir = filepath.Join(tmp, "root")
		cmd := exec.CommandContext(ctx, deb, "--variant=minbase", "--include=python3,git", cfg.Suite, dir, cfg.Mirror)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("python image: debootstrap %s: %w\n%s", cfg.Suite, err, tail(out, 2048))
		}
	}
	for _, p := range []string{"var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale"} {
		if err := clearDir(filepath.Join(dir, p)); err != nil {
			return fmt.Errorf("python image: trim %s: %w", p, err)
		}
	}
	ws := filepath.Join(dir, "workspace")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return fmt.Errorf("python image: %w", err)
	}
	if err := os.Chown(ws, 65534, 65534); err != nil {
		return fmt.Errorf("python image: chown /workspace: %w", err)
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), os.ModePerm|os.ModeSticky); err != nil {
		return fmt.Errorf("python image: chmod /tmp: %w", err)
	}
	part := tarball + ".part"
	cmd := exec.CommandContext(ctx, "tar", "--numeric-owner", "-C", dir, "-cf", part, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(part)
		return fmt.Errorf("python image: tar: %w\n%s", err, tail(out, 2048))
	}
	return os.Rename(part, tarball)
}

// clearDir removes what dir holds, keeping dir; a missing dir is fine.
func clearDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
