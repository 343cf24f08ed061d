package scheduler

import (
	"context"
	"sort"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/snapshot"
)

func (s *Scheduler) handleDiff(ctx context.Context, m *nats.Msg) {
	var args commands.DiffRequest
	tenant, req, ok := s.decodeTenant(m, &args)
	if !ok {
		return
	}
	ctx, span := s.startSpan(ctx, "diff", tenant, args.SessionID, req)
	res, err := s.Diff(ctx, tenant, args)
	s.respondResult(m, span, res, err)
}

// Diff compares two recorded snapshots of tenant's session (see
// commands.DiffRequest for which): the points are read from the
// workspace bucket's listing of the session, by their Seq; a tar
// snapshot is read as a manifest (snapshot.FromTar), so a diff across
// the change of format works. An unknown, deleted or other tenant's
// session is session_not_found; a session without a snapshot recorded by
// ToSeq is snapshot_not_found; a bad request invalid_request.
func (s *Scheduler) Diff(ctx context.Context, tenant string, r commands.DiffRequest) (commands.DiffResult, error) {
	if err := r.Validate(); err != nil {
		return commands.DiffResult{}, err
	}
	if _, err := s.session(ctx, tenant, r.SessionID); err != nil {
		return commands.DiffResult{}, err
	}
	store, err := s.workspaceStore(ctx)
	if err != nil {
		return commands.DiffResult{}, err
	}
	snaps, err := store.Snapshots(ctx, objectstore.SnapshotPrefix(tenant, r.SessionID))
	if err != nil {
		return commands.DiffResult{}, err
	}
	from, to, err := DiffPoints(snaps, r.FromSeq, r.ToSeq)
	if err != nil {
		return commands.DiffResult{}, errcode.Wrap(errcode.SnapshotNotFound, err, "session "+r.SessionID)
	}
	res := commands.DiffResult{To: to, From: from}
	toM, _, err := store.ManifestOf(ctx, tenant, r.SessionID, to.ID, snapshot.Limits{}, archive.Limits{})
	if err != nil {
		return commands.DiffResult{}, err
	}
	var fromM *snapshot.Manifest
	if from != nil {
		if fromM, _, err = store.ManifestOf(ctx, tenant, r.SessionID, from.ID, snapshot.Limits{}, archive.Limits{}); err != nil {
			return commands.DiffResult{}, err
		}
	}
	limit := r.Limit
	if limit == 0 {
		limit = commands.DefaultDiffLimit
	}
	changes := snapshot.Diff(fromM, toM)
	res.Changes = make([]commands.DiffEntry, 0, min(len(changes), limit))
	for _, c := range changes {
		switch c.Change {
		case "created":
			res.Created++
		case "modified":
			res.Modified++
		case "removed":
			res.Removed++
		}
		if len(res.Changes) < limit {
			res.Changes = append(res.Changes, commands.DiffEntry{Path: c.Path, Kind: string(c.Kind), Change: c.Change})
		}
	}
	res.Truncated = len(changes) > limit
	return res, nil
}

// DiffPoints picks the two snapshots a diff compares from a session's
// snapshots (any order): to is the newest (toSeq 0) or the last recorded
// at or before toSeq; from is the one before to (fromSeq 0) or the last
// recorded at or before fromSeq, nil when there is none (an empty
// workspace). No to is snapshot_not_found. Snapshots recorded at one seq
// are ordered by when they were stored.
func DiffPoints(snaps []objectstore.Snapshot, fromSeq, toSeq uint64) (from, to *commands.Snapshot, err error) {
	ordered := append([]objectstore.Snapshot(nil), snaps...)
	sort.SliceStable(ordered, func(i, j int) bool {
		a, b := ordered[i], ordered[j]
		if a.Seq != b.Seq {
			return a.Seq < b.Seq
		}
		if !a.Created.Equal(b.Created) {
			return a.Created.Before(b.Created)
		}
		return a.Name < b.Name
	})
	// last returns the index of the last snapshot at or before seq (0:
	// the newest), -1 for none.
	last := func(seq uint64) int {
		i := len(ordered) - 1
		for seq != 0 && i >= 0 && ordered[i].Seq > seq {
			i--
		}
		return i
	}
	ti := last(toSeq)
	if ti < 0 {
		if toSeq == 0 {
			return nil, nil, errcode.New(errcode.SnapshotNotFound, "no snapshot is recorded")
		}
		return nil, nil, errcode.New(errcode.SnapshotNotFound, "no snapshot is recorded at or before seq %d", toSeq)
	}
	fi := ti - 1
	if fromSeq != 0 {
		fi = min(last(fromSeq), ti)
	}
	to = &ordered[ti]
	if fi >= 0 {
		from = &ordered[fi]
	}
	return from, to, nil
}

// workspaceStore opens the workspace bucket on the first diff and keeps
// it: unavailable until the bucket exists.
func (s *Scheduler) workspaceStore(ctx context.Context) (*objectstore.Store, error) {
	s.mu.Lock()
	st := s.workspaces
	s.mu.Unlock()
	if st != nil {
		return st, nil
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "jetstream")
	}
	st, err = objectstore.Open(ctx, js, "")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.workspaces == nil {
		s.workspaces = st
	}
	return s.workspaces, nil
}
