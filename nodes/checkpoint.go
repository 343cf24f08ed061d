package nodes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/snapshot"
)

// Memory checkpoints (issue 27), on the node:
//
//	checkpoint  runtime.CheckpointOf into a node-owned directory (the
//	            runtime's files: the image of the processes and their
//	            memory, the workspace's tar, their record)
//	            → snapshot.Scan of the directory, chunks the store lacks
//	              uploaded, PutManifest: a manifest snapshot like any
//	            → finish: the snapshot, Kind memory, the files' digests
//	            → without leave_running: teardown to stopped, as stop
//	resume      last snapshot a memory one, sandbox not running here
//	(restore)   → the old sandbox (if any) shut down; the manifest
//	              fetched (root checked against the chain's, every chunk
//	              verified) into a node-owned directory
//	            → the runtime's record checked against the chain's digests
//	            → runtime.RestoreWith at the next epoch: processes running
//
// Only a runtime that is a runtime.Restorer (runsc) can make or restore
// one; a session's runtime is fixed at its create, and the scheduler
// places its resume only on a node that has it.

func checkpointStart(_ *Agent, _ *session, args *commands.CheckpointArgs) any {
	return events.CheckpointStart{LeaveRunning: args.LeaveRunning}
}

// runCheckpoint writes the sandbox's processes, memory and workspace into
// a memory snapshot. A runtime that cannot is policy_denied; a sandbox
// with a command in flight invalid_state (the runtime's answers).
func runCheckpoint(ctx context.Context, a *Agent, s *session, args *commands.CheckpointArgs) (outcome, error) {
	if err := requireStatus(s, commands.OpCheckpoint, projection.StatusRunning); err != nil {
		return outcome{}, err
	}
	store, err := a.workspaces(ctx)
	if err != nil {
		return outcome{}, err
	}
	dir, err := os.MkdirTemp(a.cfg.CheckpointDir, "paddock-ckpt-")
	if err != nil {
		return outcome{}, errcode.Wrap(errcode.RuntimeError, err, "checkpoint: make a directory")
	}
	defer os.RemoveAll(dir)
	info, err := runtime.CheckpointOf(ctx, s.runtime, s.sandbox(), dir, args.LeaveRunning)
	if err != nil {
		return outcome{}, err
	}
	snap, counts, err := a.storeCheckpoint(ctx, s, store, dir, info)
	if err != nil {
		if !args.LeaveRunning {
			// The checkpoint stopped the sandbox; its processes are not
			// stored: say so, never leave it unsaid.
			err = fmt.Errorf("the checkpoint stopped the sandbox's processes but could not be stored; they have ended: %w", err)
		}
		return outcome{}, err
	}
	s.setSnapshot(snap)
	st := projection.StatusRunning
	if !args.LeaveRunning {
		st = projection.StatusStopped
		if err := a.teardown(ctx, s, ending{why: "checkpointed", proc: ProcStopped, sandbox: stopSandbox, status: st}); err != nil {
			return outcome{}, err
		}
	}
	fin := events.SnapshotFinish{Status: string(st), Snapshot: snap, Chunks: &counts}
	return outcome{result: commands.SnapshotResult{Status: fin.Status, Snapshot: snap}, data: fin}, nil
}

// storeCheckpoint stores the checkpoint directory dir as a manifest
// snapshot of the session marked memory, with info's digests.
func (a *Agent) storeCheckpoint(ctx context.Context, s *session, store *objectstore.Store, dir string, info runtime.CheckpointInfo) (*commands.Snapshot, events.ChunkCounts, error) {
	var counts events.ChunkCounts
	sc, err := snapshot.Scan(ctx, dir, nil, snapshot.NewHashCache())
	if err != nil {
		return nil, counts, err
	}
	m := sc.Manifest
	counts.HashedFiles, counts.HashedBytes = sc.Hashed()
	up := store.Uploader(ctx, s.tenant, uploadParallel)
	if err := putScanned(up, sc, nil); err != nil {
		return nil, counts, err
	}
	ust, err := up.Wait()
	if err != nil {
		return nil, counts, err
	}
	counts.Chunks, counts.Uploaded, counts.UploadedBytes = len(m.ChunkSet()), ust.Uploaded, ust.UploadedBytes
	counts.Skipped = counts.Chunks - ust.Uploaded
	stats := objectstore.ChunkStats{Chunks: counts.Chunks, Uploaded: counts.Uploaded, UploadedBytes: counts.UploadedBytes, Skipped: counts.Skipped}
	snap, err := store.PutManifest(ctx, s.tenant, s.id, uuid.NewString(), startSeq(ctx), m, stats)
	if err != nil {
		return nil, counts, err
	}
	snap.Kind = commands.SnapshotMemory
	snap.Memory = &commands.MemoryImage{Runtime: s.runtime, ImageSHA256: info.ImageDigest, ImageBytes: info.ImageBytes,
		WorkspaceSHA256: info.WorkspaceDigest, WorkspaceBytes: info.WorkspaceBytes}
	return &snap, counts, nil
}

// memoryPoint names a memory checkpoint: snapshot id of session owner
// (the session's own, or a fork parent's of its tenant), its manifest
// root and its files' digests as the chain recorded them.
type memoryPoint struct {
	owner, id, root string
	memory          *commands.MemoryImage
}

// pointOf is the memory point of s's own snapshot snap.
func pointOf(s *session, snap *commands.Snapshot) memoryPoint {
	return memoryPoint{owner: s.id, id: snap.ID, root: snap.RootSHA256, memory: snap.Memory}
}

// resumeMemory brings s's memory checkpoint snap back as a new sandbox of
// s at the next epoch (the caller records the epoch and serves it).
func (a *Agent) resumeMemory(ctx context.Context, s *session, snap *commands.Snapshot) (runtime.Sandbox, *events.ChunkCounts, error) {
	rt, ok := a.runtimes[s.runtime]
	if !ok {
		return nil, nil, errcode.New(errcode.NoCapacity, "node %s has no %s runtime", a.cfg.ID, s.runtime)
	}
	s.mu.Lock()
	spec := s.spec
	s.mu.Unlock()
	spec.Epoch++
	spec.Node = a.cfg.ID
	sb, counts, err := a.restoreMemory(ctx, s, rt, pointOf(s, snap), spec)
	if err != nil {
		return nil, counts, err
	}
	s.mu.Lock()
	s.spec = spec
	s.mu.Unlock()
	return sb, counts, nil
}

// restoreMemory restores the memory checkpoint pt as a new sandbox of rt
// named by spec. The manifest's root must be pt's and every chunk is
// verified (snapshot_corrupt otherwise); the runtime's record of the
// files must name pt's digests (snapshot_corrupt), and the runtime checks
// the files against it before anything runs. A runtime that cannot
// restore is policy_denied.
func (a *Agent) restoreMemory(ctx context.Context, s *session, rt runtime.Runtime, pt memoryPoint, spec runtime.Spec) (runtime.Sandbox, *events.ChunkCounts, error) {
	if _, ok := rt.(runtime.Restorer); !ok {
		return nil, nil, runtime.ErrNoCheckpoint(rt.Name())
	}
	if err := commands.CheckToken("session id", pt.owner); err != nil {
		return nil, nil, err
	}
	store, err := a.workspaces(ctx)
	if err != nil {
		return nil, nil, err
	}
	m, _, err := store.GetManifest(ctx, s.tenant, pt.owner, pt.id, a.manifestLimits())
	if err != nil {
		return nil, nil, corrupt(err)
	}
	if m.Root() != pt.root {
		return nil, nil, errcode.New(errcode.SnapshotCorrupt, "memory checkpoint %s: the stored manifest's root is %s, the chain records %s", pt.id, m.Root(), pt.root)
	}
	dir, err := os.MkdirTemp(a.cfg.CheckpointDir, "paddock-restore-")
	if err != nil {
		return nil, nil, errcode.Wrap(errcode.RuntimeError, err, "restore: make a directory")
	}
	defer os.RemoveAll(dir)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, errcode.Wrap(errcode.RuntimeError, err, "restore: open the directory")
	}
	get, counts := a.chunkSource(s, store, m)
	_, err = snapshot.WriteDir(ctx, root, m, get, snapshot.WriteOptions{Parallel: writeParallel, Verified: true, Limits: a.cfg.ArchiveLimits})
	root.Close()
	if err != nil {
		return nil, nil, corrupt(err)
	}
	c := counts()
	if err := checkRecorded(rt, filepath.Clean(dir), pt); err != nil {
		return nil, &c, err
	}
	sb, err := runtime.RestoreWith(ctx, rt, spec, dir)
	if err != nil {
		return nil, &c, fmt.Errorf("restore the memory checkpoint: %w", err)
	}
	return sb, &c, nil
}

// checkRecorded compares what the runtime's record in dir says of its
// files with the digests the chain recorded for pt: snapshot_corrupt
// when they differ (a runtime that cannot say is trusted to check its own
// record, as runsc's Restore does).
func checkRecorded(rt runtime.Runtime, dir string, pt memoryPoint) error {
	in, ok := rt.(runtime.CheckpointInspector)
	if !ok || pt.memory == nil {
		return nil
	}
	info, err := in.InspectCheckpoint(dir)
	if err != nil {
		return errcode.Wrap(errcode.SnapshotCorrupt, err, "memory checkpoint "+pt.id)
	}
	if info.ImageDigest != pt.memory.ImageSHA256 || info.WorkspaceDigest != pt.memory.WorkspaceSHA256 {
		return errcode.New(errcode.SnapshotCorrupt, "memory checkpoint %s records image %s and workspace %s; the chain records %s and %s; refused",
			pt.id, info.ImageDigest, info.WorkspaceDigest, pt.memory.ImageSHA256, pt.memory.WorkspaceSHA256)
	}
	return nil
}

// memorySnapshot reports whether id is a memory checkpoint the session
// recorded.
func (s *session) memorySnapshot(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.snaps {
		if s.snaps[i].ID == id {
			return s.snaps[i].IsMemory()
		}
	}
	return false
}
