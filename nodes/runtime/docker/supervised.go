package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
)

// keepAliveScript is the main process of a container with a supervisor:
// it starts the supervisor ($0, with the socket $1 and the workspace root
// $2) in the background and idles as keepAlive does.
const keepAliveScript = `"$0" -socket "$1" -root "$2" </dev/null >/dev/null & trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done`

// linkName is the form of a socket directory's name (newLinkDir's).
var linkName = regexp.MustCompile(`^[0-9a-f]{16}$`)

// supervisorArgv runs the supervisor for the workspace root.
func supervisorArgv(root string) []string {
	return []string{supervisorPath, "-socket", supervisorRun + "/" + socketName, "-root", root}
}

// withSupervisor gives a container about to be made a supervisor: a
// socket directory with the node listening in it, the binary and the
// directory bind-mounted read-only, and the keep-alive that starts it.
// Without Config.Supervisor it does nothing.
func (r *Runtime) withSupervisor(sb *Sandbox, opts *created) {
	if r.cfg.Supervisor == "" {
		return
	}
	if _, err := os.Stat(r.cfg.Supervisor); err != nil {
		sb.supNote = fmt.Sprintf("no supervisor binary: %v", err)
		return
	}
	dir, err := newLinkDir(r.cfg.SupervisorDir)
	if err != nil {
		sb.supNote = fmt.Sprintf("no socket directory: %v", err)
		return
	}
	l, err := listen(dir, sb.startSupervisor, nil)
	if err != nil {
		_ = os.RemoveAll(dir)
		sb.supNote = fmt.Sprintf("cannot listen for the supervisor: %v", err)
		return
	}
	sb.link = l
	opts.config.Labels[LabelSupervisor] = filepath.Base(dir)
	opts.config.Cmd = append([]string{"/bin/sh", "-c", keepAliveScript}, supervisorArgv(opts.root)[0], supervisorRun+"/"+socketName, opts.root)
	opts.host.Mounts = append(opts.host.Mounts,
		mount.Mount{Type: mount.TypeBind, Source: r.cfg.Supervisor, Target: supervisorPath, ReadOnly: true},
		mount.Mount{Type: mount.TypeBind, Source: dir, Target: supervisorRun, ReadOnly: true},
	)
}

// awaitSupervisor waits for a new container's supervisor to say hello,
// up to SupervisorWait; one that does not is noted (the sandbox works
// through the Docker API meanwhile, and takes the supervisor when it
// comes).
func (r *Runtime) awaitSupervisor(ctx context.Context, sb *Sandbox) {
	if sb.link == nil {
		return
	}
	r.lmu.Lock()
	r.links[sb.id] = sb.link
	r.lmu.Unlock()
	sb.link.startWatch()
	if sb.link.wait(ctx, r.cfg.SupervisorWait) == nil {
		_, why := sb.link.snapshot()
		sb.supNote = fmt.Sprintf("the supervisor did not connect within %s", r.cfg.SupervisorWait)
		if why != "" {
			sb.supNote += ": " + why
		}
	}
}

// relink returns the link of a container found again (after a restart of
// the node, or on a later pass of the reaper), listening anew in its
// socket directory; nil without a supervisor.
func (r *Runtime) relink(sb *Sandbox, label string, env map[string]string) *link {
	if r.cfg.Supervisor == "" || !linkName.MatchString(label) {
		return nil
	}
	r.lmu.Lock()
	defer r.lmu.Unlock()
	if l := r.links[sb.id]; l != nil {
		return l
	}
	dir := filepath.Join(r.cfg.SupervisorDir, label)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil
	}
	l, err := listen(dir, sb.startSupervisor, env)
	if err != nil {
		return nil
	}
	l.startWatch()
	r.links[sb.id] = l
	return l
}

// closeLinks stops listening for every supervisor (the node is going;
// its sandboxes stay, and their supervisors dial the next node).
func (r *Runtime) closeLinks() {
	r.lmu.Lock()
	links := r.links
	r.links = map[string]*link{}
	r.lmu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// startSupervisor starts a supervisor in the running container through
// the Docker API (a detached exec as the sandbox's user), for one that
// died or never came.
func (s *Sandbox) startSupervisor(ctx context.Context) error {
	created, err := s.r.cli.ContainerExecCreate(ctx, s.id, container.ExecOptions{
		User: s.user, Cmd: supervisorArgv(s.root), Detach: true,
	})
	if err != nil {
		return s.r.wrap(err, "start the supervisor")
	}
	return s.r.wrap(s.r.cli.ContainerExecStart(ctx, created.ID, container.ExecStartOptions{Detach: true}), "start the supervisor")
}

// dropLink closes the sandbox's link and removes its socket directory.
func (s *Sandbox) dropLink() {
	if s.link == nil {
		return
	}
	s.r.lmu.Lock()
	if s.r.links[s.id] == s.link {
		delete(s.r.links, s.id)
	}
	s.r.lmu.Unlock()
	s.link.remove()
}

// SupervisorStatus says how a sandbox's operations run.
type SupervisorStatus struct {
	// Enabled says the sandbox was made with a supervisor.
	Enabled bool
	// Connected says the supervisor is connected now.
	Connected bool
	// Note says why a create went on without it (empty when it came).
	Note string
	// Connects, Violations and Restarts count the supervisor's
	// connections, the ones the node ended for breaking the protocol or
	// going silent, and the restarts through the Docker API.
	Connects, Violations, Restarts int
	// LastError is why the last connection ended.
	LastError string
}

// Supervisor returns the sandbox's supervisor status.
func (s *Sandbox) Supervisor() SupervisorStatus {
	st := SupervisorStatus{Enabled: s.link != nil, Note: s.supNote}
	if s.link != nil {
		st.Connected = s.link.current() != nil
		var stats linkStats
		stats, st.LastError = s.link.snapshot()
		st.Connects, st.Violations, st.Restarts = stats.Connects, stats.Violations, stats.Restarts
	}
	return st
}

// Provenance says how the sandbox was made, for its create's finish
// event: supervisor is "" on a runtime without one, "connected" when its
// supervisor answered, else "docker_api: " and why its operations go
// through the Docker API; pooled says it was claimed from a warm pool, and
// claim how long the claim took.
func (s *Sandbox) Provenance() (supervisor string, pooled bool, claim time.Duration) {
	switch {
	case s.link == nil && s.supNote == "":
		supervisor = ""
	case s.link.current() != nil:
		supervisor = "connected"
	default:
		supervisor = "docker_api: " + s.supNote
	}
	return supervisor, s.pooled, s.claim
}
