// Package runtimes opens the runtimes a node agent serves, as the
// --runtime flag of agent-node and engine serve selects them:
//
//	auto    Docker when this host has it; local only on a host without
//	        Docker and a deployment on loopback
//	docker  Docker; an error when its daemon does not answer
//	gvisor  Docker with gVisor's runsc as the OCI runtime (a user-space
//	        kernel between sandboxes and the host's); an error when the
//	        daemon does not list runsc or a probe container does not run
//	        under it. auto never picks it: the operator names it.
//	runsc   gVisor run by runsc directly, not through Docker: sandboxes
//	        whose processes and memory can be checkpointed and restored
//	        (package nodes/runtime/runsc); root and runsc on PATH, and a
//	        Docker engine only to export images' root file systems. auto
//	        never picks it.
//	local   the local process runtime (no security boundary)
//
// auto fails closed. It never offers local beside Docker: on a host with
// Docker, untrusted code must not be able to ask for the unconfined
// runtime. A host has Docker when DOCKER_HOST is set or the daemon's
// socket exists; then auto waits for the daemon (a slow start at boot is
// no reason to run sandboxes unconfined) and fails with a clear message if
// it never answers. And auto never picks local for a deployment reachable
// beyond this machine (a node connecting to a non-loopback NATS URL, an
// engine listening on a non-loopback address): local must be named.
package runtimes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/paddock-dev/paddock/images"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
	"github.com/paddock-dev/paddock/nodes/runtime/runsc"
)

// Modes lists the values of the --runtime flag.
const Modes = "auto, docker, gvisor, runsc or local"

// Options selects and configures the runtimes.
type Options struct {
	// Mode is auto, docker, gvisor, runsc or local.
	Mode string
	// Node is the node's id; Docker labels its containers with it.
	Node string
	// LocalDir holds the local runtime's sandboxes, and the runsc
	// runtime's state (root file systems, bundles, workspaces) under
	// runsc/.
	LocalDir string
	// PingTimeout bounds one Docker daemon check (default 3s).
	PingTimeout time.Duration
	// DockerWait is how long auto keeps asking a Docker daemon this host
	// has before it gives up (default 30s).
	DockerWait time.Duration
	// Loopback says the deployment is reachable only from this machine;
	// only then may auto fall back to local.
	Loopback bool
	// DockerPresent reports whether this host has Docker (default: the
	// DOCKER_HOST variable or the daemon's socket); tests replace it.
	DockerPresent func() bool
	// Docker holds the supervisor, warm-pool and disk settings.
	Docker DockerFlags
	// Images says what a first start may do to make the sandbox images it
	// lacks (engine serve: install busybox-static, build the Python
	// image); the zero value builds the base image only from a static
	// busybox already there (agent-node). See images.go.
	Images ImageOptions
	// StateDir, when set, is the node's JetStream state: a warning says
	// so when Docker's data root or the disk directory share its file
	// system (a sandbox filling them would fill the event store's disk).
	StateDir string
}

// dockerPresent reports whether this host has Docker: DOCKER_HOST is set,
// or the daemon's default socket exists.
func dockerPresent() bool {
	if os.Getenv("DOCKER_HOST") != "" {
		return true
	}
	_, err := os.Stat("/var/run/docker.sock")
	return err == nil
}

// Check validates the mode without opening anything.
func Check(mode string) error {
	switch mode {
	case "auto", "docker", "gvisor", "runsc", "local":
		return nil
	}
	return fmt.Errorf("--runtime %q is not one of %s", mode, Modes)
}

// Open opens the runtimes opts selects, in preference order, and a func
// that releases them.
func Open(ctx context.Context, opts Options, logger *slog.Logger) ([]runtime.Runtime, func() error, error) {
	if err := Check(opts.Mode); err != nil {
		return nil, nil, err
	}
	if opts.PingTimeout == 0 {
		opts.PingTimeout = 3 * time.Second
	}
	if opts.DockerWait == 0 {
		opts.DockerWait = 30 * time.Second
	}
	if opts.DockerPresent == nil {
		opts.DockerPresent = dockerPresent
	}
	switch opts.Mode {
	case "runsc":
		return openRunsc(ctx, opts, logger)
	case "docker", "gvisor":
		rt, err := openDocker(ctx, opts, logger)
		if err != nil {
			return nil, nil, err
		}
		ensureImages(ctx, opts.Images, logger)
		if err := checkGVisor(ctx, rt, logger); err != nil {
			return nil, nil, errors.Join(err, rt.Close())
		}
		diskReport(ctx, rt, opts, logger)
		if err := startPools(ctx, rt, opts, logger); err != nil {
			return nil, nil, errors.Join(err, rt.Close())
		}
		return []runtime.Runtime{rt}, rt.Close, nil
	case "auto":
		if opts.DockerPresent() {
			rt, err := waitDocker(ctx, opts, logger)
			if err != nil {
				return nil, nil, fmt.Errorf("this host has Docker but its daemon did not answer within %s; not falling back to the local runtime, which is no security boundary (start Docker, or name --runtime local): %w", opts.DockerWait, err)
			}
			ensureImages(ctx, opts.Images, logger)
			diskReport(ctx, rt, opts, logger)
			if err := startPools(ctx, rt, opts, logger); err != nil {
				return nil, nil, errors.Join(err, rt.Close())
			}
			return []runtime.Runtime{rt}, rt.Close, nil
		}
		if !opts.Loopback {
			return nil, nil, errors.New("no Docker on this host, and the deployment is reachable beyond it: --runtime auto will not run untrusted sandboxes on the local runtime, which is no security boundary (install Docker, or name --runtime local)")
		}
		logger.Warn("no Docker on this host; using the local runtime, which is no security boundary")
	}
	logger.Warn("the local runtime bounds no sandbox's disk (disk_limit none)")
	rt, err := local.New(local.Config{Dir: opts.LocalDir})
	if err != nil {
		return nil, nil, err
	}
	return []runtime.Runtime{rt}, rt.Close, nil
}

// openRunsc opens the runsc runtime in LocalDir/runsc, exporting images
// through the Docker engine the environment names, and makes the base
// image when it can (as the docker modes do).
func openRunsc(ctx context.Context, opts Options, logger *slog.Logger) ([]runtime.Runtime, func() error, error) {
	imgs, err := runsc.NewDockerImages()
	if err != nil {
		return nil, nil, fmt.Errorf("runsc: a Docker engine exports the images' root file systems: %w", err)
	}
	rt, err := runsc.New(runsc.Config{Dir: filepath.Join(opts.LocalDir, "runsc"), Node: opts.Node, Images: imgs})
	if err != nil {
		return nil, nil, errors.Join(err, imgs.Close())
	}
	ensureImages(ctx, opts.Images, logger)
	logger.Info("runsc: gVisor sandboxes run by runsc directly; memory checkpoints on")
	return []runtime.Runtime{rt}, imgs.Close, nil
}

// checkGVisor checks, for the gvisor runtime, that Docker runs a probe
// container of the base image under runsc; its error says what to do.
func checkGVisor(ctx context.Context, rt *docker.Runtime, logger *slog.Logger) error {
	if rt.Name() != docker.NameGVisor {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := rt.CheckGVisor(cctx, images.Base); err != nil {
		return err
	}
	logger.Info("gvisor: Docker runs sandboxes under runsc", "kernel", docker.GVisorKernel)
	return nil
}

// diskReport probes how the runtime bounds sandboxes' disks and says it
// on the log: a warning when it cannot, and when the disk directory
// shares the state directory's file system.
func diskReport(ctx context.Context, rt *docker.Runtime, opts Options, logger *slog.Logger) {
	ds, err := rt.ProbeDisk(ctx, images.Base)
	switch {
	case err != nil:
		logger.Warn("cannot probe the sandboxes' disk limit yet; the first create will", "err", err)
	case ds.Mechanism == runtime.DiskNone:
		logger.Warn("sandboxes get no disk limit: one can fill this host's disk", "why", ds.Why)
	default:
		logger.Info("sandbox disk limit", "mechanism", ds.Mechanism, "default_bytes", opts.Docker.DefaultDiskBytes, "why_not_better", ds.Why)
	}
	if opts.StateDir == "" {
		return
	}
	// Docker's data root is the engine's own warning (warnSharedFilesystem).
	if dir, err := opts.Docker.diskDir(opts.Node); err == nil && ds.Mechanism == runtime.DiskLoopFS && sameFileSystem(dir, opts.StateDir) {
		logger.Warn("the state directory shares a file system with the sandboxes' disks: a full disk stops the event store; put them on separate file systems",
			"state_dir", opts.StateDir, "disk_dir", dir)
	}
}

// sameFileSystem reports whether a and b (or their nearest existing
// parents) are on one file system.
func sameFileSystem(a, b string) bool {
	da, oka := deviceOf(a)
	db, okb := deviceOf(b)
	return oka && okb && da == db
}

func deviceOf(p string) (uint64, bool) {
	for {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err == nil {
			return uint64(st.Dev), true
		}
		parent := filepath.Dir(p)
		if parent == p {
			return 0, false
		}
		p = parent
	}
}

// waitDocker asks the daemon until it answers or DockerWait has passed.
func waitDocker(ctx context.Context, opts Options, logger *slog.Logger) (*docker.Runtime, error) {
	bin, dir, err := opts.Docker.supervisorConfig(ctx, opts.Node, logger)
	if err != nil {
		return nil, err
	}
	opts.Docker.bin, opts.Docker.dir, opts.Docker.resolved = bin, dir, true
	deadline := time.Now().Add(opts.DockerWait)
	for attempt := 1; ; attempt++ {
		rt, err := openDocker(ctx, opts, logger)
		if err == nil {
			return rt, nil
		}
		if time.Now().Add(time.Second).After(deadline) || ctx.Err() != nil {
			return nil, err
		}
		logger.Warn("the Docker daemon does not answer yet; waiting for it", "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// IsLoopback reports whether host (a host name or an IP, maybe with a
// port) is this machine's loopback: localhost or 127.0.0.0/8 or ::1.
func IsLoopback(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// URLIsLoopback reports whether every server of a NATS URL list (comma
// separated) is on loopback.
func URLIsLoopback(urls string) bool {
	for _, u := range strings.Split(urls, ",") {
		p, err := url.Parse(strings.TrimSpace(u))
		if err != nil || !IsLoopback(p.Hostname()) {
			return false
		}
	}
	return true
}

func openDocker(ctx context.Context, opts Options, logger *slog.Logger) (*docker.Runtime, error) {
	if !opts.Docker.resolved {
		bin, dir, err := opts.Docker.supervisorConfig(ctx, opts.Node, logger)
		if err != nil {
			return nil, err
		}
		opts.Docker.bin, opts.Docker.dir, opts.Docker.resolved = bin, dir, true
	}
	diskDir, err := opts.Docker.diskDir(opts.Node)
	if err != nil {
		return nil, err
	}
	gvisor := ""
	if opts.Mode == "gvisor" {
		gvisor = opts.Docker.GVisorRuntime
		if gvisor == "" {
			gvisor = docker.GVisorOCIRuntime
		}
	}
	rt, err := docker.New(docker.Config{Node: opts.Node, Supervisor: opts.Docker.bin, SupervisorDir: opts.Docker.dir,
		DefaultDiskBytes: opts.Docker.DefaultDiskBytes, DiskDir: diskDir, GVisor: gvisor})
	if err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, opts.PingTimeout)
	defer cancel()
	if err := rt.Ping(pctx); err != nil {
		return nil, errors.Join(fmt.Errorf("docker daemon does not answer: %w", err), rt.Close())
	}
	return rt, nil
}

// startPools starts the warm pools the flags name; they need the
// supervisor.
func startPools(ctx context.Context, rt *docker.Runtime, opts Options, logger *slog.Logger) error {
	if len(opts.Docker.Pools) == 0 {
		return nil
	}
	err := rt.StartPools(ctx, docker.PoolConfig{Pools: opts.Docker.Pools, MaxIdle: opts.Docker.PoolMaxIdle, Logger: logger})
	if err != nil {
		return fmt.Errorf("--pool: %w", err)
	}
	for _, p := range opts.Docker.Pools {
		logger.Info("warm pool", "image", p.Image, "size", p.Size)
	}
	return nil
}
