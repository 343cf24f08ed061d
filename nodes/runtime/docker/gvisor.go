package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// The gvisor runtime is this runtime with Config.GVisor set: the same
// hardened containers on the same Docker engine, run by gVisor's runsc
// (a user-space kernel between the sandbox and the host's) instead of
// runc. Docker must know runsc under Config.GVisor, with the runtime
// arguments GVisorRuntimeArgs (see package gvisorsetup, which registers
// it). gVisor runs with no network stack (--network=none): a gvisor
// sandbox has a loopback only, so it is refused a network
// (policy_denied); its exposed ports and its egress proxy are tunnelled
// through its supervisor (gvisor_tunnel.go).
const (
	// NameGVisor is the gvisor runtime's name (Runtime.Name, the
	// runtime a create names and a sandbox reports).
	NameGVisor = "gvisor"
	// GVisorOCIRuntime is the name Docker usually knows runsc under.
	GVisorOCIRuntime = "runsc"
	// GVisorKernel is the kernel release gVisor reports to its sandboxes
	// (uname -r).
	GVisorKernel = "4.4.0"
	// LabelRuntime names the runtime of a container made by another
	// runtime than docker (gvisor): FindSandboxes of each runtime reports
	// only its own.
	LabelRuntime = "paddock.runtime"
)

// GVisorRuntimeArgs are the arguments Docker must pass to runsc:
// gVisor's own network stack cannot run in Docker's network namespaces
// here, and the supervisor dials the node's Unix socket on its bind
// mount (host-uds=open lets a sandbox connect to a host socket it sees
// through a mount, never create one).
var GVisorRuntimeArgs = []string{"--network=none", "--host-uds=open"}

// isGVisor reports whether the runtime runs its containers under gVisor.
func (r *Runtime) isGVisor() bool { return r.cfg.GVisor != "" }

// ownContainer reports whether a container with labels is this runtime's
// (rather than the other of docker and gvisor on the same node).
func (r *Runtime) ownContainer(labels map[string]string) bool {
	if r.isGVisor() {
		return labels[LabelRuntime] == NameGVisor
	}
	return labels[LabelRuntime] == ""
}

// gvisorOptions adapts a container's options to gVisor: runsc as its OCI
// runtime and its label; a sandbox asking for a network is refused.
func (r *Runtime) gvisorOptions(spec runtime.Spec, c *created) error {
	if !r.isGVisor() {
		return nil
	}
	if spec.Network {
		return errcode.New(errcode.PolicyDenied, "the gvisor runtime gives sandboxes no network of their own (runsc --network=none: gVisor's network stack cannot run in Docker's network namespaces here); use egress mode allow with an allow list (served through the sandbox's supervisor), or the docker runtime")
	}
	c.host.Runtime = r.cfg.GVisor
	c.config.Labels[LabelRuntime] = NameGVisor
	if c.host.PidsLimit != nil {
		pids := GVisorPids(*c.host.PidsLimit)
		c.host.PidsLimit = &pids
	}
	return nil
}

// GVisorPids is the host pids limit that gives a gvisor sandbox room for
// pids processes of its own. Under runsc's ptrace platform every task of
// the sandbox is backed by host threads (the Sentry's and a stub's), and
// the Sentry and the gofer have threads of their own: 150 processes under
// a host limit of 512 stopped the whole sandbox. The limit still bounds a
// fork bomb, at a multiple; the memory limit bounds it too.
func GVisorPids(pids int64) int64 { return 4*pids + 128 }

// errGVisorSupervisor refuses a gvisor runtime without the supervisor:
// under runsc, an exec through the Docker API does not end when its
// container stops (the contract's StopKillsCommands), so exec, processes
// and file operations must go through the supervisor.
var errGVisorSupervisor = errors.New("docker: the gvisor runtime needs the in-sandbox supervisor (under runsc a Docker API exec outlives its container's stop); do not turn --supervisor off")

// ForwardsPorts reports whether the node can reach the runtime's
// sandboxes' ports (on gvisor, through their supervisors).
func (r *Runtime) ForwardsPorts() bool { return true }

// GVisorProblem is why gVisor cannot run sandboxes on an engine, and what
// to do about it.
type GVisorProblem struct {
	// Why says what is missing.
	Why string
	// Err is the underlying error, if any.
	Err error
}

func (p *GVisorProblem) Error() string {
	msg := "gvisor: " + p.Why + "; register runsc with Docker: `engine runtime register-gvisor` (as root), or add " +
		GVisorDaemonSnippet() + " to /etc/docker/daemon.json and send dockerd SIGHUP (kill -HUP $(pidof dockerd))"
	if p.Err != nil {
		msg += ": " + p.Err.Error()
	}
	return msg
}

func (p *GVisorProblem) Unwrap() error { return p.Err }

// GVisorDaemonSnippet is the daemon.json entry that registers runsc.
func GVisorDaemonSnippet() string {
	return fmt.Sprintf(`"runtimes": {%q: {"path": "/usr/bin/runsc", "runtimeArgs": ["%s"]}}`, GVisorOCIRuntime, strings.Join(GVisorRuntimeArgs, `", "`))
}

// CheckGVisor checks that the engine lists the runtime's OCI runtime and
// that a probe container of image runs under it and sees gVisor's kernel.
// It returns a *GVisorProblem saying what to do when not; it is a no-op
// for the docker runtime.
func (r *Runtime) CheckGVisor(ctx context.Context, image string) error {
	if !r.isGVisor() {
		return nil
	}
	info, err := r.cli.Info(ctx)
	if err != nil {
		return &GVisorProblem{Why: "cannot ask the Docker engine for its runtimes", Err: err}
	}
	if _, ok := info.Runtimes[r.cfg.GVisor]; !ok {
		names := make([]string, 0, len(info.Runtimes))
		for n := range info.Runtimes {
			names = append(names, n)
		}
		slices.Sort(names)
		return &GVisorProblem{Why: fmt.Sprintf("Docker lists no %q runtime (it has %s)", r.cfg.GVisor, strings.Join(names, ", "))}
	}
	out, err := r.probeKernel(ctx, image)
	if err != nil {
		return &GVisorProblem{Why: fmt.Sprintf("a probe container does not run under %q", r.cfg.GVisor), Err: err}
	}
	if out != GVisorKernel {
		return &GVisorProblem{Why: fmt.Sprintf("a probe container under %q reports kernel %q, not gVisor's %s", r.cfg.GVisor, out, GVisorKernel)}
	}
	return nil
}

// probeKernel runs `uname -r` in a throwaway container of image under the
// runtime's OCI runtime, hardened as sandboxes are, and returns it.
func (r *Runtime) probeKernel(ctx context.Context, image string) (string, error) {
	if _, err := r.ensureImage(ctx, image); err != nil {
		return "", err
	}
	name := "paddock-gvisor-probe-" + strings.ReplaceAll(r.cfg.Node, ".", "-") + "-" + time.Now().Format("150405.000000000")
	name = nameUnsafe.ReplaceAllString(name, "-")
	init := true
	pids := int64(64) // runsc's own threads count too
	resp, err := r.cli.ContainerCreate(ctx,
		&container.Config{Image: image, Cmd: []string{"uname", "-r"}, User: r.cfg.DefaultUser,
			Labels: map[string]string{LabelNode: r.cfg.Node + "-probe", LabelRuntime: NameGVisor}},
		&container.HostConfig{Runtime: r.cfg.GVisor, NetworkMode: "none", CapDrop: []string{"ALL"}, Init: &init,
			SecurityOpt: []string{"no-new-privileges:true"}, ReadonlyRootfs: true,
			Resources: container.Resources{Memory: 128 << 20, PidsLimit: &pids}},
		nil, nil, name)
	// Ours by name: a failed create may still have made it. Not derived
	// from ctx, which may be what ended.
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = r.cli.ContainerRemove(rctx, name, container.RemoveOptions{Force: true})
	}()
	if err != nil {
		return "", r.wrap(err, "create the gvisor probe")
	}
	wait, errs := r.cli.ContainerWait(ctx, resp.ID, container.WaitConditionNextExit)
	if err := r.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return "", r.wrap(err, "start the gvisor probe")
	}
	select {
	case w := <-wait:
		if w.StatusCode != 0 {
			return "", fmt.Errorf("the probe exited %d", w.StatusCode)
		}
	case err := <-errs:
		return "", r.wrap(err, "wait for the gvisor probe")
	case <-ctx.Done():
		return "", r.wrap(ctx.Err(), "wait for the gvisor probe")
	}
	logs, err := r.cli.ContainerLogs(ctx, resp.ID, container.LogsOptions{ShowStdout: true})
	if err != nil {
		return "", r.wrap(err, "read the gvisor probe's output")
	}
	defer logs.Close()
	var out strings.Builder
	if _, err := stdcopy.StdCopy(&out, io.Discard, io.LimitReader(logs, 4096)); err != nil {
		return "", r.wrap(err, "read the gvisor probe's output")
	}
	return strings.TrimSpace(out.String()), nil
}
