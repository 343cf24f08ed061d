package runsc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
)

// Name is the runtime's name (Runtime.Name).
const Name = "runsc"

// Defaults of a sandbox's limits, as the docker runtime's.
const (
	DefaultMemory = 512 << 20
	DefaultPids   = 512
	DefaultUser   = "65534:65534"
	// TmpBytes is the size of a sandbox's /tmp (a tmpfs in its memory).
	TmpBytes = 64 << 20
)

// Config configures the runtime.
type Config struct {
	// Dir holds the runtime's state: rootfs/ (root file systems per image),
	// sandboxes/ (bundles, runsc roots and workspaces). Required.
	Dir string
	// Runsc is the runsc binary (default "runsc" on PATH).
	Runsc string
	// Node is the node's id, for the sandboxes' labels.
	Node string
	// DefaultTimeout bounds an exec that names no timeout (0: local's).
	DefaultTimeout time.Duration
	// Images exports an image's root file system; required to create a
	// sandbox of an image not yet cached (see NewDockerImages).
	Images Images
}

// Validate returns an error naming the first invalid setting.
func (c Config) Validate() error {
	if c.Dir == "" {
		return errors.New("runsc runtime: dir is required")
	}
	if c.DefaultTimeout < 0 {
		return errors.New("runsc runtime: default timeout is negative")
	}
	return nil
}

// Runtime creates sandboxes run by runsc. It is safe for concurrent use.
type Runtime struct {
	cfg    Config
	ws     *local.Runtime // the workspaces' host directories
	rootMu sync.Mutex     // serialises rootfs exports
	findMu sync.Mutex     // serialises FindSandboxes

	mu   sync.Mutex          // guards held
	held map[string]*Sandbox // this runtime's sandboxes (made, restored or found) by directory
}

var (
	_ runtime.Runtime  = (*Runtime)(nil)
	_ runtime.Restorer = (*Runtime)(nil)

	_ runtime.CheckpointInspector = (*Runtime)(nil)
)

// New returns the runtime, making cfg.Dir. It fails when cfg is invalid,
// the directory cannot be made or runsc cannot be found.
func New(cfg Config) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Runsc == "" {
		cfg.Runsc = "runsc"
	}
	bin, err := exec.LookPath(cfg.Runsc)
	if err != nil {
		return nil, fmt.Errorf("runsc runtime: %w (install Debian's runsc package)", err)
	}
	cfg.Runsc = bin
	for _, d := range []string{"rootfs", "sandboxes", "workspaces"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("runsc runtime: %w", err)
		}
	}
	ws, err := local.New(local.Config{Dir: filepath.Join(cfg.Dir, "workspaces"), DefaultTimeout: cfg.DefaultTimeout})
	if err != nil {
		return nil, fmt.Errorf("runsc runtime: %w", err)
	}
	return &Runtime{cfg: cfg, ws: ws, held: map[string]*Sandbox{}}, nil
}

// Name returns "runsc".
func (r *Runtime) Name() string { return Name }

// Create makes the sandbox's workspace, bundle and runsc root and starts
// it. A network is policy_denied (gVisor runs with none here); an image
// that cannot be exported is image_not_found or runtime_error. On error
// nothing is left behind.
func (r *Runtime) Create(ctx context.Context, spec runtime.Spec) (runtime.Sandbox, error) {
	sb, err := r.prepare(ctx, spec, "")
	if err != nil {
		return nil, err
	}
	if err := sb.startContainer(ctx); err != nil {
		_ = sb.Shutdown(context.WithoutCancel(ctx))
		return nil, err
	}
	return sb, nil
}

// prepare makes a sandbox's workspace, rootfs and bundle, not started.
// image, when set, overrides spec.Image (a restore's).
func (r *Runtime) prepare(ctx context.Context, spec runtime.Spec, containerID string) (*Sandbox, error) {
	if spec.Network {
		return nil, errcode.New(errcode.PolicyDenied, "the runsc runtime gives sandboxes no network (runsc --network=none)")
	}
	if spec.Image == "" {
		return nil, errcode.New(errcode.InvalidRequest, "an image is required")
	}
	uid, gid, err := parseUser(spec.User)
	if err != nil {
		return nil, err
	}
	vroot := spec.WorkspaceRoot
	if vroot == "" {
		vroot = runtime.DefaultWorkspaceRoot
	}
	if !filepath.IsAbs(vroot) || filepath.Clean(vroot) != vroot || vroot == "/" {
		return nil, errcode.New(errcode.InvalidRequest, "workspace root %q is not a clean absolute path", vroot)
	}
	rootfs, err := r.rootfs(ctx, spec.Image)
	if err != nil {
		return nil, err
	}
	wspec := spec
	wspec.User = ""
	wsb, err := r.ws.Create(ctx, wspec)
	if err != nil {
		return nil, err
	}
	lsb := wsb.(*local.Sandbox)
	if err := os.Chown(lsb.Dir(), uid, gid); err != nil {
		_ = lsb.Shutdown(context.WithoutCancel(ctx))
		return nil, errcode.Wrap(errcode.RuntimeError, err, "give the workspace to the sandbox's user")
	}
	if containerID == "" {
		containerID = newContainerID(spec)
	}
	sb := &Sandbox{
		rt: r, ws: lsb, id: containerID, image: spec.Image,
		uid: uid, gid: gid, vroot: vroot, env: spec.Env,
		running: false,
	}
	// The directory is made and held in one step, so that FindSandboxes
	// never takes one in the making for a leftover.
	r.mu.Lock()
	sb.dir, err = os.MkdirTemp(filepath.Join(r.cfg.Dir, "sandboxes"), "sb-")
	if err == nil {
		r.held[sb.dir] = sb
	}
	r.mu.Unlock()
	if err != nil {
		_ = lsb.Shutdown(context.WithoutCancel(ctx))
		return nil, errcode.Wrap(errcode.RuntimeError, err, "make the sandbox's directory")
	}
	if err := writeBundle(sb, rootfs, spec); err != nil {
		_ = sb.Shutdown(context.WithoutCancel(ctx))
		return nil, err
	}
	if err := writeRecord(sb, spec); err != nil {
		_ = sb.Shutdown(context.WithoutCancel(ctx))
		return nil, err
	}
	return sb, nil
}

// newContainerID names a sandbox's container; it is unique to the
// sandbox (a fork's copies have ids of their own, and each sandbox has a
// runsc root of its own anyway).
func newContainerID(spec runtime.Spec) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%d\x00%d", spec.Tenant, spec.SessionID, spec.Epoch, time.Now().UnixNano()))
	return "paddock-" + hex.EncodeToString(h[:8])
}

// parseUser reads "uid[:gid]" (numeric), default DefaultUser. A name or a
// negative number is invalid_request: the sandbox has no user database the
// node could trust.
func parseUser(u string) (int, int, error) {
	if u == "" {
		u = DefaultUser
	}
	us, gs, ok := strings.Cut(u, ":")
	if !ok {
		gs = us
	}
	uid, err1 := strconv.Atoi(us)
	gid, err2 := strconv.Atoi(gs)
	if err1 != nil || err2 != nil || uid < 0 || gid < 0 {
		return 0, 0, errcode.New(errcode.InvalidRequest, "the runsc runtime needs a numeric user uid[:gid], not %q", u)
	}
	return uid, gid, nil
}

// runsc runs runsc with the sandbox's root and the global flags, and
// returns its combined output on failure inside the error.
func (r *Runtime) runsc(ctx context.Context, root string, args ...string) ([]byte, error) {
	// The output goes to a file, not a pipe: create and restore leave the
	// sandbox's processes behind holding it, and a pipe would keep Wait
	// waiting for them.
	f, err := os.CreateTemp("", "paddock-runsc-*.out")
	if err != nil {
		return nil, fmt.Errorf("runsc %s: %w", args[0], err)
	}
	defer f.Close()
	_ = os.Remove(f.Name())
	cmd := r.command(ctx, root, args...)
	cmd.Stdout, cmd.Stderr = f, f
	err = cmd.Run()
	out, rerr := os.ReadFile("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if rerr != nil {
		out = nil
	}
	if err != nil {
		return out, fmt.Errorf("runsc %s: %w: %s", args[0], err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// command is a runsc command line under the sandbox's runsc root.
func (r *Runtime) command(ctx context.Context, root string, args ...string) *exec.Cmd {
	full := append([]string{"--root", root, "--network=none"}, args...)
	cmd := exec.CommandContext(ctx, r.cfg.Runsc, full...)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// WorkspaceDirOf returns the host directory a session's workspace has on
// this runtime, whether or not it exists.
func (r *Runtime) WorkspaceDirOf(tenant, session string) string {
	return r.ws.WorkspaceDir(tenant, session)
}
