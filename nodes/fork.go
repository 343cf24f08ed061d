package nodes

import (
	"context"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/projection"
)

// Fork, on the node's side (the scheduler draws the children and places
// them; see scheduler/fork.go):
//
//	parent's subject, op fork   → record the fork point in the parent's
//	(the scheduler only)          chain: persist first, or resolve a
//	                              snapshot the chain recorded
//	node's create, with Parent  → record parent in the create start, make
//	                              the sandbox (warm pools as for any
//	                              create), restore the parent's snapshot
//	                              (its root checked against the point)
//	                              before the create finishes; a memory
//	                              checkpoint (Parent.Memory) is restored
//	                              instead, with its processes running

func forkStart(_ *Agent, _ *session, args *commands.ForkArgs) any {
	return events.ForkStart{Children: args.Children, SnapshotID: args.SnapshotID, AtSeq: args.AtSeq}
}

// runFork records a fork of s: with neither a snapshot id nor a seq the
// node persists first (the finish carries that snapshot, whose Seq is the
// fork's start); else the point is a snapshot s's own chain recorded
// (snapshot_not_found otherwise).
func runFork(ctx context.Context, a *Agent, s *session, args *commands.ForkArgs) (outcome, error) {
	if err := requireStatus(s, commands.OpFork, projection.StatusRunning, projection.StatusStopped); err != nil {
		return outcome{}, err
	}
	d := events.ForkFinish{Children: args.Children}
	if args.SnapshotID == "" && args.AtSeq == 0 {
		snap, err := a.persist(ctx, s)
		if err != nil {
			return outcome{}, err
		}
		// The point is this fork's start, whose finish records the
		// snapshot (a workspace unchanged since its last snapshot gets
		// that one again, made at an earlier seq).
		d.Snapshot = snap
		d.Parent = commands.Parent{SessionID: s.id, Seq: startSeq(ctx), Snapshot: snap.ID, RootSHA256: commands.LineageRoot(snap)}
	} else {
		p, err := a.recordedPoint(ctx, s, args.SnapshotID, args.AtSeq)
		if err != nil {
			return outcome{}, err
		}
		d.Parent = p
	}
	return outcome{result: commands.ForkPoint{Parent: d.Parent}, data: d}, nil
}

// recordedPoint finds in s's history the snapshot named id, or the last
// one made at or before seq atSeq (the start seq of the op that recorded
// it, as resume --at picks).
func (a *Agent) recordedPoint(ctx context.Context, s *session, id string, atSeq uint64) (commands.Parent, error) {
	evs, err := a.log.Session(ctx, s.tenant, s.id)
	if err != nil {
		return commands.Parent{}, err
	}
	var found *projection.Recorded
	for _, r := range projection.RecordedSnapshots(evs) {
		switch {
		case id != "" && r.Snapshot.ID == id:
			found = &r
		case id == "" && r.StartSeq <= atSeq:
			found = &r
		}
	}
	if found == nil {
		if id != "" {
			return commands.Parent{}, errcode.New(errcode.SnapshotNotFound, "session %s recorded no snapshot %s", s.id, id)
		}
		return commands.Parent{}, errcode.New(errcode.SnapshotNotFound, "session %s recorded no snapshot at or before seq %d", s.id, atSeq)
	}
	return found.Point(s.id), nil
}

// restoreParent fills a forked child's new sandbox with its parent's
// snapshot: the snapshot's recorded root must be the one the lineage
// names, and so must the root of the manifest restored (else internal
// "lineage mismatch"); the restore checks every chunk against its digest
// (a tar snapshot: the archive against its sha256).
func (a *Agent) restoreParent(ctx context.Context, s *session, sb runtime.Sandbox, p commands.Parent) error {
	store, err := a.workspaces(ctx)
	if err != nil {
		return err
	}
	info, err := store.Info(ctx, s.tenant, p.SessionID, p.Snapshot)
	if err != nil {
		return err
	}
	if got := commands.LineageRoot(&info); got != p.RootSHA256 {
		return errcode.New(errcode.Internal, "lineage mismatch: snapshot %s of session %s has root %s, the fork names %s", p.Snapshot, p.SessionID, got, p.RootSHA256)
	}
	// A restore is all or nothing, so one that met a retryable error (the
	// object store under the load of many children at once) is tried
	// again, a few times.
	var r restored
	for attempt := 0; ; attempt++ {
		r, err = a.restoreFrom(ctx, s, sb, p.SessionID, p.Snapshot)
		if err == nil || !errcode.Of(err).Retryable() || attempt == 2 {
			break
		}
		a.logger.Warn("fork: the child's restore failed; trying again", "tenant", s.tenant, "session", s.id, "attempt", attempt+1, "err", err)
		select {
		case <-time.After(time.Duration(200<<attempt) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err != nil {
		return err
	}
	if r.manifest != nil && r.manifest.Root() != p.RootSHA256 {
		return errcode.New(errcode.Internal, "lineage mismatch: the manifest restored from snapshot %s of session %s has root %s, the fork names %s", p.Snapshot, p.SessionID, r.manifest.Root(), p.RootSHA256)
	}
	return nil
}
