package nodes

import (
	"context"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/snapshot"
)

// Content-addressed snapshots on the node (issue 25). A persist (persist,
// stop, an idle stop; fork's) writes a manifest snapshot unless the node
// is configured for tar:
//
//	host workspace (local; Docker on loopfs)   other (Docker's own layer)
//	  snapshot.Scan with the session's           ExportWorkspace → FromTar,
//	  hash cache (reads changed files only)      chunks put as they come
//	        │                                            │
//	        └─ chunks the tenant's store lacks → Uploader (parallel);
//	           the previous manifest's chunks are known stored, not asked
//	                          │
//	  root == the last snapshot's root? → record that one again (unchanged)
//	                          │ no
//	                    PutManifest
//
// A restore (hydrate, resume, fork's children) of a manifest snapshot
// takes chunks out of the node's cache or else the store (then cached),
// verified once, and, when the runtime stages on the host
// (runtime.HostStager: local; Docker on a mounted loopfs disk), writes the
// files straight into a host staging directory with snapshot.WriteDir
// (through an os.Root, files in parallel, owned by the sandbox's user),
// then swaps it in; otherwise it writes a tar with snapshot.WriteTar into
// the runtime's staging. Either way: all or nothing, archive limits,
// ownership as for any archive. Tar snapshots are restored as they always
// were.

// uploadParallel and fetchParallel bound the chunk uploads and downloads
// in flight of one persist or restore.
const (
	uploadParallel = 8
	fetchParallel  = 8
	// writeParallel bounds the files a restore into a host directory
	// writes (and fetches) at once.
	writeParallel = 8
)

// persistLimits bound the node's own reading of a workspace it persists
// through a tar export (none: the sandbox's disk bounds it; a restore is
// bounded by Config.ArchiveLimits).
var persistLimits = archive.Limits{MaxArchiveBytes: math.MaxInt64, MaxExtractedBytes: math.MaxInt64, MaxMembers: math.MaxInt32}

// contentState is the node's content-addressed view of a session's
// workspace.
type contentState struct {
	mu sync.Mutex // guards the fields below
	// hashes are the digests of the sandbox's files by inode, size and
	// times (nil until the first scan; dropped when the sandbox is made
	// anew, whose files are others).
	hashes *snapshot.HashCache
	// manifest is the last manifest this node persisted or restored for
	// the session, and root its root digest: every chunk of it was in
	// the tenant's store then.
	manifest *snapshot.Manifest
	root     string

	// track is the dirty tracking of the workspace (dirty.go), with its
	// own lock.
	track trackerSlot
}

// hashCache returns the sandbox's hash cache, made on first use.
func (c *contentState) hashCache() *snapshot.HashCache {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hashes == nil {
		c.hashes = snapshot.NewHashCache()
	}
	return c.hashes
}

// dropHashes forgets the hash cache: the sandbox is made anew.
func (c *contentState) dropHashes() {
	c.mu.Lock()
	c.hashes = nil
	c.mu.Unlock()
	c.track.drop()
}

// last returns the last manifest and its root (nil, "" before one).
func (c *contentState) last() (*snapshot.Manifest, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.manifest, c.root
}

// setLast makes m, whose root is root, the last manifest.
func (c *contentState) setLast(m *snapshot.Manifest, root string) {
	c.mu.Lock()
	c.manifest, c.root = m, root
	c.mu.Unlock()
}

// persisted is what a persist made.
type persisted struct {
	snap *commands.Snapshot
	// unchanged: the workspace was the last snapshot's; snap is that one.
	unchanged bool
	chunks    *events.ChunkCounts
}

// finish returns the finish data of a persist or stop that made p.
func (p persisted) finish(status string) events.SnapshotFinish {
	return events.SnapshotFinish{Status: status, Snapshot: p.snap, Unchanged: p.unchanged, Chunks: p.chunks}
}

// persist stores the session's workspace as a new snapshot (in the
// node's configured format) and returns it; a workspace whose manifest
// root is the last snapshot's returns that snapshot, storing nothing.
func (a *Agent) persist(ctx context.Context, s *session) (*commands.Snapshot, error) {
	p, err := a.persistWorkspace(ctx, s)
	return p.snap, err
}

// persistWorkspace is persist, saying what it did.
func (a *Agent) persistWorkspace(ctx context.Context, s *session) (persisted, error) {
	store, err := a.workspaces(ctx)
	if err != nil {
		return persisted{}, err
	}
	if a.cfg.Snapshots == SnapshotsTar {
		snap, unchanged, err := a.persistTar(ctx, s, store)
		return persisted{snap: snap, unchanged: unchanged}, err
	}
	// The last snapshot vouches for its chunks (and an unchanged
	// workspace is recorded as it) only while it is stored: a kept
	// manifest's chunks are never swept, but once it is removed (engine
	// snapshot rm, retention) its chunks may be, and must be asked about.
	last := s.snapshot()
	if last != nil && !a.stillStored(ctx, store, s, last) {
		last = nil
	}
	var m *snapshot.Manifest
	var counts events.ChunkCounts
	for attempt := 0; ; attempt++ {
		m, counts, err = a.storeChunks(ctx, s, store, last)
		if err == nil {
			break
		}
		// The sandbox changed a file between the scan and the upload of
		// its chunk: once more, from a new scan.
		if attempt == 0 && errcode.Of(err) == errcode.ConcurrencyConflict {
			a.logger.Info("persist: the workspace changed while it was read; reading it again", "tenant", s.tenant, "session", s.id)
			continue
		}
		a.logger.Warn("persist failed", "tenant", s.tenant, "session", s.id, "err", err)
		return persisted{}, err
	}
	root := m.Root()
	if last != nil && last.Format == snapshot.Format && last.RootSHA256 == root {
		s.content.setLast(m, root)
		return persisted{snap: last, unchanged: true, chunks: &counts}, nil
	}
	up := objectstore.ChunkStats{Chunks: counts.Chunks, Uploaded: counts.Uploaded, UploadedBytes: counts.UploadedBytes, Skipped: counts.Skipped}
	snap, err := store.PutManifest(ctx, s.tenant, s.id, uuid.NewString(), startSeq(ctx), m, up)
	if err != nil {
		a.logger.Warn("persist failed: the manifest was not stored", "tenant", s.tenant, "session", s.id, "err", err)
		return persisted{}, err
	}
	s.content.setLast(m, snap.RootSHA256)
	s.setSnapshot(&snap)
	return persisted{snap: &snap, chunks: &counts}, nil
}

// stillStored reports whether the session's last snapshot is still in
// the store; an error other than its absence counts as not (the persist
// then asks the store about every chunk, which is always safe).
func (a *Agent) stillStored(ctx context.Context, store *objectstore.Store, s *session, last *commands.Snapshot) bool {
	_, err := store.Info(ctx, s.tenant, s.id, last.ID)
	if err != nil {
		a.logger.Info("persist: the last snapshot is not in the store; every chunk is checked", "tenant", s.tenant, "session", s.id, "snapshot", last.ID, "err", err)
	}
	return err == nil
}

// hostDir returns the sandbox's workspace as a host directory, when the
// node can reach it there.
func hostDir(sb runtime.Sandbox) (string, bool) {
	if h, ok := sb.(runtime.HostWorkspace); ok {
		return h.HostWorkspaceDir()
	}
	return "", false
}

// storeChunks reads the session's workspace into a manifest and uploads
// the chunks of it that the tenant's store lacks. The last manifest's
// chunks are known to be stored and not asked about, when it is the
// manifest of stored, the session's last snapshot as found still stored
// (nil: every chunk is asked about).
func (a *Agent) storeChunks(ctx context.Context, s *session, store *objectstore.Store, stored *commands.Snapshot) (*snapshot.Manifest, events.ChunkCounts, error) {
	var counts events.ChunkCounts
	var known map[string]int64
	if last, root := s.content.last(); last != nil && stored != nil && stored.Format == snapshot.Format && root == stored.RootSHA256 {
		known = last.ChunkSet()
	}
	sb := s.sandbox()
	skip := ephemeralSkip(s.ephemeral)
	up := store.Uploader(ctx, s.tenant, uploadParallel)
	var m *snapshot.Manifest
	if dir, ok := hostDir(sb); ok {
		sc, err := a.scanWorkspace(ctx, s, dir, skip)
		if err != nil {
			_, _ = up.Wait()
			return nil, counts, err
		}
		m = sc.Manifest
		counts.HashedFiles, counts.HashedBytes = sc.Hashed()
		if err := putScanned(up, sc, known); err != nil {
			return nil, counts, err
		}
	} else {
		var err error
		m, err = manifestOfExport(ctx, sb, skip, func(d string, data []byte) error {
			if _, ok := known[d]; ok {
				return nil
			}
			return up.Put(d, data)
		})
		if err != nil {
			_, _ = up.Wait()
			return nil, counts, err
		}
		counts.HashedFiles, _, counts.HashedBytes = m.Stats()
	}
	st, err := up.Wait()
	if err != nil {
		return nil, counts, err
	}
	counts.Chunks = len(m.ChunkSet())
	counts.Uploaded, counts.UploadedBytes = st.Uploaded, st.UploadedBytes
	// Deduplicated: the workspace's file bytes whose chunks were not
	// written (the store held them, or this snapshot had them twice).
	_, _, total := m.Stats()
	a.cfg.Metrics.Snapshot(st.UploadedBytes, total-st.UploadedRaw)
	counts.Skipped = counts.Chunks - st.Uploaded
	return m, counts, nil
}

// putScanned gives up every chunk of the scan not in known, in order;
// on an error it waits for the uploads in flight and returns it.
func putScanned(up *objectstore.Uploader, sc *snapshot.Scanned, known map[string]int64) error {
	for _, d := range slices.Sorted(mapKeys(sc.Manifest.ChunkSet())) {
		if _, ok := known[d]; ok {
			continue
		}
		data, err := sc.Read(d)
		if err == nil {
			err = up.Put(d, data)
		}
		if err != nil {
			_, _ = up.Wait()
			return err
		}
	}
	return nil
}

func mapKeys[V any](m map[string]V) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// manifestOfExport reads the sandbox's workspace through its tar export
// into a manifest, giving put every chunk.
func manifestOfExport(ctx context.Context, sb runtime.Sandbox, skip archive.Skip, put func(digest string, data []byte) error) (*snapshot.Manifest, error) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { // ends when the export ends or the reader below stops
		_, err := sb.ExportWorkspace(ctx, pw, skip)
		pw.CloseWithError(err)
		done <- err
	}()
	m, err := snapshot.FromTar(ctx, pr, nil, persistLimits, put)
	if err == nil {
		_, err = io.Copy(io.Discard, pr) // the export's end (tar padding)
	}
	if err != nil {
		pr.CloseWithError(err) // the export stops
	}
	if xerr := <-done; err == nil {
		err = xerr
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// liveManifest returns the manifest of the sandbox's workspace as it is
// now (ephemeral paths left out), storing nothing: a scan with the hash
// cache when the node reaches the workspace, else a read of its export.
func (a *Agent) liveManifest(ctx context.Context, s *session, sb runtime.Sandbox) (*snapshot.Manifest, error) {
	skip := ephemeralSkip(s.ephemeral)
	if dir, ok := hostDir(sb); ok {
		sc, err := a.scanWorkspace(ctx, s, dir, skip)
		if err != nil {
			return nil, err
		}
		return sc.Manifest, nil
	}
	return manifestOfExport(ctx, sb, skip, func(string, []byte) error { return nil })
}

// workspaceIs reports whether the sandbox's workspace is still snap: the
// same manifest root for a manifest snapshot, the same tar digest for a
// tar one.
func (a *Agent) workspaceIs(ctx context.Context, s *session, sb runtime.Sandbox, snap *commands.Snapshot) (bool, error) {
	if snap.Format != snapshot.Format {
		fp, err := fingerprint(ctx, sb, ephemeralSkip(s.ephemeral))
		return fp == snap.SHA256, err
	}
	m, err := a.liveManifest(ctx, s, sb)
	if err != nil {
		return false, err
	}
	return m.Root() == snap.RootSHA256, nil
}

// restored is what a restore put in the workspace.
type restored struct {
	st archive.Stats
	// manifest is the snapshot's manifest (nil for a tar snapshot).
	manifest *snapshot.Manifest
	chunks   *events.ChunkCounts
}

// restoreSnapshot replaces the workspace of sb with snapshot snapshotID
// of session owner: s's own, or (a fork's child) another session of s's
// tenant. The tenant is always s's: no request names it, so no snapshot
// of another tenant can be reached. A snapshot that does not exist is
// snapshot_not_found.
func (a *Agent) restoreSnapshot(ctx context.Context, s *session, sb runtime.Sandbox, owner, snapshotID string) (archive.Stats, error) {
	r, err := a.restoreFrom(ctx, s, sb, owner, snapshotID)
	return r.st, err
}

// restoreFrom is restoreSnapshot, saying what it restored.
func (a *Agent) restoreFrom(ctx context.Context, s *session, sb runtime.Sandbox, owner, snapshotID string) (restored, error) {
	if err := commands.CheckToken("session id", owner); err != nil {
		return restored{}, err
	}
	if err := commands.CheckToken("snapshot id", snapshotID); err != nil {
		return restored{}, err
	}
	if owner == s.id && s.memorySnapshot(snapshotID) {
		return restored{}, errcode.New(errcode.InvalidRequest, "snapshot %s is a memory checkpoint, not a workspace: resume brings it back", snapshotID)
	}
	s.content.track.drop() // the workspace is replaced: the next scan is full
	store, err := a.workspaces(ctx)
	if err != nil {
		return restored{}, err
	}
	format := a.knownFormat(s, owner, snapshotID)
	if format == "" {
		info, err := store.Info(ctx, s.tenant, owner, snapshotID)
		if err != nil {
			return restored{}, err
		}
		format = info.Format
	}
	if format != snapshot.Format {
		st, err := a.restoreTar(ctx, s, sb, owner, snapshotID, "")
		return restored{st: st}, err
	}
	m, _, err := store.GetManifest(ctx, s.tenant, owner, snapshotID, a.manifestLimits())
	if err != nil {
		return restored{}, corrupt(err)
	}
	st, counts, err := a.restoreManifest(ctx, s, sb, store, m)
	if err != nil {
		return restored{}, corrupt(err)
	}
	s.content.setLast(m, m.Root())
	return restored{st: st, manifest: m, chunks: &counts}, nil
}

// corrupt returns err, a restore's, as snapshot_corrupt when it is a
// manifest or chunk whose bytes are not the ones recorded (the object
// store says internal: they are not the caller's fault, but they are the
// snapshot's, as a tar's digest mismatch is).
func corrupt(err error) error {
	if errcode.Of(err) == errcode.Internal {
		return errcode.Wrap(errcode.SnapshotCorrupt, err, "restore")
	}
	return err
}

// knownFormat returns the format of a snapshot of the session's own that
// it recorded ("" when unknown: the store is asked).
func (a *Agent) knownFormat(s *session, owner, id string) string {
	if owner != s.id {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sn := range s.snaps {
		if sn.ID == id {
			if sn.Format == snapshot.Format {
				return snapshot.Format
			}
			return objectstore.FormatTar // or tar+zstd: the tar path reads both
		}
	}
	return ""
}

// manifestLimits bound a manifest a restore decodes as the archive limits
// bound the tar it becomes.
func (a *Agent) manifestLimits() snapshot.Limits {
	lim := a.cfg.ArchiveLimits
	d := archive.DefaultLimits()
	if lim.MaxMembers <= 0 {
		lim.MaxMembers = d.MaxMembers
	}
	if lim.MaxExtractedBytes <= 0 {
		lim.MaxExtractedBytes = d.MaxExtractedBytes
	}
	return snapshot.Limits{MaxEntries: lim.MaxMembers, MaxBytes: lim.MaxExtractedBytes}
}

// restoreManifest writes m as a tar into the sandbox's staging, each
// chunk from the node's cache or else the tenant's store (and then
// cached), verified either way.
func (a *Agent) restoreManifest(ctx context.Context, s *session, sb runtime.Sandbox, store *objectstore.Store, m *snapshot.Manifest) (archive.Stats, events.ChunkCounts, error) {
	get, counts := a.chunkSource(s, store, m)
	if !a.tarRestore.Load() {
		if st, kept, done, err := a.restoreKept(ctx, s, sb, m, get); done {
			c := counts()
			c.Kept = kept
			return st, c, err
		}
	}
	if hs, ok := sb.(runtime.HostStager); ok && !a.tarRestore.Load() {
		stg, ok, err := hs.StageHost(ctx)
		if err != nil {
			return archive.Stats{}, counts(), err
		}
		if ok {
			st, err := a.restoreHost(ctx, stg, m, get)
			return st, counts(), err
		}
	}
	st, err := a.restoreArchive(ctx, sb, func(w io.Writer) error {
		_, err := snapshot.WriteTar(ctx, w, m, get, fetchParallel)
		return err
	})
	return st, counts(), err
}

// chunkSource returns a getter of m's chunks, each from the node's cache
// or else the tenant's store (and then cached), verified either way, and
// a func that counts what it got.
func (a *Agent) chunkSource(s *session, store *objectstore.Store, m *snapshot.Manifest) (func(context.Context, string) ([]byte, error), func() events.ChunkCounts) {
	var fetched, cached atomic.Int64
	var fetchedBytes atomic.Int64
	get := func(ctx context.Context, d string) ([]byte, error) {
		if a.chunks != nil {
			if b, ok := a.chunks.Get(s.tenant, d); ok {
				cached.Add(1)
				return b, nil
			}
		}
		b, err := a.flights.get(ctx, s.tenant+"/"+d, func(ctx context.Context) ([]byte, error) { return store.GetChunk(ctx, s.tenant, d) })
		if err != nil {
			return nil, err
		}
		fetched.Add(1)
		fetchedBytes.Add(int64(len(b)))
		if a.chunks != nil {
			// GetChunk verified the bytes: they are not hashed again.
			if err := a.chunks.PutVerified(s.tenant, d, b); err != nil {
				a.logger.Debug("chunk cache: cannot keep a chunk", "err", err)
			}
		}
		return b, nil
	}
	counts := func() events.ChunkCounts {
		return events.ChunkCounts{Chunks: len(m.ChunkSet()), Fetched: int(fetched.Load()), FetchedBytes: fetchedBytes.Load(), Cached: int(cached.Load())}
	}
	return get, counts
}

// restoreHost writes m into the host staging directory stg, every chunk
// from get (which verifies what it returns: the cache's Get and the
// store's GetChunk both do), confined to the directory, owned as the
// runtime's extraction would own it, then swaps it in; on any error the
// staging directory is removed and the workspace is as it was.
func (a *Agent) restoreHost(ctx context.Context, stg runtime.HostStage, m *snapshot.Manifest,
	get func(context.Context, string) ([]byte, error)) (archive.Stats, error) {
	st, err := snapshot.WriteDir(ctx, stg.Root, m, get, snapshot.WriteOptions{
		Parallel: writeParallel, Chown: stg.Chown, UID: stg.UID, GID: stg.GID,
		Verified: true, Limits: a.cfg.ArchiveLimits,
	})
	if err != nil {
		stg.Abort()
		return archive.Stats{}, err
	}
	if err := stg.Commit(); err != nil {
		return archive.Stats{}, err
	}
	return st, nil
}

// changesOf returns what turned the workspace from before into after, as
// a hydrate's finish records it.
func changesOf(before, after *snapshot.Manifest) *commands.Changes {
	c := &commands.Changes{Observed: commands.ObservedExact}
	for _, ch := range snapshot.Diff(before, after) {
		switch ch.Change {
		case "created":
			c.Created++
		case "modified":
			c.Modified++
		case "removed":
			c.Removed++
		}
		if ch.Change != "removed" && ch.Kind == snapshot.KindFile {
			if e, ok := after.Lookup(ch.Path); ok {
				c.BytesWritten += e.Size
			}
		}
		if len(c.Paths) < commands.MaxChangedPaths {
			c.Paths = append(c.Paths, commands.ChangedPath{Path: ch.Path, Change: ch.Change})
		} else {
			c.Truncated = true
		}
	}
	return c
}
