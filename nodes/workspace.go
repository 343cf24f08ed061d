package nodes

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
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
	st = st.Metered(a.cfg.Metrics)
	a.mu.Lock()
	a.store = st
	a.mu.Unlock()
	return st, nil
}

// persistTar streams the session's workspace into a new tar snapshot
// and returns it, and whether the workspace was the last snapshot's.
// While the tar goes up its content is digested (tarContentSum: names,
// types, modes, owners, link targets and bytes, not times); when that is
// the digest of the session's last tar snapshot, still stored, the new
// object is deleted and the last snapshot returned (unchanged), so a stop
// after a persist, or a shutdown after a stop, keeps one snapshot
// (issue 26).
func (a *Agent) persistTar(ctx context.Context, s *session, store *objectstore.Store) (*commands.Snapshot, bool, error) {
	sb := s.sandbox()
	pr, pw := io.Pipe()
	hr, hw := io.Pipe()
	type exported struct {
		st  archive.Stats
		err error
	}
	done := make(chan exported, 1)
	sums := make(chan string, 1)
	go func() { // ends at the end of the export: hw is closed then
		sum, err := tarContentSum(hr)
		if err != nil {
			sum = "" // not a tar we can read: never the same as another
		}
		_, _ = io.Copy(io.Discard, hr)
		sums <- sum
	}()
	go func() { // ends when the export ends or the store stops reading
		st, err := sb.ExportWorkspace(ctx, io.MultiWriter(pw, hw), ephemeralSkip(s.ephemeral))
		pw.CloseWithError(err)
		hw.CloseWithError(err)
		done <- exported{st, err}
	}()
	var ex exported
	got := false
	src := &readFailure{r: pr}
	snap, err := store.Put(ctx, s.tenant, s.id, uuid.NewString(), startSeq(ctx), src, func() objectstore.Counts {
		ex, got = <-done, true
		return objectstore.Counts{Members: ex.st.Members, Bytes: ex.st.Bytes}
	})
	pr.CloseWithError(err)
	if !got {
		ex = <-done
	}
	sum := <-sums
	// Whoever failed first has the cause: the export, when the store met
	// the end of its stream as an error; else the store, and the export
	// failed only because the store stopped reading.
	if err != nil && !src.failed.Load() {
		a.logger.Warn("persist failed: the workspace was not stored", "tenant", s.tenant, "session", s.id, "err", err)
		return nil, false, err
	}
	if ex.err != nil {
		a.logger.Warn("persist failed: the workspace was not read", "tenant", s.tenant, "session", s.id, "err", ex.err)
		return nil, false, ex.err
	}
	if err != nil {
		a.logger.Warn("persist failed", "tenant", s.tenant, "session", s.id, "err", err)
		return nil, false, err
	}
	if last := s.snapshot(); last != nil && sum != "" && s.tarContentOf(last.ID) == sum && a.stillStored(ctx, store, s, last) {
		if err := store.DeleteSnapshot(ctx, s.tenant, s.id, snap.ID); err != nil {
			// Two copies are stored; the persist itself did what it must.
			a.logger.Warn("persist: the unchanged workspace's new copy was not deleted", "tenant", s.tenant, "session", s.id, "snapshot", snap.ID, "err", err)
		} else {
			return last, true, nil
		}
	}
	s.setTarContent(snap.ID, sum)
	s.setSnapshot(&snap)
	return &snap, false, nil
}

// tarContentOf returns the content digest of the session's tar snapshot
// id, when this node stored it ("" otherwise).
func (s *session) tarContentOf(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tarContent.id != id {
		return ""
	}
	return s.tarContent.sum
}

// setTarContent records the content digest of the tar snapshot id.
func (s *session) setTarContent(id, sum string) {
	s.mu.Lock()
	s.tarContent.id, s.tarContent.sum = id, sum
	s.mu.Unlock()
}

// tarContentSum digests what a workspace tar holds, not when: each
// member's name, type, mode, owner, link target, size and bytes, in
// order. Two exports of an unchanged workspace have the same sum though
// their times (a directory's mtime after a file was made in it and
// removed) differ.
func tarContentSum(r io.Reader) (string, error) {
	h := sha256.New()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hex.EncodeToString(h.Sum(nil)), nil
		}
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%q %c %o %d:%d %q %d\n", hdr.Name, hdr.Typeflag, hdr.Mode, hdr.Uid, hdr.Gid, hdr.Linkname, hdr.Size)
		if _, err := io.Copy(h, tr); err != nil {
			return "", err
		}
	}
}

// readFailure remembers whether its reader returned an error (not
// io.EOF). A compressing store may still read it after Put returns, hence
// the atomic.
type readFailure struct {
	r      io.Reader
	failed atomic.Bool
}

func (f *readFailure) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		f.failed.Store(true)
	}
	return n, err
}

// restoreTar replaces the workspace of sb with a tar snapshot of the
// session owner (of s's tenant), or an uploaded archive when upload is
// set (see restoreArchive).
func (a *Agent) restoreTar(ctx context.Context, s *session, sb runtime.Sandbox, owner, snapshotID, upload string) (archive.Stats, error) {
	s.content.track.drop() // the workspace is replaced: the next scan is full
	store, err := a.workspaces(ctx)
	if err != nil {
		return archive.Stats{}, err
	}
	return a.restoreArchive(ctx, sb, func(w io.Writer) error {
		var err error
		if upload != "" {
			_, err = store.FetchObject(ctx, upload, nil, w)
		} else {
			_, err = store.FetchTee(ctx, s.tenant, owner, snapshotID, nil, w)
		}
		return err
	})
}

// restoreArchive replaces the workspace of sb with the archive fill
// writes (a download verified against its digest, or a manifest's tar
// whose every chunk is verified), all or nothing: the archive is extracted
// into the sandbox's staging area as it arrives and swapped in only once
// fill returned and every member passed. A runtime that cannot stage gets
// it through a checked temporary file and ImportWorkspace.
func (a *Agent) restoreArchive(ctx context.Context, sb runtime.Sandbox, fill func(w io.Writer) error) (archive.Stats, error) {
	if st, ok := sb.(stager); ok {
		return a.restoreStaged(ctx, st, fill)
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
	err = fill(io.MultiWriter(f, pw))
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
// workspace while the archive arrives and swap it in afterwards, all or
// nothing (both built-in runtimes). restoreArchive falls back to a checked
// temporary file and ImportWorkspace for a runtime that is not one.
type stager interface {
	StageWorkspace(ctx context.Context, r io.Reader, lim archive.Limits) (archive.Stats, func() error, func(), error)
}

// restoreStaged extracts the archive into the sandbox's staging area as
// fill writes it, and swaps it in only once fill succeeded (a download
// whole with its digest matched) and every member passed; otherwise the
// staging area is removed and the workspace is as it was.
func (a *Agent) restoreStaged(ctx context.Context, stg stager, fill func(w io.Writer) error) (archive.Stats, error) {
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
	err := fill(pw)
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

// fingerprint returns the sha256 of the workspace's archive as persist
// would store it.
func fingerprint(ctx context.Context, sb runtime.Sandbox, skip archive.Skip) (string, error) {
	h := sha256.New()
	if _, err := sb.ExportWorkspace(ctx, h, skip); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func runPersist(ctx context.Context, a *Agent, s *session, _ *none) (outcome, error) {
	if err := requireStatus(s, commands.OpPersist, projection.StatusRunning, projection.StatusStopped); err != nil {
		return outcome{}, err
	}
	p, err := a.persistWorkspace(ctx, s)
	if err != nil {
		return outcome{}, err
	}
	return outcome{result: commands.SnapshotResult{Snapshot: p.snap}, data: p.finish("")}, nil
}

func hydrateStart(_ *Agent, _ *session, args *commands.HydrateArgs) any {
	return events.HydrateStart{SnapshotID: args.SnapshotID, Upload: args.Upload}
}

// runHydrate replaces the workspace with a snapshot or an upload, all or
// nothing (see restoreArchive), and records what that changed.
func runHydrate(ctx context.Context, a *Agent, s *session, args *commands.HydrateArgs) (outcome, error) {
	if err := requireStatus(s, commands.OpHydrate, projection.StatusRunning); err != nil {
		return outcome{}, err
	}
	if args.Upload != "" {
		if err := objectstore.CheckUpload(s.tenant, args.Upload); err != nil {
			return outcome{}, err
		}
	}
	sb := s.sandbox()
	before, berr := a.liveManifest(ctx, s, sb)
	var r restored
	var err error
	if args.Upload != "" {
		r.st, err = a.restoreTar(ctx, s, sb, s.id, "", args.Upload)
	} else {
		r, err = a.restoreFrom(ctx, s, sb, s.id, args.SnapshotID)
	}
	if err != nil {
		return outcome{}, err
	}
	if args.Upload != "" {
		if store, err := a.workspaces(ctx); err == nil {
			_ = store.Delete(context.WithoutCancel(ctx), args.Upload)
		}
	}
	d := events.HydrateFinish{Members: r.st.Members, Bytes: r.st.Bytes, Chunks: r.chunks}
	after, aerr := r.manifest, error(nil)
	if after == nil {
		after, aerr = a.liveManifest(ctx, s, sb)
	}
	if err := errors.Join(berr, aerr); err != nil {
		// The hydrate is done; only its record of what changed is missing.
		a.logger.Warn("hydrate: cannot say what it changed", "tenant", s.tenant, "session", s.id, "err", err)
	} else {
		d.Changes = changesOf(before, after)
	}
	res := commands.HydrateResult{Members: d.Members, Bytes: d.Bytes}
	return outcome{result: res, data: d}, nil
}
