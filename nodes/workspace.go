package nodes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/projection"
)

// workspaces returns the snapshot store, opening the bucket on first use.
func (a *Agent) workspaces(ctx context.Context) (*objectstore.Store, error) {
	a.mu.Lock()
	st := a.store
	a.mu.Unlock()
	if st != nil {
		return st, nil
	}
	js, err := jetstream.New(a.nc)
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "jetstream")
	}
	st, err = objectstore.Open(ctx, js, a.cfg.WorkspaceBucket)
	if err != nil {
		return nil, err
	}
	if a.cfg.CompressSnapshots {
		st = st.Compressed()
	}
	a.mu.Lock()
	a.store = st
	a.mu.Unlock()
	return st, nil
}

// persist streams the session's workspace into a new snapshot.
func (a *Agent) persist(ctx context.Context, s *session) (*commands.Snapshot, error) {
	store, err := a.workspaces(ctx)
	if err != nil {
		return nil, err
	}
	sb := s.sandbox()
	pr, pw := io.Pipe()
	type exported struct {
		st  archive.Stats
		err error
	}
	done := make(chan exported, 1)
	go func() { // ends when the export ends or the store stops reading
		st, err := sb.ExportWorkspace(ctx, pw, ephemeralSkip(s.ephemeral))
		pw.CloseWithError(err)
		done <- exported{st, err}
	}()
	var ex exported
	got := false
	snap, err := store.Put(ctx, s.tenant, s.id, uuid.NewString(), startSeq(ctx), pr, func() objectstore.Counts {
		ex, got = <-done, true
		return objectstore.Counts{Members: ex.st.Members, Bytes: ex.st.Bytes}
	})
	pr.CloseWithError(err)
	if !got {
		ex = <-done
	}
	if ex.err != nil {
		return nil, ex.err
	}
	if err != nil {
		return nil, err
	}
	s.setSnapshot(&snap)
	return &snap, nil
}

// restore replaces the workspace of sb with a snapshot of the session (or
// an uploaded archive when upload is set): the archive is downloaded to a
// temporary file, verified against its digest, checked whole, and only
// then extracted.
func (a *Agent) restore(ctx context.Context, s *session, sb runtime.Sandbox, snapshotID, upload string) (archive.Stats, error) {
	store, err := a.workspaces(ctx)
	if err != nil {
		return archive.Stats{}, err
	}
	if st, ok := sb.(stager); ok {
		return a.restoreStaged(ctx, s, st, store, snapshotID, upload)
	}
	f, err := os.CreateTemp("", "paddock-hydrate-*.tar")
	if err != nil {
		return archive.Stats{}, errcode.Wrap(errcode.Internal, err, "temporary archive")
	}
	defer os.Remove(f.Name())
	defer f.Close()
	// The archive is checked as it arrives; a bad member aborts the
	// download. Nothing is extracted until it is whole, its digest matches
	// and every member passed.
	lim := a.cfg.ArchiveLimits
	pr, pw := io.Pipe()
	checked := make(chan error, 1)
	go func() { // ends when the download ends (pw closed) or the check fails
		r, done, err := objectstore.ArchiveStream(pr)
		if err == nil {
			_, err = archive.Check(r, lim)
			done()
		}
		if err == nil {
			_, err = io.Copy(io.Discard, pr) // bytes after the archive's end
		}
		pr.CloseWithError(err)
		checked <- err
	}()
	if upload != "" {
		_, err = store.FetchObject(ctx, upload, f, pw)
	} else {
		_, err = store.FetchTee(ctx, s.tenant, s.id, snapshotID, f, pw)
	}
	pw.CloseWithError(err)
	cerr := <-checked
	if err != nil {
		return archive.Stats{}, err
	}
	if cerr != nil {
		return archive.Stats{}, cerr
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return archive.Stats{}, errcode.Wrap(errcode.Internal, err, "rewind archive")
	}
	r, done, err := objectstore.ArchiveReader(f)
	if err != nil {
		return archive.Stats{}, err
	}
	defer done()
	return sb.ImportWorkspace(ctx, r, lim)
}

// stager is a runtime sandbox that can extract an archive beside its
// workspace while the archive arrives and swap it in afterwards (the local
// runtime).
type stager interface {
	StageWorkspace(ctx context.Context, r io.Reader, lim archive.Limits) (archive.Stats, func() error, func(), error)
}

// restoreStaged extracts the archive into the sandbox's staging area as
// it downloads, and swaps it in only once the download is whole, its
// digest matched and every member passed; otherwise the staging area is
// removed and the workspace is as it was.
func (a *Agent) restoreStaged(ctx context.Context, s *session, stg stager, store *objectstore.Store, snapshotID, upload string) (archive.Stats, error) {
	type staged struct {
		st     archive.Stats
		commit func() error
		abort  func()
		err    error
	}
	pr, pw := io.Pipe()
	ch := make(chan staged, 1)
	go func() { // ends when the download ends (pw closed) or staging fails
		var out staged
		r, done, err := objectstore.ArchiveStream(pr)
		if err == nil {
			out.st, out.commit, out.abort, err = stg.StageWorkspace(ctx, r, a.cfg.ArchiveLimits)
			done()
		}
		if err == nil {
			_, err = io.Copy(io.Discard, pr) // bytes after the archive's end
		}
		out.err = err
		pr.CloseWithError(err)
		ch <- out
	}()
	var err error
	if upload != "" {
		_, err = store.FetchObject(ctx, upload, nil, pw)
	} else {
		_, err = store.FetchTee(ctx, s.tenant, s.id, snapshotID, nil, pw)
	}
	pw.CloseWithError(err)
	out := <-ch
	if err != nil || out.err != nil {
		if out.abort != nil {
			out.abort()
		}
		if err != nil {
			return archive.Stats{}, err
		}
		return archive.Stats{}, out.err
	}
	if err := out.commit(); err != nil {
		return archive.Stats{}, err
	}
	return out.st, nil
}

// fingerprint returns the sha256 of the workspace's archive as persist
// would store it.
func fingerprint(ctx context.Context, sb runtime.Sandbox, skip archive.Skip) (string, error) {
	h := sha256.New()
	if _, err := sb.ExportWorkspace(ctx, h, skip); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (a *Agent) opPersist(ctx context.Context, m *nats.Msg, s *session) {
	var args struct{}
	req, ok := a.decode(m, &args)
	if !ok {
		return
	}
	a.run(ctx, m, s, req, commands.OpPersist, nil, func(ctx context.Context) (outcome, error) {
		if st := s.getStatus(); st != projection.StatusRunning && st != projection.StatusStopped {
			return outcome{}, errcode.New(errcode.InvalidState, "session %s is %s", s.id, st)
		}
		snap, err := a.persist(ctx, s)
		if err != nil {
			return outcome{}, err
		}
		r := commands.SnapshotResult{Snapshot: snap}
		return outcome{result: r, data: r}, nil
	})
}

func (a *Agent) opHydrate(ctx context.Context, m *nats.Msg, s *session) {
	var args commands.HydrateArgs
	req, ok := a.decode(m, &args)
	if !ok {
		return
	}
	a.run(ctx, m, s, req, commands.OpHydrate, args, func(ctx context.Context) (outcome, error) {
		if st := s.getStatus(); st != projection.StatusRunning {
			return outcome{}, errcode.New(errcode.InvalidState, "session %s is %s; hydrate needs it running", s.id, st)
		}
		st, err := a.restore(ctx, s, s.sandbox(), args.SnapshotID, args.Upload)
		if err != nil {
			return outcome{}, err
		}
		if args.Upload != "" {
			if store, err := a.workspaces(ctx); err == nil {
				_ = store.Delete(context.WithoutCancel(ctx), args.Upload)
			}
		}
		r := commands.HydrateResult{Members: st.Members, Bytes: st.Bytes}
		return outcome{result: r, data: r}, nil
	})
}

// resumeData is the resume finish event's data: where the session runs
// now and whether its workspace was restored.
type resumeData struct {
	Status     projection.Status `json:"status"`
	Node       string            `json:"node"`
	Epoch      uint64            `json:"epoch"`
	Restored   bool              `json:"restored"`
	SnapshotID string            `json:"snapshot_id,omitempty"`
}

// opResume brings a session this node holds back: a running or stopped
// sandbox is started and, unless its workspace still has the last
// snapshot's fingerprint, restored from it; a shut down one is created
// afresh at the next epoch and restored from the last snapshot.
func (a *Agent) opResume(ctx context.Context, m *nats.Msg, s *session) {
	var args commands.ResumeArgs
	req, ok := a.decode(m, &args)
	if !ok {
		return
	}
	a.run(ctx, m, s, req, commands.OpResume, nil, func(ctx context.Context) (outcome, error) {
		snap := s.snapshot()
		d := resumeData{Status: projection.StatusRunning, Node: a.cfg.ID, Epoch: s.getEpoch()}
		if snap != nil {
			d.SnapshotID = snap.ID
		}
		switch s.getStatus() {
		case projection.StatusRunning, projection.StatusStopped:
			sb := s.sandbox()
			if err := sb.Start(ctx); err != nil {
				return outcome{}, err
			}
			if snap != nil {
				fp, err := fingerprint(ctx, sb, ephemeralSkip(s.ephemeral))
				if err != nil {
					return outcome{}, err
				}
				if fp != snap.SHA256 {
					if _, err := a.restore(ctx, s, sb, snap.ID, ""); err != nil {
						return outcome{}, err
					}
					d.Restored = true
				}
			}
		case projection.StatusShutDown:
			if snap == nil {
				return outcome{}, errcode.New(errcode.InvalidState, "session %s is shut down and has no snapshot to resume from", s.id)
			}
			sb, err := a.recreate(ctx, s, args.SecretEnv)
			if err != nil {
				return outcome{}, err
			}
			if _, err := a.restore(ctx, s, sb, snap.ID, ""); err != nil {
				_ = sb.Shutdown(context.WithoutCancel(ctx))
				return outcome{}, err
			}
			d.Epoch, d.Restored = d.Epoch+1, true
			s.mu.Lock()
			s.sb, s.epoch = sb, d.Epoch
			s.mu.Unlock()
		default:
			return outcome{}, errcode.New(errcode.InvalidState, "session %s is %s", s.id, s.getStatus())
		}
		s.setStatus(projection.StatusRunning)
		r := commands.ResumeResult{Status: string(d.Status), Node: d.Node, Epoch: d.Epoch, Restored: d.Restored, SnapshotID: d.SnapshotID}
		return outcome{result: r, data: d}, nil
	})
}

// recreate makes a fresh sandbox for s at the next epoch, from the spec it
// was created with; secretEnv, when given, replaces the secret values.
func (a *Agent) recreate(ctx context.Context, s *session, secretEnv map[string]string) (runtime.Sandbox, error) {
	rt, ok := a.runtimes[s.runtime]
	if !ok {
		return nil, errcode.New(errcode.NoCapacity, "node %s has no %s runtime", a.cfg.ID, s.runtime)
	}
	s.mu.Lock()
	spec := s.spec
	s.mu.Unlock()
	spec.Epoch++
	if secretEnv != nil {
		env := map[string]string{}
		for k, v := range spec.Env {
			env[k] = v
		}
		for k, v := range secretEnv {
			env[k] = v
		}
		spec.Env = env
	}
	sb, err := rt.Create(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("recreate sandbox: %w", err)
	}
	s.mu.Lock()
	s.spec = spec
	s.mu.Unlock()
	return sb, nil
}
