package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"

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
	// (default 60s).
	PullTimeout time.Duration
	// StopTimeout is how long Stop waits before it kills (default 2s).
	StopTimeout time.Duration
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
		c.PullTimeout = 60 * time.Second
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = 2 * time.Second
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
}

// New returns a Docker runtime. It does not contact the engine; Ping does.
func New(cfg Config) (*Runtime, error) {
	if cfg.DefaultPidsLimit < 0 || cfg.DefaultMemoryBytes < 0 || cfg.DefaultCPUs < 0 || cfg.PullTimeout < 0 || cfg.StopTimeout < 0 {
		return nil, errors.New("docker: negative limit or timeout in config")
	}
	r := &Runtime{cli: cfg.Client, cfg: cfg.withDefaults(), rootReady: map[string]bool{}}
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

// Name returns "docker".
func (r *Runtime) Name() string { return "docker" }

// Ping checks that the engine answers.
func (r *Runtime) Ping(ctx context.Context) error {
	if _, err := r.cli.Ping(ctx); err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "docker engine does not answer")
	}
	return nil
}

// Close releases the client if the runtime made it.
func (r *Runtime) Close() error {
	if r.ownsClient {
		return r.cli.Close()
	}
	return nil
}

var nameSafe = regexp.MustCompile(`[^a-zA-Z0-9_.-]`)

// ContainerName is the name of a session's container at an epoch (epochs
// after the first add -e<epoch>, so a resumed session's new container never
// clashes with its old one). Names Docker does not accept are mapped onto
// [a-zA-Z0-9_.-] with a hash suffix that keeps them unique.
func ContainerName(tenant, session string, epoch uint64) string {
	raw := tenant + "-" + session
	if epoch > 1 {
		raw += "-e" + strconv.FormatUint(epoch, 10)
	}
	name := nameSafe.ReplaceAllString(raw, "_")
	if name != raw {
		sum := sha256.Sum256([]byte(tenant + "\x00" + session))
		name += "-" + hex.EncodeToString(sum[:4])
	}
	return "paddock-" + name
}

// Create makes and starts a container for spec. On error nothing it made
// is left behind.
func (r *Runtime) Create(ctx context.Context, spec runtime.Spec) (runtime.Sandbox, error) {
	opts, err := r.options(spec)
	if err != nil {
		return nil, err
	}
	imageID, err := r.ensureImage(ctx, spec.Image)
	if err != nil {
		return nil, err
	}
	name := ContainerName(spec.Tenant, spec.SessionID, spec.Epoch)
	resp, err := r.cli.ContainerCreate(ctx, opts.config, opts.host, nil, nil, name)
	if err != nil {
		if errdefs.IsConflict(err) {
			return nil, errcode.New(errcode.AlreadyExists, "a container named %s already exists", name)
		}
		r.removeFailed(name, spec)
		return nil, r.wrap(err, "create container")
	}
	sb := &Sandbox{r: r, id: resp.ID, name: name, root: opts.root, user: opts.config.User}
	if _, err := sb.owner(ctx); err != nil {
		r.removeFailed(name, spec)
		return nil, err
	}
	if err := r.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		r.removeFailed(name, spec)
		return nil, r.wrap(err, "start container")
	}
	if err := r.prepare(ctx, sb, imageID); err != nil {
		r.removeFailed(name, spec)
		return nil, err
	}
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
	case spec.PidsLimit < 0 || spec.MemoryBytes < 0 || spec.CPUs < 0:
		return bad("docker: negative pids, memory or cpu limit")
	case spec.MemoryBytes > 0 && spec.MemoryBytes < 6<<20:
		return bad("docker: memory %d is below Docker's 6 MiB minimum", spec.MemoryBytes)
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
	return created{
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
	}, nil
}

// ensureImage makes sure the image is on the engine, pulling it within
// PullTimeout if a registry is reachable, and returns its id.
func (r *Runtime) ensureImage(ctx context.Context, ref string) (string, error) {
	img, err := r.cli.ImageInspect(ctx, ref)
	if err == nil {
		return img.ID, nil
	}
	if !errdefs.IsNotFound(err) {
		return "", r.wrap(err, "inspect image "+ref)
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PullTimeout)
	defer cancel()
	if perr := r.pull(pctx, ref); perr != nil {
		return "", errcode.New(errcode.ImageNotFound, "image %s is not on the node and cannot be pulled: %v", ref, perr)
	}
	img, err = r.cli.ImageInspect(ctx, ref)
	if err != nil {
		return "", r.wrap(err, "inspect pulled image "+ref)
	}
	return img.ID, nil
}

func (r *Runtime) pull(ctx context.Context, ref string) error {
	rc, err := r.cli.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		return err
	}
	defer rc.Close()
	// The pull reports failures inside its JSON progress stream.
	dec := json.NewDecoder(rc)
	for {
		var msg struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if msg.Error != "" {
			return errors.New(msg.Error)
		}
	}
}

// removeFailed removes the container a failed create may have left, but
// only if it is this spec's (a name clash must not remove another).
func (r *Runtime) removeFailed(name string, spec runtime.Spec) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := r.cli.ContainerInspect(ctx, name)
	if err != nil || c.Config == nil {
		return
	}
	l := c.Config.Labels
	if l[LabelSession] != spec.SessionID || l[LabelTenant] != spec.Tenant || l[LabelEpoch] != strconv.FormatUint(spec.Epoch, 10) {
		return
	}
	_ = r.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
}

// FindSandboxes returns the containers labelled with the runtime's node,
// running or not, so that a restarted node agent can serve them again or
// reap them. Containers with malformed labels are skipped.
func (r *Runtime) FindSandboxes(ctx context.Context) ([]runtime.Found, error) {
	list, err := r.cli.ContainerList(ctx, container.ListOptions{
		All: true, Filters: filters.NewArgs(filters.Arg("label", LabelNode+"="+r.cfg.Node)),
	})
	if err != nil {
		return nil, r.wrap(err, "list containers")
	}
	var out []runtime.Found
	for _, c := range list {
		epoch, err := strconv.ParseUint(c.Labels[LabelEpoch], 10, 64)
		tenant, session := c.Labels[LabelTenant], c.Labels[LabelSession]
		if err != nil || tenant == "" || session == "" {
			continue
		}
		ins, err := r.cli.ContainerInspect(ctx, c.ID)
		if errdefs.IsNotFound(err) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, r.wrap(err, "inspect container")
		}
		root := c.Labels[LabelWorkspaceRoot]
		if root == "" {
			root = runtime.DefaultWorkspaceRoot
		}
		env := map[string]string{}
		user := ""
		if ins.Config != nil {
			user = ins.Config.User
			for _, kv := range ins.Config.Env {
				if k, v, ok := strings.Cut(kv, "="); ok {
					env[k] = v
				}
			}
		}
		name := strings.TrimPrefix(ins.Name, "/")
		out = append(out, runtime.Found{
			Tenant: tenant, SessionID: session, Epoch: epoch,
			Created: time.Unix(c.Created, 0), Running: ins.State != nil && ins.State.Running,
			Env:     env,
			Sandbox: &Sandbox{r: r, id: c.ID, name: name, root: root, user: user},
		})
	}
	return out, nil
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
