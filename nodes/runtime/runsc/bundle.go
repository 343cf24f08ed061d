package runsc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// cgroupParent is the cgroup the sandboxes' own are made in.
const cgroupParent = "paddock-runsc"

// keepAlive is every sandbox's first process: it idles until stopped.
const keepAlive = `trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done`

// Images gives the root file systems of images.
type Images interface {
	// ImageID returns the image's content id (image_not_found when the
	// engine has no such image).
	ImageID(ctx context.Context, ref string) (string, error)
	// ExportRootfs writes a tar of a container of the image's file system
	// to w.
	ExportRootfs(ctx context.Context, ref string, w io.Writer) error
}

// DockerImages exports root file systems from a Docker engine.
type DockerImages struct{ cli *client.Client }

var _ Images = (*DockerImages)(nil)

// NewDockerImages returns Images of the engine the environment names
// (DOCKER_HOST, as the docker CLI), or an error when the client cannot be
// made.
func NewDockerImages() (*DockerImages, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("runsc runtime: docker client: %w", err)
	}
	return &DockerImages{cli: cli}, nil
}

// DockerImagesOf returns Images of the engine cli talks to (the caller
// keeps owning cli).
func DockerImagesOf(cli *client.Client) *DockerImages { return &DockerImages{cli: cli} }

// Close closes the engine's client.
func (d *DockerImages) Close() error { return d.cli.Close() }

// ImageID returns the image's id.
func (d *DockerImages) ImageID(ctx context.Context, ref string) (string, error) {
	img, err := d.cli.ImageInspect(ctx, ref)
	if errdefs.IsNotFound(err) {
		return "", errcode.Wrap(errcode.ImageNotFound, err, "image "+ref+" is not on the node")
	}
	if err != nil {
		return "", errcode.Wrap(errcode.RuntimeError, err, "inspect image "+ref)
	}
	return img.ID, nil
}

// ExportRootfs creates a container of the image (never started), exports
// it and removes it.
func (d *DockerImages) ExportRootfs(ctx context.Context, ref string, w io.Writer) error {
	resp, err := d.cli.ContainerCreate(ctx, &container.Config{Image: ref, Cmd: []string{"true"},
		Labels: map[string]string{"paddock.rootfs-export": "1"}}, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "create a container of "+ref+" to export")
	}
	// Not derived from ctx, which may be what ended.
	defer func() {
		_ = d.cli.ContainerRemove(context.WithoutCancel(ctx), resp.ID, container.RemoveOptions{Force: true})
	}()
	rc, err := d.cli.ContainerExport(ctx, resp.ID)
	if err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "export "+ref)
	}
	defer rc.Close()
	if _, err := io.Copy(w, rc); err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "export "+ref)
	}
	return nil
}

// rootfs returns the cached root file system of image, exporting it the
// first time. The export is extracted by the host's tar (as root, keeping
// owners, devices and absolute symlinks, which a root file system holds
// and a workspace archive may not) into a temporary directory renamed into
// place, so a failed export leaves no half a root behind.
func (r *Runtime) rootfs(ctx context.Context, image string) (string, error) {
	if r.cfg.Images == nil {
		return "", errcode.New(errcode.RuntimeError, "the runsc runtime has no image source (Config.Images)")
	}
	id, err := r.cfg.Images.ImageID(ctx, image)
	if err != nil {
		return "", err
	}
	name := strings.TrimPrefix(id, "sha256:")
	if name == "" || strings.ContainsAny(name, "/.") {
		return "", errcode.New(errcode.RuntimeError, "image %s has an unusable id %q", image, id)
	}
	dir := filepath.Join(r.cfg.Dir, "rootfs", name)
	r.rootMu.Lock()
	defer r.rootMu.Unlock()
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(filepath.Join(r.cfg.Dir, "rootfs"), ".tmp-")
	if err != nil {
		return "", errcode.Wrap(errcode.RuntimeError, err, "make a rootfs directory")
	}
	defer os.RemoveAll(tmp)
	tar := exec.CommandContext(ctx, "tar", "-x", "--numeric-owner", "-p", "-C", tmp)
	pw, err := tar.StdinPipe()
	if err != nil {
		return "", errcode.Wrap(errcode.RuntimeError, err, "extract rootfs")
	}
	var tarOut strings.Builder
	tar.Stderr = &tarOut
	if err := tar.Start(); err != nil {
		return "", errcode.Wrap(errcode.RuntimeError, err, "extract rootfs")
	}
	eerr := r.cfg.Images.ExportRootfs(ctx, image, pw)
	_ = pw.Close()
	werr := tar.Wait()
	if eerr != nil {
		return "", eerr
	}
	if werr != nil {
		return "", errcode.Wrap(errcode.RuntimeError, fmt.Errorf("%w: %s", werr, tarOut.String()), "extract rootfs")
	}
	// MkdirTemp made it 0700, and an export has no entry for "/".
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", errcode.Wrap(errcode.RuntimeError, err, "keep rootfs")
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", errcode.Wrap(errcode.RuntimeError, err, "keep rootfs")
	}
	return dir, nil
}

// ensureMountpoint makes the directory a mount needs in a cached root
// file system (read-only to sandboxes; the node may add empty mount
// points). A path through a symlink of the image is refused.
func ensureMountpoint(rootfs, p string) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "open rootfs")
	}
	defer root.Close()
	rel := strings.TrimPrefix(p, "/")
	fi, err := root.Lstat(rel)
	if err == nil && fi.IsDir() {
		return nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return errcode.Wrap(errcode.InvalidRequest, err, "mount point "+p)
	}
	if err == nil {
		return errcode.New(errcode.InvalidRequest, "mount point %s is not a directory in the image", p)
	}
	if err := root.MkdirAll(rel, 0o755); err != nil {
		return errcode.Wrap(errcode.InvalidRequest, err, "mount point "+p)
	}
	return nil
}

// writeBundle writes the sandbox's OCI bundle: config.json over rootfs
// (read-only), hardened as the package doc says.
func writeBundle(sb *Sandbox, rootfs string, spec runtime.Spec) error {
	if err := ensureMountpoint(rootfs, sb.vroot); err != nil {
		return err
	}
	mem := spec.MemoryBytes
	if mem <= 0 {
		mem = DefaultMemory
	}
	pids := spec.PidsLimit
	if pids <= 0 {
		pids = DefaultPids
	}
	hostPids := GVisorPids(pids)
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + sb.vroot}
	keys := make([]string, 0, len(spec.Env))
	for k := range spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+spec.Env[k])
	}
	none := []string{}
	s := specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			User:            specs.User{UID: uint32(sb.uid), GID: uint32(sb.gid)},
			Args:            []string{"/bin/sh", "-c", keepAlive},
			Env:             env,
			Cwd:             sb.vroot,
			NoNewPrivileges: true,
			Capabilities:    &specs.LinuxCapabilities{Bounding: none, Effective: none, Inheritable: none, Permitted: none, Ambient: none},
			Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}},
		},
		Root:     &specs.Root{Path: rootfs, Readonly: true},
		Hostname: "sandbox",
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", fmt.Sprintf("size=%d", TmpBytes), "mode=1777"}},
			{Destination: sb.vroot, Type: "bind", Source: sb.ws.Dir(), Options: []string{"rbind", "rw", "nosuid", "nodev"}},
		},
		Annotations: map[string]string{"paddock.tenant": spec.Tenant, "paddock.session": spec.SessionID, "paddock.node": spec.Node},
		Linux: &specs.Linux{
			Resources: &specs.LinuxResources{
				Memory: &specs.LinuxMemory{Limit: &mem},
				Pids:   &specs.LinuxPids{Limit: hostPids},
			},
			CgroupsPath: "/" + cgroupParent + "/" + sb.cgroupName(),
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
			},
		},
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return errcode.Wrap(errcode.Internal, err, "encode the bundle")
	}
	if err := os.WriteFile(filepath.Join(sb.dir, "config.json"), data, 0o600); err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "write the bundle")
	}
	return nil
}

// GVisorPids is the host pids limit that leaves a sandbox room for pids
// processes of its own: under runsc's ptrace platform each task is backed
// by host threads (64 in all stopped runsc here with "error initializing
// first thread"). The same rule as the docker runtime's gvisor.
func GVisorPids(pids int64) int64 { return 4*pids + 128 }
