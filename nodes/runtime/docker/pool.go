package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/errdefs"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// Warm pools: a node keeps, per image, a number of containers made,
// hardened and started exactly as a create makes them, with their
// supervisor connected, and not yet anyone's. A create that asks for what a
// pool holds (its image, the default limits, user and workspace root, no
// network) claims one instead of making one: the session's identity and
// variables are written to a claim file of the node's and given to the
// supervisor, and the pool makes a replacement in the background. A pool
// container is never handed out twice and never reused after its session:
// it is removed with the session like any other.
//
//	making ─► ready ──claim──► a session's sandbox (claim file) ──Shutdown──► removed
//	            │
//	            └──older than MaxIdle──► removed, and made anew

// LabelPool marks a pool's container (its value is the pool's image); a
// pool container carries no session labels until, and unless, it is
// claimed, and then only in its claim file.
const LabelPool = "paddock.pool"

// PoolSpec is one warm pool: Size ready containers of Image with one
// limits profile (zero: the runtime's default). A create claims from the
// pool whose image and effective limits are its own.
type PoolSpec struct {
	Image       string
	Size        int
	CPUs        float64
	MemoryBytes int64
	PidsLimit   int64
}

// ParsePoolSpec parses IMAGE=N (N from 1 to 64), as the --pool flag gives
// it. A malformed one is invalid_request.
func ParsePoolSpec(s string) (PoolSpec, error) {
	i := len(s) - 1
	for i >= 0 && s[i] != '=' {
		i--
	}
	if i <= 0 {
		return PoolSpec{}, errcode.New(errcode.InvalidRequest, "pool %q: want IMAGE=N", s)
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil || n < 1 || n > 64 {
		return PoolSpec{}, errcode.New(errcode.InvalidRequest, "pool %q: N must be a number from 1 to 64", s)
	}
	return PoolSpec{Image: s[:i], Size: n}, nil
}

// PoolConfig configures the runtime's warm pools.
type PoolConfig struct {
	Pools []PoolSpec
	// MaxIdle is the longest a pool container waits for a session before
	// it is removed and made anew (default 10m).
	MaxIdle time.Duration
	// Logger gets the pools' failures (default: discarded).
	Logger *slog.Logger
}

// claimRecord is a claimed pool container's identity, kept by the node in
// SupervisorDir/claims/<container id>.json (0600), since a container's
// labels cannot change.
type claimRecord struct {
	Tenant    string            `json:"tenant"`
	SessionID string            `json:"session_id"`
	Epoch     uint64            `json:"epoch"`
	Env       map[string]string `json:"env,omitempty"`
	Claimed   time.Time         `json:"claimed"`
}

// pools are the runtime's warm pools.
type pools struct {
	r   *Runtime
	cfg PoolConfig

	mu     sync.Mutex           // guards the fields below
	ready  map[string][]*pooled // by image
	owned  map[string]bool      // ids of the pool containers made by this runtime
	closed bool

	kick   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// pooled is one ready pool container.
type pooled struct {
	sb   *Sandbox
	made time.Time
}

// StartPools starts filling the warm pools cfg names (after removing the
// unclaimed pool containers a previous run of this node left). It needs
// the supervisor (Config.Supervisor): without it, it is an error. Close
// stops the pools and removes their unclaimed containers.
func (r *Runtime) StartPools(ctx context.Context, cfg PoolConfig) error {
	if len(cfg.Pools) == 0 {
		return nil
	}
	if r.cfg.Supervisor == "" {
		return errors.New("docker: warm pools need the supervisor")
	}
	if cfg.MaxIdle <= 0 {
		cfg.MaxIdle = 10 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	seen := map[string]bool{}
	for _, p := range cfg.Pools {
		if p.Image == "" || p.Size < 1 {
			return fmt.Errorf("docker: pool %q=%d: an image and a size of at least 1 are required", p.Image, p.Size)
		}
		if _, err := r.options(runtime.Spec{Tenant: "pool", SessionID: "check", Image: p.Image, CPUs: p.CPUs, MemoryBytes: p.MemoryBytes, PidsLimit: p.PidsLimit}); err != nil {
			return fmt.Errorf("docker: pool of %s: %w", p.Image, err)
		}
		k := r.poolKey(p.Image, p.CPUs, p.MemoryBytes, p.PidsLimit, 0)
		if seen[k] {
			return fmt.Errorf("docker: two pools of %s with the same limits", p.Image)
		}
		seen[k] = true
	}
	if err := os.MkdirAll(r.claimDir(), 0o700); err != nil {
		return err
	}
	if err := r.removeStalePool(ctx, nil); err != nil {
		return err
	}
	pctx, cancel := context.WithCancel(context.Background()) // the pools' life; Close ends it
	p := &pools{r: r, cfg: cfg, ready: map[string][]*pooled{}, owned: map[string]bool{}, kick: make(chan struct{}, 1), ctx: pctx, cancel: cancel}
	r.mu.Lock()
	if r.pools != nil {
		r.mu.Unlock()
		cancel()
		return errors.New("docker: pools already started")
	}
	r.pools = p
	r.mu.Unlock()
	p.wg.Go(p.fill)
	return nil
}

func (r *Runtime) claimDir() string { return filepath.Join(r.cfg.SupervisorDir, "claims") }

// poolKey names a pool by its image and effective limits (zeros take the
// runtime's defaults), so that a create's spec and a pool's compare alike.
// Pool containers have the default disk: a create that asks another takes
// none.
func (r *Runtime) poolKey(image string, cpus float64, mem, pids, disk int64) string {
	if disk == 0 {
		disk = r.cfg.DefaultDiskBytes
	}
	if cpus == 0 {
		cpus = r.cfg.DefaultCPUs
	}
	if mem == 0 {
		mem = r.cfg.DefaultMemoryBytes
	}
	if pids == 0 {
		pids = r.cfg.DefaultPidsLimit
	}
	return fmt.Sprintf("%s|%g|%d|%d|%d", image, cpus, mem, pids, disk)
}

func (p *pools) key(spec PoolSpec) string {
	return p.r.poolKey(spec.Image, spec.CPUs, spec.MemoryBytes, spec.PidsLimit, 0)
}

// PoolFree returns how many ready containers each pool holds now.
func (r *Runtime) PoolFree() map[string]int {
	p := r.getPools()
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for _, spec := range p.cfg.Pools {
		out[spec.Image] += len(p.ready[p.key(spec)])
	}
	return out
}

func (r *Runtime) getPools() *pools {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pools
}

// fill keeps every pool at its size and renews containers past MaxIdle,
// one container at a time (the daemon's work per create is what a node
// can least afford in a burst).
func (p *pools) fill() {
	tick := time.NewTicker(min(p.cfg.MaxIdle/4, time.Minute))
	defer tick.Stop()
	backoff := time.Duration(0)
	for {
		p.expire()
		spec, ok := p.short()
		if ok {
			sb, err := p.make(spec)
			if err != nil {
				p.cfg.Logger.Warn("cannot make a pool container", "image", spec.Image, "err", err)
				backoff = min(max(2*backoff, time.Second), time.Minute)
			} else {
				backoff = 0
				p.mu.Lock()
				if p.closed {
					p.mu.Unlock()
					p.remove(sb)
					return
				}
				p.ready[p.key(spec)] = append(p.ready[p.key(spec)], &pooled{sb: sb, made: time.Now()})
				p.mu.Unlock()
			}
			if backoff == 0 {
				continue
			}
		}
		wait := time.NewTimer(max(backoff, time.Millisecond))
		if backoff == 0 {
			wait.Stop()
		}
		select {
		case <-p.ctx.Done():
			wait.Stop()
			return
		case <-p.kick:
		case <-tick.C:
		case <-wait.C:
		}
		wait.Stop()
	}
}

// short returns a pool below its size (none once the pools are closed).
func (p *pools) short() (PoolSpec, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return PoolSpec{}, false
	}
	for _, spec := range p.cfg.Pools {
		if len(p.ready[p.key(spec)]) < spec.Size {
			return spec, true
		}
	}
	return PoolSpec{}, false
}

// expire removes the ready containers older than MaxIdle.
func (p *pools) expire() {
	p.mu.Lock()
	var old []*Sandbox
	for img, list := range p.ready {
		keep := list[:0]
		for _, c := range list {
			if time.Since(c.made) > p.cfg.MaxIdle {
				old = append(old, c.sb)
			} else {
				keep = append(keep, c)
			}
		}
		p.ready[img] = keep
	}
	p.mu.Unlock()
	for _, sb := range old {
		p.remove(sb)
	}
}

// make makes one pool container of image, as Create makes a session's.
// Close does not cancel it (a create cancelled while the daemon makes the
// container can leave one behind that nothing knows of); Close waits for
// it and then removes what it made.
func (p *pools) make(ps PoolSpec) (*Sandbox, error) {
	image := ps.Image
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // not p.ctx: see above
	defer cancel()
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	spec := runtime.Spec{Tenant: "pool", SessionID: id, Node: p.r.cfg.Node, Epoch: 1, Image: image,
		CPUs: ps.CPUs, MemoryBytes: ps.MemoryBytes, PidsLimit: ps.PidsLimit}
	sb, err := p.r.create(ctx, spec, "paddock-pool-"+id, func(c *container.Config) {
		for _, k := range []string{LabelSession, LabelTenant, LabelEpoch} {
			delete(c.Labels, k)
		}
		c.Labels[LabelPool] = image
	}, func(id string) {
		p.mu.Lock()
		p.owned[id] = true
		p.mu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	if sb.link.current() == nil {
		p.remove(sb)
		return nil, fmt.Errorf("the pool container's supervisor did not connect: %s", sb.supNote)
	}
	return sb, nil
}

// remove removes a pool container.
func (p *pools) remove(sb *Sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // outlives the pools' ctx at Close
	defer cancel()
	_ = sb.Shutdown(ctx)
	p.mu.Lock()
	delete(p.owned, sb.id)
	p.mu.Unlock()
}

// matchesPool reports whether spec asks for what pool containers are
// besides their image and limits: the default user and workspace root,
// and no network.
func (r *Runtime) matchesPool(spec runtime.Spec) bool {
	return !spec.Network && spec.User == "" && (spec.WorkspaceRoot == "" || spec.WorkspaceRoot == runtime.DefaultWorkspaceRoot)
}

// claim takes a ready container of spec's image for spec's session, or
// returns nil when the pool has none (or no pool holds the image).
func (r *Runtime) claim(ctx context.Context, spec runtime.Spec) (*Sandbox, error) {
	p := r.getPools()
	if p == nil || !r.matchesPool(spec) {
		return nil, nil
	}
	key := r.poolKey(spec.Image, spec.CPUs, spec.MemoryBytes, spec.PidsLimit, spec.DiskBytes)
	if !p.has(key) {
		return nil, nil
	}
	if err := checkEnv(spec.Env); err != nil {
		return nil, err
	}
	t0 := time.Now()
	for {
		p.mu.Lock()
		list := p.ready[key]
		if len(list) == 0 || p.closed {
			p.mu.Unlock()
			return nil, nil
		}
		c := list[len(list)-1]
		p.ready[key] = list[:len(list)-1]
		p.mu.Unlock()
		select {
		case p.kick <- struct{}{}:
		default:
		}
		sb := c.sb
		if err := r.writeClaim(sb.id, claimRecord{Tenant: spec.Tenant, SessionID: spec.SessionID, Epoch: spec.Epoch, Env: spec.Env, Claimed: t0.UTC()}); err != nil {
			p.remove(sb)
			return nil, errcode.Wrap(errcode.RuntimeError, err, "claim a pool container")
		}
		sb.claimFile = r.claimPath(sb.id)
		sb.env = maps.Clone(spec.Env)
		if err := sb.link.setEnv(ctx, spec.Env); err != nil {
			// Its supervisor went: this one is suspect; take the next.
			p.remove(sb)
			continue
		}
		p.mu.Lock()
		delete(p.owned, sb.id)
		p.mu.Unlock()
		sb.pooled, sb.claim = true, time.Since(t0)
		return sb, nil
	}
}

func (p *pools) has(key string) bool {
	for _, spec := range p.cfg.Pools {
		if p.key(spec) == key {
			return true
		}
	}
	return false
}

func (r *Runtime) claimPath(id string) string { return filepath.Join(r.claimDir(), id+".json") }

// writeClaim writes a claim file atomically.
func (r *Runtime) writeClaim(id string, c claimRecord) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	tmp := r.claimPath(id) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, r.claimPath(id))
}

// readClaim reads a pool container's claim file; a missing one is
// (nil, nil).
func (r *Runtime) readClaim(id string) (*claimRecord, error) {
	if r.cfg.SupervisorDir == "" {
		return nil, nil
	}
	b, err := os.ReadFile(r.claimPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var c claimRecord
	if err := json.Unmarshal(b, &c); err != nil || c.Tenant == "" || c.SessionID == "" {
		return nil, fmt.Errorf("claim file of %s is malformed", id)
	}
	return &c, nil
}

// ownsPool reports whether this runtime's pools made the container id and
// still hold it (ready, or being claimed).
func (r *Runtime) ownsPool(id string) bool {
	p := r.getPools()
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.owned[id]
}

// removeStalePool removes the node's pool containers that no claim file
// names and no pool of this runtime holds: a previous run's. With keep
// set, it leaves those keep says to keep.
func (r *Runtime) removeStalePool(ctx context.Context, keep func(container.Summary) bool) error {
	list, err := r.cli.ContainerList(ctx, container.ListOptions{
		All: true, Filters: filters.NewArgs(filters.Arg("label", LabelNode+"="+r.cfg.Node), filters.Arg("label", LabelPool)),
	})
	if err != nil {
		return r.wrap(err, "list pool containers")
	}
	for _, c := range list {
		if claim, _ := r.readClaim(c.ID); claim != nil || r.ownsPool(c.ID) || (keep != nil && keep(c)) {
			continue
		}
		sb := &Sandbox{r: r, id: c.ID}
		if l := c.Labels[LabelSupervisor]; linkName.MatchString(l) && r.cfg.SupervisorDir != "" {
			defer os.RemoveAll(filepath.Join(r.cfg.SupervisorDir, l))
		}
		if err := r.cli.ContainerRemove(ctx, sb.id, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !errdefs.IsNotFound(err) {
			return r.wrap(err, "remove a stale pool container")
		}
		if d := r.foundDisk(c.Labels[LabelDisk], summaryName(c)); d.dir != "" {
			if err := releaseDisk(d); err != nil {
				return err
			}
		}
	}
	return nil
}

// closePools stops the pools and removes their ready containers.
func (r *Runtime) closePools() {
	p := r.getPools()
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	var ready []*Sandbox
	for _, list := range p.ready {
		for _, c := range list {
			ready = append(ready, c.sb)
		}
	}
	p.ready = map[string][]*pooled{}
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	for _, sb := range ready {
		p.remove(sb)
	}
}
