package docker

import (
	"context"
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
		sb := &Sandbox{r: r, id: c.ID, name: name, root: root, user: user}
		sb.link = r.relink(sb, c.Labels[LabelSupervisor])
		out = append(out, runtime.Found{
			Tenant: tenant, SessionID: session, Epoch: epoch,
			Created: time.Unix(c.Created, 0), Running: ins.State != nil && ins.State.Running,
			Env:     env,
			Sandbox: sb,
		})
	}
	return out, nil
}
