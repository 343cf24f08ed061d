package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// The labels every Paddock container carries.
const (
	LabelSession       = "paddock.session"
	LabelTenant        = "paddock.tenant"
	LabelNode          = "paddock.node"
	LabelEpoch         = "paddock.epoch"
	LabelWorkspaceRoot = "paddock.workspace_root"
	// LabelUserPrefix prefixes the create spec's own labels.
	LabelUserPrefix = "paddock.label."
)

// Defaults of Config.
const (
	DefaultPidsLimit   = 512
	DefaultMemoryBytes = 512 << 20
	DefaultCPUs        = 1.0
	DefaultUser        = "65534:65534"
	DefaultLogMaxSize  = "1m"
)

// keepAlive is the container's main process: it idles until stopped and
// exits at once on SIGTERM (Docker's init forwards it).
var keepAlive = []string{"/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"}

// Config configures the Docker runtime. Zero values take the defaults.
type Config struct {
	// Client talks to the engine; nil means one from the environment
	// (DOCKER_HOST, ...) with API version negotiation, closed by Close.
	Client *client.Client
	// Node labels the containers made for a spec that names no node, and
	// selects the containers FindSandboxes reports.
	Node string
	// DefaultPidsLimit, DefaultMemoryBytes, DefaultCPUs and DefaultUser
	// apply when a spec gives none.
	DefaultPidsLimit   int64
	DefaultMemoryBytes int64
	DefaultCPUs        float64
	DefaultUser        string
	// LogMaxSize bounds the container's json-file log (default 1m).
	LogMaxSize string
	// PullTimeout bounds pulling an image that is not on the engine
	// (default 30s): without a reachable registry a create fails with
	// image_not_found within it.
	PullTimeout time.Duration
	// StopTimeout is how long Stop waits before it kills (default 2s).
	StopTimeout time.Duration
	// Supervisor is the host path of the paddock-supervisor binary (a
	// static build of cmd/paddock-supervisor). With it every sandbox runs
	// the supervisor and exec, processes and file operations go through
	// it (see package supervisor); empty runs them all through the Docker
	// API.
	Supervisor string
	// SupervisorDir holds a socket directory per sandbox; required with
	// Supervisor, and kept across restarts of the node so that the
	// sandboxes it reattaches find it again.
	SupervisorDir string
	// SupervisorWait bounds how long a create waits for its supervisor to
	// say hello before it goes on without (default 5s).
	SupervisorWait time.Duration
	// DefaultDiskBytes bounds what a sandbox whose spec names no disk may
	// write (default DefaultDiskBytes, 2 GiB); see disk.go.
	DefaultDiskBytes int64
	// DiskDir holds the loopfs disk images, one directory per container
	// (an absolute path; empty: no loopfs). Keep it on another file system
	// than the node's state, and across restarts of the node.
	DiskDir string
	// DiskMechanism forces a disk-limit mechanism (runtime.DiskStorageOpt,
	// runtime.DiskLoopFS, runtime.DiskNone); empty probes for the best.
	DiskMechanism string
	// GVisor, when set, is the name Docker knows gVisor's runsc under
	// (GVisorOCIRuntime, "runsc"): the runtime is then the gvisor runtime
	// (see gvisor.go), its containers run under it.
	GVisor string
}

// Validate returns an error for a negative limit or timeout.
func (c Config) Validate() error {
	if c.DefaultPidsLimit < 0 || c.DefaultMemoryBytes < 0 || c.DefaultCPUs < 0 || c.PullTimeout < 0 || c.StopTimeout < 0 || c.SupervisorWait < 0 || c.DefaultDiskBytes < 0 {
		return errors.New("docker: negative limit or timeout in config")
	}
	if c.Supervisor != "" && (!filepath.IsAbs(c.Supervisor) || !filepath.IsAbs(c.SupervisorDir)) {
		return errors.New("docker: the supervisor binary and its socket directory must be absolute paths")
	}
	if c.GVisor != "" && c.Supervisor == "" {
		return errGVisorSupervisor
	}
	if c.DiskDir != "" && !filepath.IsAbs(c.DiskDir) {
		return errors.New("docker: the disk directory must be an absolute path")
	}
	if c.DefaultDiskBytes != 0 && c.DefaultDiskBytes < commands.MinDisk {
		return fmt.Errorf("docker: the default disk %d is below the %d-byte minimum", c.DefaultDiskBytes, commands.MinDisk)
	}
	switch c.DiskMechanism {
	case "", runtime.DiskStorageOpt, runtime.DiskLoopFS, runtime.DiskNone:
	default:
		return fmt.Errorf("docker: disk mechanism %q is not one of %s, %s, %s", c.DiskMechanism, runtime.DiskStorageOpt, runtime.DiskLoopFS, runtime.DiskNone)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.DefaultPidsLimit == 0 {
		c.DefaultPidsLimit = DefaultPidsLimit
	}
	if c.DefaultMemoryBytes == 0 {
		c.DefaultMemoryBytes = DefaultMemoryBytes
	}
	if c.DefaultCPUs == 0 {
		c.DefaultCPUs = DefaultCPUs
	}
	if c.DefaultUser == "" {
		c.DefaultUser = DefaultUser
	}
	if c.LogMaxSize == "" {
		c.LogMaxSize = DefaultLogMaxSize
	}
	if c.PullTimeout == 0 {
		c.PullTimeout = 30 * time.Second
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = 2 * time.Second
	}
	if c.SupervisorWait == 0 {
		c.SupervisorWait = 5 * time.Second
	}
	if c.DefaultDiskBytes == 0 {
		c.DefaultDiskBytes = DefaultDiskBytes
	}
	return c
}

// Runtime creates sandboxes as containers on one Docker engine.
type Runtime struct {
	cli        *client.Client
	ownsClient bool
	cfg        Config

	mu sync.Mutex // guards rootReady
	// rootReady remembers, per image id, workspace root and owner, whether
	// the image already holds the root as a directory of that owner, so
	// that only the first create of a kind pays for checking it.
	rootReady map[string]bool

	lmu sync.Mutex // guards links
	// links holds the supervisor links of the containers this runtime
	// serves, by container id (FindSandboxes runs again and again).
	links map[string]*link
	// pools are the warm pools, once StartPools ran (guarded by mu).
	pools *pools

	dmu sync.Mutex // guards the fields below
	// diskSupport is ProbeDisk's answer, once it has one.
	diskSupport *DiskSupport
	// disksMaking counts the creates making each loopfs directory, by
	// container name (the reaper leaves those alone).
	disksMaking map[string]int
}

// New returns a Docker runtime, or an error for an invalid config or a
// client that cannot be made from the environment. It does not contact the
// engine; Ping does.
func New(cfg Config) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Supervisor != "" {
		// Only the node may reach the sockets: a host user who could dial
		// one could pose as a sandbox's supervisor and read its calls
		// (argv, variables). Each sandbox sees only its own directory,
		// through its mount.
		if err := os.MkdirAll(cfg.SupervisorDir, 0o700); err != nil {
			return nil, fmt.Errorf("docker: supervisor directory: %w", err)
		}
		if err := os.Chmod(cfg.SupervisorDir, 0o700); err != nil {
			return nil, fmt.Errorf("docker: supervisor directory: %w", err)
		}
	}
	r := &Runtime{cli: cfg.Client, cfg: cfg.withDefaults(), rootReady: map[string]bool{}, links: map[string]*link{}, disksMaking: map[string]int{}}
	if r.cli == nil {
		cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return nil, fmt.Errorf("docker: client: %w", err)
		}
		r.cli, r.ownsClient = cli, true
	}
	return r, nil
}

// Node returns the node id the runtime labels its containers with.
func (r *Runtime) Node() string { return r.cfg.Node }

// Name returns "docker", or "gvisor" (NameGVisor) with Config.GVisor.
func (r *Runtime) Name() string {
	if r.isGVisor() {
		return NameGVisor
	}
	return "docker"
}

// Ping checks that the engine answers, for the node's choice of runtime;
// an engine that does not is runtime_error (retryable), wrapping the
// client's error.
func (r *Runtime) Ping(ctx context.Context) error {
	if _, err := r.cli.Ping(ctx); err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "docker engine does not answer")
	}
	return nil
}

// Close releases the client if the runtime made it (and returns its
// error); a client from Config is the caller's to close.
func (r *Runtime) Close() error {
	r.closePools()
	r.closeLinks()
	if r.cfg.DiskDir != "" {
		// Gone only when empty: the disks of sandboxes that outlive the
		// node (a restart reattaches them) stay.
		_ = os.Remove(r.cfg.DiskDir)
	}
	if r.ownsClient {
		return r.cli.Close()
	}
	return nil
}

var (
	plainTenant  = regexp.MustCompile(`^[a-zA-Z0-9_]+$`)
	plainSession = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)
	nameUnsafe   = regexp.MustCompile(`[^a-zA-Z0-9_-]`)
)

// ContainerName is the name of a session's container at an epoch:
// paddock-<tenant>-<session>, with .e<epoch> appended after the first
// epoch (a resumed session's new container never clashes with its old
// one). Names are unique per (tenant, session, epoch): when the plain form
// could be ambiguous (a '-' in the tenant) or Docker would refuse it (a
// character outside [a-zA-Z0-9_-]), the sanitised form gets .h<hash of
// tenant and session> instead. Identifiers never hold '.', so the plain,
// hashed and epoch forms cannot meet.
func ContainerName(tenant, session string, epoch uint64) string {
	name := "paddock-" + tenant + "-" + session
	if !plainTenant.MatchString(tenant) || !plainSession.MatchString(session) {
		sum := sha256.Sum256([]byte(tenant + "\x00" + session))
		name = "paddock-" + nameUnsafe.ReplaceAllString(tenant+"-"+session, "_") + ".h" + hex.EncodeToString(sum[:8])
	}
	if epoch > 1 {
		name += ".e" + strconv.FormatUint(epoch, 10)
	}
	return name
}

// Create makes and starts a container for spec, hardened as the package
// doc says, and returns its sandbox. On error nothing it made is left
// behind. Errors: invalid_request for a bad spec (checked before the engine
// is asked), image_not_found for an image that is not on the engine and
// cannot be pulled within PullTimeout, already_exists when the session's
// container exists, unavailable when ctx ends, runtime_error when the
// engine fails.
func (r *Runtime) Create(ctx context.Context, spec runtime.Spec) (runtime.Sandbox, error) {
	if _, err := r.options(spec); err != nil {
		return nil, err
	}
	if sb, err := r.claim(ctx, spec); sb != nil || err != nil {
		if err != nil {
			return nil, err
		}
		return sb, nil
	}
	sb, err := r.create(ctx, spec, ContainerName(spec.Tenant, spec.SessionID, spec.Epoch), nil, nil)
	if err != nil {
		return nil, err
	}
	return sb, nil
}

// create makes and starts a container named name for spec; adjust, when
// set, changes its configuration first, and onCreated, when set, learns
// its id as soon as it exists.
func (r *Runtime) create(ctx context.Context, spec runtime.Spec, name string, adjust func(*container.Config), onCreated func(id string)) (*Sandbox, error) {
	opts, err := r.options(spec)
	if err != nil {
		return nil, err
	}
	imageID, err := r.ensureImage(ctx, spec.Image)
	if err != nil {
		return nil, err
	}
	if adjust != nil {
		adjust(opts.config)
	}
	d, err := r.diskFor(ctx, spec)
	if err != nil {
		return nil, err
	}
	defer r.diskBusy(name)()
	if err := r.applyDisk(ctx, &d, name, &opts); err != nil {
		return nil, err
	}
	sb := &Sandbox{r: r, name: name, root: opts.root, user: opts.config.User, disk: d}
	r.withSupervisor(sb, &opts)
	fail := func(err error) (*Sandbox, error) {
		if sb.id != "" {
			// Ours by id; not derived from ctx, which may be what ended.
			rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = r.cli.ContainerRemove(rctx, sb.id, container.RemoveOptions{Force: true, RemoveVolumes: true})
			cancel()
		} else {
			r.removeFailed(name, opts.config.Labels)
		}
		sb.dropLink()
		if rerr := releaseDisk(d); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return nil, err
	}
	resp, err := r.cli.ContainerCreate(ctx, opts.config, opts.host, nil, nil, name)
	if err != nil {
		if errdefs.IsConflict(err) {
			// The disk directory is the existing container's: keep it.
			sb.dropLink()
			return nil, errcode.New(errcode.AlreadyExists, "a container named %s already exists", name)
		}
		return fail(r.wrap(err, "create container"))
	}
	sb.id = resp.ID
	if onCreated != nil {
		onCreated(resp.ID)
	}
	o, err := sb.owner(ctx)
	if err != nil {
		return fail(err)
	}
	if err := chownLoopFS(d, o); err != nil {
		return fail(err)
	}
	if err := r.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return fail(r.wrap(err, "start container"))
	}
	if err := r.prepare(ctx, sb, imageID); err != nil {
		return fail(err)
	}
	r.awaitSupervisor(ctx, sb)
	return sb, nil
}

// created is what options derives from a spec.
type created struct {
	config *container.Config
	host   *container.HostConfig
	root   string
}

// options validates spec and returns the container's configuration with
// the hardened defaults applied.
func (r *Runtime) options(spec runtime.Spec) (created, error) {
	bad := func(format string, args ...any) (created, error) {
		return created{}, errcode.New(errcode.InvalidRequest, format, args...)
	}
	switch {
	case spec.Tenant == "" || spec.SessionID == "":
		return bad("docker: tenant and session id are required")
	case spec.Image == "":
		return bad("docker: an image is required")
	case spec.PidsLimit < 0 || spec.MemoryBytes < 0 || spec.CPUs < 0 || spec.DiskBytes < 0:
		return bad("docker: negative pids, memory, cpu or disk limit")
	case spec.DiskBytes > 0 && (spec.DiskBytes < commands.MinDisk || spec.DiskBytes > commands.MaxDisk):
		return bad("docker: disk %d is outside %d..%d bytes", spec.DiskBytes, int64(commands.MinDisk), int64(commands.MaxDisk))
	case spec.MemoryBytes > 0 && spec.MemoryBytes < 6<<20:
		return bad("docker: memory %d is below Docker's 6 MiB minimum", spec.MemoryBytes)
	}
	if err := checkEnv(spec.Env); err != nil {
		return created{}, err
	}
	root := spec.WorkspaceRoot
	if root == "" {
		root = runtime.DefaultWorkspaceRoot
	}
	if !path.IsAbs(root) || path.Clean(root) != root || root == "/" {
		return bad("docker: workspace root %q must be a clean absolute path other than /", root)
	}
	node := spec.Node
	if node == "" {
		node = r.cfg.Node
	}
	labels := map[string]string{
		LabelSession: spec.SessionID, LabelTenant: spec.Tenant, LabelNode: node,
		LabelEpoch: strconv.FormatUint(spec.Epoch, 10), LabelWorkspaceRoot: root,
	}
	for k, v := range spec.Labels {
		labels[LabelUserPrefix+k] = v
	}
	env := make([]string, 0, len(spec.Env))
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		env = append(env, k+"="+spec.Env[k])
	}
	pids, mem, cpus, user := spec.PidsLimit, spec.MemoryBytes, spec.CPUs, spec.User
	if pids == 0 {
		pids = r.cfg.DefaultPidsLimit
	}
	if mem == 0 {
		mem = r.cfg.DefaultMemoryBytes
	}
	if cpus == 0 {
		cpus = r.cfg.DefaultCPUs
	}
	if user == "" {
		user = r.cfg.DefaultUser
	}
	network := container.NetworkMode("none")
	if spec.Network {
		network = "bridge"
	}
	init := true
	c := created{
		root: root,
		config: &container.Config{
			Image: spec.Image, Env: env, Labels: labels, WorkingDir: root, User: user, Cmd: keepAlive,
		},
		host: &container.HostConfig{
			CapDrop:     []string{"ALL"},
			SecurityOpt: []string{"no-new-privileges:true"},
			NetworkMode: network,
			Init:        &init,
			LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{
				"max-size": r.cfg.LogMaxSize, "max-file": "1",
			}},
			Resources: container.Resources{
				Memory: mem, MemorySwap: mem, NanoCPUs: int64(cpus * 1e9), PidsLimit: &pids,
			},
		},
	}
	if err := r.gvisorOptions(spec, &c); err != nil {
		return created{}, err
	}
	return c, nil
}

// removeFailed removes the container a failed create may have left, but
// only if it carries the labels it was made with (a name clash must not
// remove another).
func (r *Runtime) removeFailed(name string, labels map[string]string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := r.cli.ContainerInspect(ctx, name)
	if err != nil || c.Config == nil {
		return
	}
	l := c.Config.Labels
	if l[LabelSession] != labels[LabelSession] || l[LabelTenant] != labels[LabelTenant] || l[LabelEpoch] != labels[LabelEpoch] ||
		l[LabelPool] != labels[LabelPool] || l[LabelSupervisor] != labels[LabelSupervisor] {
		return
	}
	_ = r.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
}

// wrap maps an engine error onto an error code.
func (r *Runtime) wrap(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return errcode.Wrap(errcode.Unavailable, err, "docker: "+what)
	case errdefs.IsNotFound(err):
		return errcode.Wrap(errcode.NotFound, err, "docker: "+what)
	case errdefs.IsInvalidParameter(err):
		return errcode.Wrap(errcode.InvalidRequest, err, "docker: "+what)
	case errdefs.IsConflict(err):
		return errcode.Wrap(errcode.InvalidState, err, "docker: "+what)
	}
	return errcode.Wrap(errcode.RuntimeError, err, "docker: "+what)
}
