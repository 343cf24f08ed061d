package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	"golang.org/x/sys/unix"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/overlay"
)

// A sandbox's disk: everything it can write is bounded by one budget,
// Spec.DiskBytes (Config.DefaultDiskBytes when the spec names none), by
// the best mechanism the host offers, probed once:
//
//	storage-opt  HostConfig.StorageOpt size: the storage driver's own
//	             per-container quota (overlay2 on xfs with pquota, btrfs,
//	             zfs, devicemapper). The writable layer, /tmp included
//	             (Docker mounts no tmpfs there), is bounded.
//	loopfs       an ext4 image of the sandbox's own, a sparse file
//	             DiskDir/<container name>/disk.img loop-mounted by the node
//	             (as root) at DiskDir/<container name>/mnt. The container's
//	             root file system is read-only, and every writable place
//	             is a bind mount of a directory of that image: the
//	             workspace root, <parent of the root>/.paddock (the
//	             hydrate's staging), /tmp and /var/tmp. Works on any
//	             storage driver (fuse-overlayfs here) with a local daemon.
//	none         no bound (not root, no mkfs.ext4, no loop devices, a
//	             remote daemon); the node warns at start.
//
// Writing past the bound fails inside the sandbox with ENOSPC; the node's
// own file systems are untouched. The mechanism and the bytes are on the
// container (LabelDisk), so that a node that restarts finds them again;
// the create's finish event reports them (disk_limit).
//
// A loopfs outlives a stop (the workspace is on it) and goes with the
// container (Shutdown unmounts it, which detaches its loop device, and
// deletes the image). Start mounts it again when it is not (after a
// reboot of the host). The reaper (FindSandboxes) removes the images whose
// container is gone: a node that crashed between the two.

// LabelDisk records a container's disk limit: "<mechanism>:<bytes>".
const LabelDisk = "paddock.disk"

// DefaultDiskBytes is Config.DefaultDiskBytes's default: 2 GiB.
const DefaultDiskBytes = 2 << 30

// The directories of a loopfs image, by what they are mounted as.
const (
	diskWorkspace = "workspace"
	diskHolder    = "paddock"
	diskTmp       = "tmp"
	diskVarTmp    = "var-tmp"
)

// disk is a sandbox's disk limit.
type disk struct {
	bytes     int64
	mechanism string
	// dir holds a loopfs's image and mount point (empty otherwise).
	dir string
	// overlay: the container's workspace mount receives the node's mounts
	// (LabelOverlay), so a restore may mount an overlay there.
	overlay bool
}

func (d disk) label() string { return d.mechanism + ":" + strconv.FormatInt(d.bytes, 10) }
func (d disk) img() string   { return filepath.Join(d.dir, "disk.img") }
func (d disk) mnt() string   { return filepath.Join(d.dir, "mnt") }

// parseDiskLabel reads LabelDisk; a missing or malformed one is none.
func parseDiskLabel(v string) disk {
	m, b, ok := strings.Cut(v, ":")
	n, err := strconv.ParseInt(b, 10, 64)
	switch {
	case !ok || err != nil || n < 0:
		return disk{mechanism: runtime.DiskNone}
	case m == runtime.DiskStorageOpt || m == runtime.DiskLoopFS:
		return disk{bytes: n, mechanism: m}
	}
	return disk{mechanism: runtime.DiskNone}
}

// foundDisk is the disk of a container found again, from its label and
// name: a loopfs's directory is DiskDir/<name>.
func (r *Runtime) foundDisk(label, name string) disk {
	d := parseDiskLabel(label)
	if d.mechanism == runtime.DiskLoopFS && r.cfg.DiskDir != "" && name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\\") {
		d.dir = filepath.Join(r.cfg.DiskDir, name)
	}
	return d
}

// summaryName is a listed container's name, without its slash.
func summaryName(c container.Summary) string {
	if len(c.Names) == 0 {
		return ""
	}
	return strings.TrimPrefix(c.Names[0], "/")
}

// DiskLimit returns the bytes the sandbox may write and the mechanism
// that bounds them (runtime.DiskNone, with 0 bytes, for none).
func (s *Sandbox) DiskLimit() (int64, string) {
	if s.disk.mechanism == "" || s.disk.mechanism == runtime.DiskNone {
		return 0, runtime.DiskNone
	}
	return s.disk.bytes, s.disk.mechanism
}

// DiskSupport is the disk-limit mechanism a runtime uses, and why it uses
// no better one.
type DiskSupport struct {
	Mechanism string
	// Why says why the better mechanisms are not used (empty for
	// storage-opt).
	Why string
}

// ProbeDisk finds the best disk-limit mechanism this host offers (once;
// later calls return the first answer) and returns it. image is an image
// on the engine to probe storage-opt with (a container is created, never
// started, and removed). An engine that does not answer is an error, and
// is asked again next time.
func (r *Runtime) ProbeDisk(ctx context.Context, image string) (DiskSupport, error) {
	r.dmu.Lock()
	defer r.dmu.Unlock()
	if r.diskSupport != nil {
		return *r.diskSupport, nil
	}
	var ds DiskSupport
	switch r.cfg.DiskMechanism {
	case runtime.DiskNone:
		ds = DiskSupport{Mechanism: runtime.DiskNone, Why: "the node's configuration says none"}
	case runtime.DiskLoopFS:
		ds = DiskSupport{Mechanism: runtime.DiskLoopFS, Why: "the node's configuration says loopfs"}
		if why := r.loopfsProblem(); why != "" {
			ds = DiskSupport{Mechanism: runtime.DiskNone, Why: why}
		}
	case runtime.DiskStorageOpt:
		ds = DiskSupport{Mechanism: runtime.DiskStorageOpt}
	default:
		why, err := r.probeStorageOpt(ctx, image)
		if err != nil {
			return DiskSupport{}, err
		}
		ds = DiskSupport{Mechanism: runtime.DiskStorageOpt}
		if why != "" {
			ds = DiskSupport{Mechanism: runtime.DiskLoopFS, Why: "storage-opt: " + why}
			if lw := r.loopfsProblem(); lw != "" {
				ds = DiskSupport{Mechanism: runtime.DiskNone, Why: ds.Why + "; loopfs: " + lw}
			}
		}
	}
	r.diskSupport = &ds
	return ds, nil
}

// probeStorageOpt creates (never starts) a container of image with a
// storage-opt size and removes it: "" when the engine took it, else why
// not.
func (r *Runtime) probeStorageOpt(ctx context.Context, image string) (string, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "paddock-probe-" + hex.EncodeToString(b[:])
	resp, err := r.cli.ContainerCreate(ctx,
		&container.Config{Image: image, Cmd: []string{"true"}, Labels: map[string]string{LabelNode: r.cfg.Node}},
		&container.HostConfig{StorageOpt: map[string]string{"size": strconv.FormatInt(r.cfg.DefaultDiskBytes, 10)}},
		nil, nil, name)
	// Ours by name: a failed create may still have made it. Not derived
	// from ctx, which may be what ended.
	rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ref := name
	if err == nil {
		ref = resp.ID
	}
	if rerr := r.cli.ContainerRemove(rctx, ref, container.RemoveOptions{Force: true}); rerr != nil && !errdefs.IsNotFound(rerr) && err == nil {
		return "", r.wrap(rerr, "remove the storage-opt probe")
	}
	switch {
	case err == nil:
		return "", nil
	case ctx.Err() != nil || client.IsErrConnectionFailed(err):
		return "", r.wrap(err, "probe storage-opt")
	case errdefs.IsNotFound(err):
		return "", r.wrap(err, "probe storage-opt: image "+image)
	}
	return err.Error(), nil
}

// loopfsProblem says why this host cannot have loopfs disks ("" when it
// can): it takes root (loop devices and mounts), a disk directory, a
// loop-control device, mkfs.ext4 and mount, and a daemon on this host that
// sees the node's mounts.
func (r *Runtime) loopfsProblem() string {
	switch {
	case r.cfg.DiskDir == "":
		return "no disk directory configured"
	case os.Geteuid() != 0:
		return "the node does not run as root (loop devices and mounts need it)"
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" && !strings.HasPrefix(h, "unix://") {
		return "the Docker daemon is remote (DOCKER_HOST " + h + "): it cannot see the node's mounts"
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return "no /dev/loop-control"
	}
	for _, tool := range []string{"mkfs.ext4", "mount"} {
		if _, err := lookTool(tool); err != nil {
			return tool + " is not installed (Debian: e2fsprogs, mount)"
		}
	}
	return ""
}

// lookTool finds a system tool on PATH or in the sbin directories, which
// a non-login PATH may lack.
func lookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// diskFor returns the disk limit a create of spec gets (its bytes, and
// the mechanism ProbeDisk found), probing with image when no probe ran.
func (r *Runtime) diskFor(ctx context.Context, spec runtime.Spec) (disk, error) {
	ds, err := r.ProbeDisk(ctx, spec.Image)
	if err != nil {
		return disk{}, err
	}
	d := disk{mechanism: ds.Mechanism, bytes: r.diskBytes(spec)}
	if d.mechanism == runtime.DiskNone {
		d.bytes = 0
	}
	return d, nil
}

// diskBytes is the disk a spec asks, or the runtime's default.
func (r *Runtime) diskBytes(spec runtime.Spec) int64 {
	if spec.DiskBytes > 0 {
		return spec.DiskBytes
	}
	return r.cfg.DefaultDiskBytes
}

// applyDisk sets up d for the container name about to be made with
// opts: storage-opt asks the engine; loopfs makes and mounts the image
// and mounts its directories over a read-only root. On error nothing is
// left.
func (r *Runtime) applyDisk(ctx context.Context, d *disk, name string, opts *created) error {
	opts.config.Labels[LabelDisk] = d.label()
	switch d.mechanism {
	case runtime.DiskStorageOpt:
		opts.host.StorageOpt = map[string]string{"size": strconv.FormatInt(d.bytes, 10)}
		return nil
	case runtime.DiskLoopFS:
	default:
		return nil
	}
	d.dir = filepath.Join(r.cfg.DiskDir, name)
	if err := r.makeLoopFS(ctx, *d); err != nil {
		if errcode.Of(err) == errcode.AlreadyExists {
			return err // the directory is that container's
		}
		if rerr := releaseDisk(*d); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return err
	}
	opts.host.ReadonlyRootfs = true
	targets := map[string]bool{}
	add := func(sub, target string, bind *mount.BindOptions) {
		if targets[target] {
			return
		}
		targets[target] = true
		opts.host.Mounts = append(opts.host.Mounts, mount.Mount{Type: mount.TypeBind, Source: filepath.Join(d.mnt(), sub), Target: target, BindOptions: bind})
	}
	var ws *mount.BindOptions
	if r.cfg.GVisor == "" {
		// The workspace's mount receives the overlay a restore from a kept
		// tree mounts on the node's side (overlay.go).
		opts.config.Labels[LabelOverlay] = "rslave"
		d.overlay = true
		ws = &mount.BindOptions{Propagation: mount.PropagationRSlave}
	}
	add(diskWorkspace, opts.root, ws)
	add(diskHolder, path.Join(path.Dir(opts.root), holderName), nil)
	add(diskTmp, "/tmp", nil)
	add(diskVarTmp, "/var/tmp", nil)
	return nil
}

// makeLoopFS makes d's image (sparse, ext4 with no reserved blocks),
// mounts it (nosuid, nodev) and makes its directories.
func (r *Runtime) makeLoopFS(ctx context.Context, d disk) error {
	if err := os.MkdirAll(r.cfg.DiskDir, 0o700); err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "disk directory")
	}
	if err := os.Mkdir(d.dir, 0o700); err != nil {
		if !errors.Is(err, os.ErrExist) {
			return errcode.Wrap(errcode.RuntimeError, err, "disk directory")
		}
		// The disk of a container of this name, or a previous attempt's
		// whose container is gone.
		if _, err := r.cli.ContainerInspect(ctx, filepath.Base(d.dir)); !errdefs.IsNotFound(err) {
			if err != nil {
				return r.wrap(err, "inspect container")
			}
			return errcode.New(errcode.AlreadyExists, "a container named %s already exists", filepath.Base(d.dir))
		}
		if err := releaseDisk(d); err != nil {
			return err
		}
		if err := os.Mkdir(d.dir, 0o700); err != nil {
			return errcode.Wrap(errcode.RuntimeError, err, "disk directory")
		}
	}
	f, err := os.OpenFile(d.img(), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "disk image")
	}
	err = f.Truncate(d.bytes)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "disk image")
	}
	if err := runTool(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-L", "paddock",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,root_owner=0:0", d.img()); err != nil {
		return err
	}
	if err := os.Mkdir(d.mnt(), 0o700); err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "disk mount point")
	}
	return mountLoopFS(ctx, d)
}

// mountLoopFS mounts d's image at its mount point (mount -o loop sets the
// loop device to detach itself at the unmount) and makes its directories
// when they are missing: the workspace and the staging holder belong to
// root until chownLoopFS gives them to the sandbox's user; /tmp and
// /var/tmp are 1777.
func mountLoopFS(ctx context.Context, d disk) error {
	if err := runTool(ctx, "mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noatime", d.img(), d.mnt()); err != nil {
		return err
	}
	// Shared, so that an overlay mounted on the workspace's directory
	// reaches the container's workspace mount (rslave).
	if err := unix.Mount("", d.mnt(), "", unix.MS_SHARED, ""); err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "disk: make the mount shared")
	}
	for sub, mode := range map[string]uint32{diskWorkspace: 0o755, diskHolder: 0o755, diskTmp: 0o1777, diskVarTmp: 0o1777} {
		p := filepath.Join(d.mnt(), sub)
		if err := os.Mkdir(p, 0o700); err != nil {
			if errors.Is(err, os.ErrExist) {
				continue
			}
			return errcode.Wrap(errcode.RuntimeError, err, "disk directory "+sub)
		}
		if err := unix.Chmod(p, mode); err != nil { // past the umask, with the sticky bit (0o1000, not os.ModeSticky)
			return errcode.Wrap(errcode.RuntimeError, err, "disk directory "+sub)
		}
	}
	return nil
}

// chownLoopFS gives the workspace and the staging holder of a loopfs to
// o. It runs before the container starts: nothing of the sandbox's can be
// in them yet.
func chownLoopFS(d disk, o owner) error {
	if d.mechanism != runtime.DiskLoopFS {
		return nil
	}
	for _, sub := range []string{diskWorkspace, diskHolder} {
		if err := os.Lchown(filepath.Join(d.mnt(), sub), o.uid, o.gid); err != nil {
			return errcode.Wrap(errcode.RuntimeError, err, "disk directory "+sub)
		}
	}
	return nil
}

// ensureMounted mounts a loopfs whose image is not mounted (the host
// rebooted since the container was made).
func ensureMounted(ctx context.Context, d disk) error {
	if d.mechanism != runtime.DiskLoopFS || d.dir == "" {
		return nil
	}
	if mounted(d) {
		return nil
	}
	if _, err := os.Stat(d.img()); err != nil {
		return errcode.Wrap(errcode.InvalidState, err, "the sandbox's disk image is gone")
	}
	return mountLoopFS(ctx, d)
}

// mounted reports whether d's mount point holds a file system other than
// its parent's.
func mounted(d disk) bool {
	var m, p unix.Stat_t
	if unix.Lstat(d.mnt(), &m) != nil || unix.Lstat(d.dir, &p) != nil {
		return false
	}
	return m.Dev != p.Dev
}

// releaseDisk unmounts a loopfs (its loop device detaches itself), lazily
// when something still holds it, and deletes its directory; it does
// nothing for other mechanisms. The directory is deleted only once nothing
// is mounted on it.
func releaseDisk(d disk) error {
	if d.mechanism != runtime.DiskLoopFS || d.dir == "" {
		return nil
	}
	if mounted(d) {
		// An overlay on the workspace holds the disk (its upper is there).
		if err := overlay.Unmount(filepath.Join(d.mnt(), diskWorkspace)); err != nil {
			return err
		}
		// A container being made at this moment holds a copy of the node's
		// mounts until its runtime detaches them (milliseconds): try a few
		// times, then detach lazily (the loop device goes with the last
		// reference).
		err := unix.Unmount(d.mnt(), 0)
		for wait := 20 * time.Millisecond; errors.Is(err, unix.EBUSY) && wait < time.Second; wait *= 2 {
			time.Sleep(wait)
			err = unix.Unmount(d.mnt(), 0)
		}
		if err != nil {
			if err := unix.Unmount(d.mnt(), unix.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
				return errcode.Wrap(errcode.RuntimeError, err, "unmount the sandbox's disk")
			}
		}
		if mounted(d) {
			return errcode.New(errcode.RuntimeError, "the sandbox's disk at %s is still mounted", d.mnt())
		}
	}
	if err := os.RemoveAll(d.dir); err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "remove the sandbox's disk")
	}
	return nil
}

// runTool runs a system tool, its output in the error.
func runTool(ctx context.Context, name string, args ...string) error {
	p, err := lookTool(name)
	if err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "disk: "+name)
	}
	out, err := exec.CommandContext(ctx, p, args...).CombinedOutput()
	if err != nil {
		return errcode.Wrap(errcode.RuntimeError, fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(string(out))), "disk: "+name+" failed")
	}
	return nil
}

// diskBusy marks a loopfs directory as a create's in progress (the reaper
// leaves it alone); the returned func unmarks it.
func (r *Runtime) diskBusy(name string) func() {
	r.dmu.Lock()
	r.disksMaking[name]++
	r.dmu.Unlock()
	return func() {
		r.dmu.Lock()
		if r.disksMaking[name]--; r.disksMaking[name] <= 0 {
			delete(r.disksMaking, name)
		}
		r.dmu.Unlock()
	}
}

// reapDisks removes the loopfs directories of DiskDir whose container is
// gone (a node that crashed between the two, or a container removed behind
// its back), older than staleAge and not a create's in progress. It
// returns how many it removed.
func (r *Runtime) reapDisks(ctx context.Context) (int, error) {
	if r.cfg.DiskDir == "" {
		return 0, nil
	}
	entries, err := os.ReadDir(r.cfg.DiskDir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, errcode.Wrap(errcode.RuntimeError, err, "read the disk directory")
	}
	n := 0
	var errs []error
	for _, e := range entries {
		name := e.Name()
		r.dmu.Lock()
		busy := r.disksMaking[name] > 0
		r.dmu.Unlock()
		info, ierr := e.Info()
		if busy || !e.IsDir() || ierr != nil || time.Since(info.ModTime()) < staleAge {
			continue
		}
		if _, err := r.cli.ContainerInspect(ctx, name); !errdefs.IsNotFound(err) {
			if err != nil {
				errs = append(errs, r.wrap(err, "inspect container"))
			}
			continue
		}
		if err := releaseDisk(disk{mechanism: runtime.DiskLoopFS, dir: filepath.Join(r.cfg.DiskDir, name)}); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// ReapDisks removes the loopfs disks whose container is gone, as the
// reaper's pass does (see FindSandboxes), and returns how many it removed.
func (r *Runtime) ReapDisks(ctx context.Context) (int, error) { return r.reapDisks(ctx) }

// DataRoot returns the engine's data root (Docker Root Dir) when the
// engine is on this host (empty for a remote one); an engine failure is
// runtime_error.
func (r *Runtime) DataRoot(ctx context.Context) (string, error) {
	if h := os.Getenv("DOCKER_HOST"); h != "" && !strings.HasPrefix(h, "unix://") {
		return "", nil
	}
	info, err := r.cli.Info(ctx)
	if err != nil {
		return "", r.wrap(err, "info")
	}
	return info.DockerRootDir, nil
}
