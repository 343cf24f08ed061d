package docker

import (
	"context"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/errdefs"

	"github.com/paddock-dev/paddock/nodes/runtime"
)

// FindSandboxes returns the containers labelled with the runtime's node,
// running or not, so that a restarted node agent can serve them again or
// reap them. Containers with malformed labels are skipped. Each Found
// carries the container's environment (secrets included) and a Sandbox
// that drives it as the one Create returned does. An engine failure is
// runtime_error.
func (r *Runtime) FindSandboxes(ctx context.Context) ([]runtime.Found, error) {
	list, err := r.cli.ContainerList(ctx, container.ListOptions{
		All: true, Filters: filters.NewArgs(filters.Arg("label", LabelNode+"="+r.cfg.Node)),
	})
	if err != nil {
		return nil, r.wrap(err, "list containers")
	}
	var out []runtime.Found
	for _, c := range list {
		if !r.ownContainer(c.Labels) {
			continue // the other of docker and gvisor on this node
		}
		epoch, err := strconv.ParseUint(c.Labels[LabelEpoch], 10, 64)
		tenant, session := c.Labels[LabelTenant], c.Labels[LabelSession]
		created := time.Unix(c.Created, 0)
		var claim *claimRecord
		if _, ok := c.Labels[LabelPool]; ok {
			if claim, err = r.readClaim(c.ID); claim == nil {
				continue // a pool's, or a previous run's (see reapPool)
			}
			tenant, session, epoch, created = claim.Tenant, claim.SessionID, claim.Epoch, claim.Claimed
		}
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
		sb := &Sandbox{r: r, id: c.ID, name: name, root: root, user: user, disk: r.foundDisk(c.Labels[LabelDisk], name)}
		sb.disk.overlay = sb.disk.dir != "" && c.Labels[LabelOverlay] == "rslave"
		if claim != nil {
			sb.env, sb.claimFile, sb.pooled = claim.Env, r.claimPath(c.ID), true
			maps.Copy(env, claim.Env)
		}
		var claimEnv map[string]string
		if claim != nil {
			claimEnv = claim.Env
		}
		sb.link = r.relink(sb, c.Labels[LabelSupervisor], claimEnv)
		out = append(out, runtime.Found{
			Tenant: tenant, SessionID: session, Epoch: epoch,
			Created: created, Running: ins.State != nil && ins.State.Running,
			Env:     env,
			Sandbox: sb,
		})
	}
	if err := r.reapPool(ctx); err != nil {
		return out, err
	}
	if _, err := r.reapDisks(ctx); err != nil {
		return out, err
	}
	return out, nil
}

// staleAge is how old an unclaimed pool container no pool holds must be
// before the reaper removes it (younger ones may be a pool's in the
// making).
var staleAge = time.Minute

// reapPool removes the node's unclaimed pool containers that no pool of
// this runtime holds and that are older than staleAge (a previous run's).
func (r *Runtime) reapPool(ctx context.Context) error {
	return r.removeStalePool(ctx, func(c container.Summary) bool {
		return time.Since(time.Unix(c.Created, 0)) < staleAge
	})
}
