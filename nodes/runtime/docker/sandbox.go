package docker

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/errdefs"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// Sandbox is one container. Its methods are safe for concurrent use.
type Sandbox struct {
	r    *Runtime
	id   string
	name string
	root string // workspace root inside the container
	user string // the container's user, as Docker was given it
	// link is the channel to the sandbox's supervisor; nil without one.
	link *link
	// supNote says why a create went on without its supervisor.
	supNote string
	// A sandbox claimed from a warm pool: its session's variables (the
	// container was made without them: every exec gets them), its claim
	// file, and how long the claim took.
	env       map[string]string
	claimFile string
	pooled    bool
	claim     time.Duration
	// disk is the sandbox's disk limit (disk.go).
	disk disk

	// life orders the container's state changes: Start, Stop and Remove on
	// a stopped sandbox (which starts the container for its rm and stops it
	// again) hold it; exec holds it shared while it creates and starts a
	// command. Shutdown does not wait for it: removing the container ends
	// whatever holds it.
	life sync.RWMutex

	mu       sync.Mutex // guards the fields below
	gone     bool       // Shutdown ran
	ids      *owner     // the user's numeric ids, resolved once
	idsError error
	// bgCancel ends the background work (removing what a hydrate
	// replaced); nil until some starts. Shutdown cancels it and waits for
	// bg.
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
}

// owner is a numeric uid and gid.
type owner struct{ uid, gid int }

// ID returns the container's id.
func (s *Sandbox) ID() string { return s.id }

// Name returns the container's name.
func (s *Sandbox) Name() string { return s.name }

func (s *Sandbox) checkNotGone(op string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return errcode.New(errcode.InvalidState, "%s: sandbox is shut down", op)
	}
	return nil
}

// ContainerID returns the Docker id of the sandbox's container; the node
// records it in the create's (and a re-creating resume's) finish event.
func (s *Sandbox) ContainerID() string { return s.id }

// Start starts a stopped container; a running one is left alone. After
// Shutdown, or when the container was removed behind the runtime's back,
// it is invalid_state; an engine failure is runtime_error.
func (s *Sandbox) Start(ctx context.Context) (err error) {
	if err := s.checkNotGone("start"); err != nil {
		return err
	}
	s.life.Lock()
	defer s.life.Unlock()
	if err := ensureMounted(ctx, s.disk); err != nil {
		return err
	}
	// A workspace that is an overlay (a restore from a kept tree) is
	// mounted after the container starts: mounted before, the container's
	// workspace mount would hold that overlay itself and not receive the
	// next one (overlay.go).
	if remount, err := s.liftOverlay(ctx); err != nil {
		return err
	} else if remount != nil {
		defer func() {
			if rerr := remount(); rerr != nil && err == nil {
				err = rerr
			}
		}()
	}
	if err := s.r.cli.ContainerStart(ctx, s.id, container.StartOptions{}); err != nil {
		switch {
		case errdefs.IsNotFound(err):
			return errcode.New(errcode.InvalidState, "start: the container is gone")
		case errdefs.IsConflict(err):
			// Paused: only a freeze (files.go) pauses, and thaws before
			// it returns; one a node died in the middle of is thawed here.
			if uerr := s.r.cli.ContainerUnpause(ctx, s.id); uerr != nil {
				return s.r.wrap(errors.Join(err, uerr), "start container")
			}
			return nil
		}
		return s.r.wrap(err, "start container")
	}
	if s.link != nil {
		// The keep-alive starts the supervisor again; what comes before it
		// connects goes through the Docker API.
		s.link.wait(ctx, s.r.cfg.SupervisorWait)
	}
	return nil
}

// Stop stops the container (SIGTERM, then SIGKILL after StopTimeout) and
// keeps it, workspace included; stopping a stopped one is a no-op. After
// Shutdown, or when the container is gone, it is invalid_state; an engine
// failure is runtime_error.
func (s *Sandbox) Stop(ctx context.Context) error {
	if err := s.checkNotGone("stop"); err != nil {
		return err
	}
	s.life.Lock()
	defer s.life.Unlock()
	return s.stopContainer(ctx)
}

// stopContainer stops the container; s.life must be held.
func (s *Sandbox) stopContainer(ctx context.Context) error {
	secs := int(s.r.cfg.StopTimeout / time.Second)
	if err := s.r.cli.ContainerStop(ctx, s.id, container.StopOptions{Timeout: &secs}); err != nil {
		if errdefs.IsNotFound(err) {
			return errcode.New(errcode.InvalidState, "stop: the container is gone")
		}
		return s.r.wrap(err, "stop container")
	}
	return nil
}

// Shutdown removes the container and its anonymous volumes, then its
// loopfs disk (unmounted, the image deleted). It is idempotent: a
// container already gone is fine. Only an engine failure (runtime_error,
// or unavailable when ctx ends) is an error, and the sandbox stays usable
// then; a disk that cannot be unmounted is runtime_error too, and the
// reaper tries again.
func (s *Sandbox) Shutdown(ctx context.Context) error {
	err := s.r.cli.ContainerRemove(ctx, s.id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !errdefs.IsNotFound(err) {
		return s.r.wrap(err, "remove container")
	}
	derr := releaseDisk(s.disk)
	s.dropLink()
	if s.claimFile != "" {
		_ = os.Remove(s.claimFile)
	}
	s.mu.Lock()
	s.gone = true
	cancel := s.bgCancel
	s.mu.Unlock()
	// The container is gone, and with it what the background work was
	// removing: end it and wait for it.
	if cancel != nil {
		cancel()
	}
	s.bg.Wait()
	return derr
}

// goBackground runs f in a goroutine that Shutdown ends (through f's ctx)
// and waits for; after Shutdown it does nothing.
func (s *Sandbox) goBackground(f func(ctx context.Context)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return
	}
	if s.bgCancel == nil {
		// Not derived from a request's ctx: this work outlives the
		// request that started it; Shutdown cancels it.
		s.bgCtx, s.bgCancel = context.WithCancel(context.Background())
	}
	ctx := s.bgCtx
	s.bg.Go(func() { f(ctx) })
}

// Running reports whether the container runs; a removed one does not
// (false, nil). An engine failure is runtime_error.
func (s *Sandbox) Running(ctx context.Context) (bool, error) {
	c, err := s.r.cli.ContainerInspect(ctx, s.id)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, s.r.wrap(err, "inspect container")
	}
	return c.State != nil && c.State.Running && !c.State.Paused, nil
}

// owner returns the numeric ids of the sandbox's user, reading the
// container's /etc/passwd and /etc/group for names.
func (s *Sandbox) owner(ctx context.Context) (owner, error) {
	s.mu.Lock()
	if s.ids != nil || s.idsError != nil {
		defer s.mu.Unlock()
		if s.ids == nil {
			return owner{}, s.idsError
		}
		return *s.ids, nil
	}
	s.mu.Unlock()
	o, err := s.resolveUser(ctx, s.user)
	if err != nil && errcode.Of(err) == errcode.RuntimeError {
		return owner{}, err // passing: try again next time
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.idsError = err
		return owner{}, err
	}
	s.ids = &o
	return o, nil
}

// resolveUser maps "uid", "uid:gid", "name" or "name:group" to numeric ids
// the way Docker does (a uid without a group gets its passwd group, else 0).
func (s *Sandbox) resolveUser(ctx context.Context, user string) (owner, error) {
	u, g, hasGroup := strings.Cut(user, ":")
	if u == "" {
		u = "0"
	}
	uid, uerr := strconv.Atoi(u)
	gid, gerr := strconv.Atoi(g)
	if uerr == nil && hasGroup && gerr == nil {
		return owner{uid, gid}, nil
	}
	passwd, err := s.readSmall(ctx, "/etc/passwd")
	if err != nil && (uerr != nil || (hasGroup && gerr != nil)) {
		return owner{}, errcode.Wrap(errcode.InvalidRequest, err, "user "+user+": the image has no readable /etc/passwd")
	}
	found := false
	for _, f := range colonRecords(passwd, 4) {
		if f[0] == u || (uerr == nil && f[2] == u) {
			uid, _ = strconv.Atoi(f[2])
			pg, _ := strconv.Atoi(f[3])
			if !hasGroup {
				gid = pg
			}
			found = true
			break
		}
	}
	if !found {
		if uerr != nil {
			return owner{}, errcode.New(errcode.InvalidRequest, "user %q is not in the image's /etc/passwd", u)
		}
		if !hasGroup {
			gid = 0
		}
	}
	if hasGroup && gerr != nil {
		group, err := s.readSmall(ctx, "/etc/group")
		if err != nil {
			return owner{}, errcode.Wrap(errcode.InvalidRequest, err, "group "+g+": the image has no readable /etc/group")
		}
		ok := false
		for _, f := range colonRecords(group, 3) {
			if f[0] == g {
				gid, _ = strconv.Atoi(f[2])
				ok = true
				break
			}
		}
		if !ok {
			return owner{}, errcode.New(errcode.InvalidRequest, "group %q is not in the image's /etc/group", g)
		}
	}
	return owner{uid, gid}, nil
}

// colonRecords splits /etc/passwd-style content into records with at least
// n fields.
func colonRecords(b []byte, n int) [][]string {
	var out [][]string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Split(sc.Text(), ":"); len(f) >= n {
			out = append(out, f)
		}
	}
	return out
}

// readSmall reads a small file of the container by its absolute path,
// without the workspace checks (for the image's own files).
func (s *Sandbox) readSmall(ctx context.Context, abs string) ([]byte, error) {
	rc, _, err := s.r.cli.CopyFromContainer(ctx, s.id, abs)
	if err != nil {
		return nil, s.r.wrap(err, "read "+abs)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	if err != nil {
		return nil, s.r.wrap(err, "read "+abs)
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil, errcode.New(errcode.InvalidRequest, "%s is not a regular file", abs)
	}
	return io.ReadAll(io.LimitReader(tr, 1<<20))
}

// prepare makes the workspace root of a started container a directory
// owned by the sandbox's user (the user may not be root, and even root has
// no capabilities inside to chown). Copying into a container costs tens of
// milliseconds, so the first create of each image, root and owner checks
// whether the image already has it right, and later ones skip the copy
// when it has.
func (r *Runtime) prepare(ctx context.Context, sb *Sandbox, imageID string) error {
	if sb.disk.mechanism == runtime.DiskLoopFS {
		return nil // the root is the disk's directory, given to the user already
	}
	o, err := sb.owner(ctx)
	if err != nil {
		return err
	}
	key := imageID + "\x00" + sb.root + "\x00" + strconv.Itoa(o.uid) + ":" + strconv.Itoa(o.gid)
	r.mu.Lock()
	ready, known := r.rootReady[key]
	r.mu.Unlock()
	if ready {
		return nil
	}
	if !known {
		ready = sb.rootOwnedBy(ctx, o)
		r.mu.Lock()
		r.rootReady[key] = ready
		r.mu.Unlock()
		if ready {
			return nil
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeDir, Name: strings.TrimPrefix(sb.root, "/") + "/", Mode: 0o755,
		Uid: o.uid, Gid: o.gid, ModTime: time.Now(),
	}); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := r.cli.CopyToContainer(ctx, sb.id, "/", &buf, container.CopyToContainerOptions{}); err != nil {
		return r.wrap(err, "make workspace root "+sb.root)
	}
	return nil
}

// rootOwnedBy reports whether the workspace root is a directory owned by
// o, as the image made it (false when it cannot tell).
func (sb *Sandbox) rootOwnedBy(ctx context.Context, o owner) bool {
	res, err := sb.Exec(ctx, runtime.ExecSpec{
		Argv: []string{"stat", "-c", "%u:%g:%F", sb.root}, User: "0", Timeout: 30 * time.Second, MaxOutput: 256,
	})
	want := strconv.Itoa(o.uid) + ":" + strconv.Itoa(o.gid) + ":directory\n"
	return err == nil && res.ExitCode == 0 && string(res.Stdout) == want
}
