package nodes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/projection"
)

// createData is the create start event's data: the spec without secret
// values.
type createData struct {
	Runtime       string            `json:"runtime"`
	Image         string            `json:"image,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	SecretEnvKeys []string          `json:"secret_env_keys,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	CPUs          float64           `json:"cpus,omitempty"`
	MemoryBytes   int64             `json:"memory_bytes,omitempty"`
	WorkspaceRoot string            `json:"workspace_root"`
	Network       bool              `json:"network,omitempty"`
	User          string            `json:"user,omitempty"`
	PidsLimit     int64             `json:"pids_limit,omitempty"`
	Manifest      []manifestRecord  `json:"manifest,omitempty"`
	Epoch         uint64            `json:"epoch"`
}

// manifestRecord is a manifest entry as the create event records it:
// without its content.
type manifestRecord struct {
	Path      string `json:"path"`
	Dir       bool   `json:"dir,omitempty"`
	Size      int    `json:"size,omitempty"`
	SHA256    string `json:"sha256,omitempty"`
	Mode      uint32 `json:"mode,omitempty"`
	Ephemeral bool   `json:"ephemeral,omitempty"`
}

// subscribeSession subscribes to s's subject and waits until the server
// has the subscription.
func (a *Agent) subscribeSession(s *session) (*nats.Subscription, error) {
	sub, err := a.nc.Subscribe(a.cmdSubj.SessionAll(s.tenant, s.id), a.dispatch(a.sessionHandler(s)))
	if err == nil {
		err = a.nc.FlushTimeout(10 * time.Second)
	}
	if err != nil {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
		return nil, errcode.Wrap(errcode.Unavailable, err, "subscribe session subject")
	}
	return sub, nil
}

// materialise writes a create's manifest into a new sandbox.
func materialise(ctx context.Context, sb runtime.Sandbox, manifest []commands.ManifestEntry) error {
	for _, e := range manifest {
		if e.Dir {
			if err := sb.Mkdir(ctx, e.Path, true); err != nil {
				return fmt.Errorf("manifest %s: %w", e.Path, err)
			}
			continue
		}
		mode := fs.FileMode(e.Mode)
		if mode == 0 {
			mode = 0o644
		}
		if err := sb.WriteFile(ctx, e.Path, e.Content, mode); err != nil {
			return fmt.Errorf("manifest %s: %w", e.Path, err)
		}
	}
	return nil
}

// ephemeralSkip returns the archive.Skip that leaves ephemeral paths out.
func ephemeralSkip(paths []string) archive.Skip {
	if len(paths) == 0 {
		return nil
	}
	return func(rel string) bool {
		for _, p := range paths {
			if rel == p {
				return true
			}
		}
		return false
	}
}

type statusData struct {
	Status projection.Status `json:"status"`
}

func (a *Agent) handleCreate(ctx context.Context, m *nats.Msg) {
	var p commands.Placement
	req, err := commands.DecodeRequest(m.Data, &p)
	if err == nil {
		err = validatePlacement(&p)
	}
	if err != nil {
		a.respond(m, commands.ErrorReply(err))
		return
	}
	spec := p.Spec
	rtName := spec.Runtime
	if rtName == "" {
		rtName = a.order[0]
	}
	rt, ok := a.runtimes[rtName]
	if !ok {
		a.respond(m, commands.ErrorReply(errcode.New(errcode.NoCapacity, "node %s has no %s runtime", a.cfg.ID, rtName)))
		return
	}
	root := spec.WorkspaceRoot
	if root == "" {
		root = runtime.DefaultWorkspaceRoot
	}
	if rtName == "docker" && spec.Image == "" {
		spec.Image = commands.DefaultImage // recorded as the image the session runs
	}
	s := &session{
		tenant: p.Tenant, id: p.SessionID, runtime: rtName, root: root,
		redact: newRedactor(spec.SecretEnv), status: projection.StatusCreating,
		results: map[string]*cmdResult{},
	}
	key := sessionKey(p.Tenant, p.SessionID)
	a.mu.Lock()
	switch {
	case a.draining:
		a.mu.Unlock()
		a.respond(m, commands.ErrorReply(errcode.New(errcode.Unavailable, "node %s is draining", a.cfg.ID)))
		return
	case a.sessions[key] != nil:
		a.mu.Unlock()
		a.respond(m, commands.ErrorReply(errcode.New(errcode.AlreadyExists, "session %s already exists", p.SessionID)))
		return
	case len(a.sessions) >= a.cfg.Capacity:
		a.mu.Unlock()
		a.respond(m, commands.ErrorReply(errcode.New(errcode.NoCapacity, "node %s holds %d sessions, its capacity", a.cfg.ID, a.cfg.Capacity)))
		return
	}
	a.sessions[key] = s
	a.mu.Unlock()

	keys := make([]string, 0, len(spec.SecretEnv))
	env := make(map[string]string, len(spec.Env)+len(spec.SecretEnv))
	for k, v := range spec.Env {
		env[k] = v
	}
	for k, v := range spec.SecretEnv {
		env[k] = v
		keys = append(keys, k)
	}
	sort.Strings(keys)
	start := createData{
		Runtime: rtName, Image: spec.Image, Env: spec.Env, SecretEnvKeys: keys, Labels: spec.Labels,
		CPUs: spec.CPUs, MemoryBytes: spec.MemoryBytes, WorkspaceRoot: root, Epoch: 1,
		Network: spec.Network, User: spec.User, PidsLimit: spec.PidsLimit,
	}
	for _, e := range spec.Manifest {
		r := manifestRecord{Path: e.Path, Dir: e.Dir, Mode: e.Mode, Ephemeral: e.Ephemeral}
		if !e.Dir {
			r.Size, r.SHA256 = len(e.Content), digest(e.Content)
		}
		start.Manifest = append(start.Manifest, r)
		if e.Ephemeral {
			s.ephemeral = append(s.ephemeral, path.Clean(e.Path))
		}
	}
	a.run(ctx, m, s, req, commands.OpCreate, start, func(ctx context.Context) (outcome, error) {
		rspec := runtime.Spec{
			Tenant: p.Tenant, SessionID: p.SessionID, Node: a.cfg.ID, Epoch: 1, Image: spec.Image,
			Env: env, Labels: spec.Labels, CPUs: spec.CPUs, MemoryBytes: spec.MemoryBytes, WorkspaceRoot: root,
			Network: spec.Network, User: spec.User, PidsLimit: spec.PidsLimit,
		}
		s.mu.Lock()
		s.spec, s.epoch = rspec, 1
		s.mu.Unlock()
		sb, err := rt.Create(ctx, rspec)
		if err != nil {
			return outcome{}, err
		}
		if err := materialise(ctx, sb, spec.Manifest); err != nil {
			_ = sb.Shutdown(context.WithoutCancel(ctx))
			return outcome{}, err
		}
		sub, err := a.subscribeSession(s)
		if err != nil {
			_ = sb.Shutdown(context.WithoutCancel(ctx))
			return outcome{}, err
		}
		s.mu.Lock()
		s.sb, s.sub, s.status = sb, sub, projection.StatusRunning
		s.mu.Unlock()
		return outcome{
			result: commands.CreateResult{SessionID: p.SessionID, Node: a.cfg.ID, Runtime: rtName, Status: string(projection.StatusRunning)},
			data:   statusData{Status: projection.StatusRunning},
		}, nil
	})
	if s.getStatus() == projection.StatusCreating {
		a.forget(s)
	}
}

func validatePlacement(p *commands.Placement) error {
	if err := commands.CheckToken("tenant", p.Tenant); err != nil {
		return err
	}
	if err := commands.CheckToken("session_id", p.SessionID); err != nil {
		return err
	}
	return p.Spec.Validate()
}

// forget drops s from the agent and stops serving its subject.
func (a *Agent) forget(s *session) {
	a.mu.Lock()
	if a.sessions[sessionKey(s.tenant, s.id)] == s {
		delete(a.sessions, sessionKey(s.tenant, s.id))
	}
	a.mu.Unlock()
	s.mu.Lock()
	sub := s.sub
	s.sub = nil
	s.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe()
		_ = a.nc.Flush()
	}
}

// sessionHandler serves every op on s's subject.
func (a *Agent) sessionHandler(s *session) func(ctx context.Context, m *nats.Msg) {
	return func(ctx context.Context, m *nats.Msg) {
		_, _, op, ok := a.cmdSubj.ParseSession(m.Subject)
		if !ok || !op.Known() {
			a.respond(m, commands.ErrorReply(errcode.New(errcode.UnknownOp, "unknown op %q", op)))
			return
		}
		if s.getStatus() == projection.StatusDeleted {
			a.respond(m, commands.ErrorReply(errcode.New(errcode.SessionNotFound, "session %s was deleted", s.id)))
			return
		}
		h := a.opHandler(op)
		h(ctx, m, s)
	}
}

type opFunc func(ctx context.Context, m *nats.Msg, s *session)

func (a *Agent) opHandler(op commands.Op) opFunc {
	switch op {
	case commands.OpExec:
		return a.opExec
	case commands.OpRead:
		return a.opRead
	case commands.OpWrite:
		return a.opWrite
	case commands.OpLs:
		return a.opLs
	case commands.OpRm:
		return fileOp(a, op, func(ctx context.Context, sb runtime.Sandbox, args commands.RmArgs) error {
			return sb.Remove(ctx, args.Path, args.Recursive)
		})
	case commands.OpMkdir:
		return fileOp(a, op, func(ctx context.Context, sb runtime.Sandbox, args commands.MkdirArgs) error {
			return sb.Mkdir(ctx, args.Path, args.Parents)
		})
	case commands.OpRunning:
		return a.opRunning
	case commands.OpPersist:
		return a.opPersist
	case commands.OpHydrate:
		return a.opHydrate
	case commands.OpResume:
		return a.opResume
	default:
		return a.opLifecycle(op)
	}
}

// decode decodes m into args and validates them; on failure it answers m
// and returns false. Rejected requests are not operations and are not
// recorded as events.
func (a *Agent) decode(m *nats.Msg, args any) (commands.Request, bool) {
	req, err := commands.DecodeRequest(m.Data, args)
	if err == nil {
		if v, ok := args.(interface{ Validate() error }); ok {
			err = v.Validate()
		}
	}
	if err != nil {
		a.respond(m, commands.ErrorReply(err))
		return req, false
	}
	return req, true
}

type execStart struct {
	Argv      []string `json:"argv"`
	Cwd       string   `json:"cwd,omitempty"`
	TimeoutMS int64    `json:"timeout_ms"`
	EnvKeys   []string `json:"env_keys,omitempty"`
}

type execFinish struct {
	ExitCode    int   `json:"exit_code"`
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
}

func (a *Agent) opExec(ctx context.Context, m *nats.Msg, s *session) {
	var args commands.ExecArgs
	req, ok := a.decode(m, &args)
	if !ok {
		return
	}
	argv := args.Argv
	if args.Shell != "" {
		argv = []string{"/bin/sh", "-c", args.Shell}
	}
	timeout := time.Duration(args.TimeoutMS) * time.Millisecond
	if timeout == 0 {
		timeout = a.cfg.DefaultExecTimeout
	}
	maxOut := args.MaxOutputBytes
	if maxOut == 0 || maxOut > commands.MaxOutputBytes {
		maxOut = commands.MaxOutputBytes
	}
	envKeys := make([]string, 0, len(args.Env))
	for k := range args.Env {
		envKeys = append(envKeys, k)
	}
	sort.Strings(envKeys)
	shown := make([]string, len(argv))
	for i, v := range argv {
		shown[i] = s.redact.string(v)
	}
	start := execStart{Argv: shown, Cwd: args.Cwd, TimeoutMS: timeout.Milliseconds(), EnvKeys: envKeys}
	a.run(ctx, m, s, req, commands.OpExec, start, func(ctx context.Context) (outcome, error) {
		began := time.Now()
		res, err := s.sandbox().Exec(ctx, runtime.ExecSpec{Argv: argv, Env: args.Env, Cwd: args.Cwd, User: args.User, Timeout: timeout, MaxOutput: maxOut})
		if err != nil {
			return outcome{}, err
		}
		stdout, stderr := s.redact.bytes(res.Stdout), s.redact.bytes(res.Stderr)
		code := res.ExitCode
		return outcome{
			result: commands.ExecResult{
				ExitCode: code, Stdout: stdout, Stderr: stderr,
				StdoutBytes: res.StdoutBytes, StderrBytes: res.StderrBytes,
				StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated,
				DurationMS: float64(time.Since(began).Microseconds()) / 1000,
			},
			data:     execFinish{ExitCode: code, StdoutBytes: res.StdoutBytes, StderrBytes: res.StderrBytes},
			exitCode: &code,
			stdout:   stdout, stderr: stderr,
			outTrunc: res.StdoutTruncated, errTrunc: res.StderrTruncated,
		}, nil
	})
}

type fileData struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
	Mode   uint32 `json:"mode,omitempty"`
}

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func (a *Agent) opRead(ctx context.Context, m *nats.Msg, s *session) {
	var args commands.PathArgs
	req, ok := a.decode(m, &args)
	if !ok {
		return
	}
	a.run(ctx, m, s, req, commands.OpRead, args, func(ctx context.Context) (outcome, error) {
		b, mode, err := s.sandbox().ReadFile(ctx, args.Path, commands.InlineLimit)
		if errcode.Of(err) == errcode.PayloadTooLarge {
			return a.readLarge(ctx, s, args.Path)
		}
		if err != nil {
			return outcome{}, err
		}
		sum := digest(b)
		return outcome{
			result: commands.ReadResult{Content: b, Size: int64(len(b)), Mode: uint32(mode.Perm()), SHA256: sum},
			data:   fileData{Path: args.Path, Size: int64(len(b)), SHA256: sum},
		}, nil
	})
}

// readLarge streams a file over the inline limit into a temporary object
// of the workspace bucket, which the reader fetches and deletes.
func (a *Agent) readLarge(ctx context.Context, s *session, p string) (outcome, error) {
	store, err := a.workspaces(ctx)
	if err != nil {
		return outcome{}, err
	}
	pr, pw := io.Pipe()
	h := sha256.New()
	type read struct {
		n    int64
		mode fs.FileMode
		err  error
	}
	done := make(chan read, 1)
	go func() { // ends when the file is read or the upload stops reading
		n, mode, err := s.sandbox().ReadFileTo(ctx, p, io.MultiWriter(pw, h), commands.MaxFileBytes)
		pw.CloseWithError(err)
		done <- read{n, mode, err}
	}()
	name, err := store.Upload(ctx, s.tenant, uuid.NewString(), pr)
	pr.CloseWithError(err)
	rd := <-done
	if rd.err != nil {
		if name != "" {
			_ = store.Delete(context.WithoutCancel(ctx), name)
		}
		return outcome{}, rd.err
	}
	if err != nil {
		return outcome{}, err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	return outcome{
		result: commands.ReadResult{Size: rd.n, Mode: uint32(rd.mode.Perm()), Download: name, SHA256: sum},
		data:   fileData{Path: p, Size: rd.n, SHA256: sum},
	}, nil
}

func (a *Agent) opWrite(ctx context.Context, m *nats.Msg, s *session) {
	var args commands.WriteArgs
	req, ok := a.decode(m, &args)
	if !ok {
		return
	}
	mode := fs.FileMode(args.Mode)
	if mode == 0 {
		mode = 0o644
	}
	if args.Upload != "" {
		a.writeLarge(ctx, m, s, req, args, mode)
		return
	}
	d := fileData{Path: args.Path, Size: int64(len(args.Content)), SHA256: digest(args.Content), Mode: uint32(mode)}
	a.run(ctx, m, s, req, commands.OpWrite, d, func(ctx context.Context) (outcome, error) {
		if err := s.sandbox().WriteFile(ctx, args.Path, args.Content, mode); err != nil {
			return outcome{}, err
		}
		return outcome{result: commands.WriteResult{Size: d.Size, SHA256: d.SHA256}, data: d}, nil
	})
}

// writeLarge writes a file whose content a client uploaded to the
// workspace bucket: it downloads it to a temporary file (digest checked),
// streams it into the sandbox and deletes the upload.
func (a *Agent) writeLarge(ctx context.Context, m *nats.Msg, s *session, req commands.Request, args commands.WriteArgs, mode fs.FileMode) {
	start := fileData{Path: args.Path, Size: args.Size, Mode: uint32(mode)}
	a.run(ctx, m, s, req, commands.OpWrite, start, func(ctx context.Context) (outcome, error) {
		store, err := a.workspaces(ctx)
		if err != nil {
			return outcome{}, err
		}
		f, err := os.CreateTemp("", "paddock-write-*")
		if err != nil {
			return outcome{}, errcode.Wrap(errcode.Internal, err, "temporary file")
		}
		defer os.Remove(f.Name())
		defer f.Close()
		sum, err := store.FetchObject(ctx, args.Upload, f, nil)
		if errcode.Of(err) == errcode.SnapshotNotFound {
			return outcome{}, errcode.New(errcode.NotFound, "no upload %s", args.Upload)
		}
		if err != nil {
			return outcome{}, err
		}
		fi, err := f.Stat()
		if err != nil {
			return outcome{}, errcode.Wrap(errcode.Internal, err, "temporary file")
		}
		if fi.Size() != args.Size {
			return outcome{}, errcode.New(errcode.InvalidRequest, "the upload holds %d bytes, the write says %d", fi.Size(), args.Size)
		}
		if err := s.sandbox().WriteFileFrom(ctx, args.Path, f, args.Size, mode); err != nil {
			return outcome{}, err
		}
		_ = store.Delete(context.WithoutCancel(ctx), args.Upload)
		d := fileData{Path: args.Path, Size: args.Size, SHA256: sum, Mode: uint32(mode)}
		return outcome{result: commands.WriteResult{Size: d.Size, SHA256: d.SHA256}, data: d}, nil
	})
}

type lsFinish struct {
	Entries int `json:"entries"`
}

func (a *Agent) opLs(ctx context.Context, m *nats.Msg, s *session) {
	var args commands.PathArgs
	req, ok := a.decode(m, &args)
	if !ok {
		return
	}
	a.run(ctx, m, s, req, commands.OpLs, args, func(ctx context.Context) (outcome, error) {
		entries, err := s.sandbox().List(ctx, args.Path)
		if err != nil {
			return outcome{}, err
		}
		if entries == nil {
			entries = []commands.Entry{}
		}
		return outcome{result: commands.LsResult{Entries: entries}, data: lsFinish{Entries: len(entries)}}, nil
	})
}

// fileOp serves an op whose start event records its args and whose reply
// is empty (rm, mkdir).
func fileOp[A any](a *Agent, op commands.Op, do func(ctx context.Context, sb runtime.Sandbox, args A) error) opFunc {
	return func(ctx context.Context, m *nats.Msg, s *session) {
		var args A
		req, ok := a.decode(m, &args)
		if !ok {
			return
		}
		a.run(ctx, m, s, req, op, args, func(ctx context.Context) (outcome, error) {
			if err := do(ctx, s.sandbox(), args); err != nil {
				return outcome{}, err
			}
			return outcome{result: struct{}{}}, nil
		})
	}
}

func (a *Agent) opRunning(ctx context.Context, m *nats.Msg, s *session) {
	var args struct{}
	req, ok := a.decode(m, &args)
	if !ok {
		return
	}
	a.run(ctx, m, s, req, commands.OpRunning, nil, func(ctx context.Context) (outcome, error) {
		running, err := s.sandbox().Running(ctx)
		if err != nil {
			return outcome{}, err
		}
		r := commands.RunningResult{Running: running}
		return outcome{result: r, data: r}, nil
	})
}

// opLifecycle serves start, stop, shutdown and delete.
func (a *Agent) opLifecycle(op commands.Op) opFunc {
	return func(ctx context.Context, m *nats.Msg, s *session) {
		var args struct{}
		req, ok := a.decode(m, &args)
		if !ok {
			return
		}
		a.run(ctx, m, s, req, op, nil, func(ctx context.Context) (outcome, error) {
			sb := s.sandbox()
			var status projection.Status
			var after func()
			switch op {
			case commands.OpStart:
				if s.getStatus() == projection.StatusShutDown {
					return outcome{}, errcode.New(errcode.InvalidState, "session %s is shut down", s.id)
				}
				if err := sb.Start(ctx); err != nil {
					return outcome{}, err
				}
				status = projection.StatusRunning
			case commands.OpStop:
				if s.getStatus() == projection.StatusShutDown {
					return outcome{}, errcode.New(errcode.InvalidState, "session %s is shut down", s.id)
				}
				// Stop persists the workspace first: if that fails the
				// sandbox keeps running and nothing is lost.
				snap, err := a.persist(ctx, s)
				if err != nil {
					return outcome{}, err
				}
				if err := sb.Stop(ctx); err != nil {
					return outcome{}, err
				}
				s.setStatus(projection.StatusStopped)
				r := commands.SnapshotResult{Status: string(projection.StatusStopped), Snapshot: snap}
				return outcome{result: r, data: r}, nil
			case commands.OpShutdown:
				if err := sb.Shutdown(ctx); err != nil {
					return outcome{}, err
				}
				status = projection.StatusShutDown
			case commands.OpDelete:
				if err := sb.Shutdown(ctx); err != nil {
					return outcome{}, err
				}
				status = projection.StatusDeleted
				after = func() { a.forget(s) }
			}
			s.setStatus(status)
			return outcome{result: commands.StatusResult{Status: string(status)}, data: statusData{Status: status}, after: after}, nil
		})
	}
}
