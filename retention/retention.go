// Package retention decides what of the workspace bucket may go, and
// removes it: temporary transfer objects past their time to live, chunks
// of puts that never finished, snapshots of deleted sessions past a
// retention window, and snapshots beyond the last N of a session. It
// never removes a snapshot a session that is not deleted would resume
// from. Events are not its business: the events stream denies deletion.
package retention

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/projection"
)

// Policy says what may go.
type Policy struct {
	// TransferTTL is how long a temporary transfer object (an upload, or
	// a download's staging copy) may stay.
	TransferTTL time.Duration
	// OrphanGrace is how long after its last write a chunk no object
	// names may stay (0: DefaultOrphanGrace): a put under way writes a
	// chunk every few milliseconds, so chunks silent this long are a
	// killed put's. The engine's flags keep it at MinOrphanGrace or more.
	OrphanGrace time.Duration
	// DeletedRetention is how long the snapshots of a deleted session stay
	// after its delete (0: they go at the next sweep).
	DeletedRetention time.Duration
	// KeepLast keeps this many of a session's newest snapshots, besides the
	// one it would resume from (0: keep every one).
	KeepLast int
}

// Defaults of the engine's flags.
const (
	DefaultTransferTTL      = 24 * time.Hour
	DefaultDeletedRetention = 7 * 24 * time.Hour
	DefaultOrphanGrace      = 10 * time.Minute
)

// MinOrphanGrace is the least OrphanGrace the engine's flags accept: a
// put's chunks follow one another in milliseconds, but a loaded node may
// pause a put for seconds.
const MinOrphanGrace = time.Minute

// Validate refuses negative values.
func (p Policy) Validate() error {
	if p.TransferTTL <= 0 || p.DeletedRetention < 0 || p.KeepLast < 0 || p.OrphanGrace < 0 {
		return fmt.Errorf("retention: a transfer TTL above 0, and no negative retention, orphan grace or keep count, please (got %s, %s, %s, %d)", p.TransferTTL, p.DeletedRetention, p.OrphanGrace, p.KeepLast)
	}
	return nil
}

// orphanGrace is p's OrphanGrace, its default when 0.
func (p Policy) orphanGrace() time.Duration {
	if p.OrphanGrace == 0 {
		return DefaultOrphanGrace
	}
	return p.OrphanGrace
}

// Why an object goes.
const (
	ReasonTransferExpired = "transfer_expired" // an upload older than TransferTTL
	ReasonOrphanChunks    = "unfinished_put"   // chunks no object names, silent for OrphanGrace
	ReasonDeletedSession  = "deleted_session"  // a snapshot of a session deleted DeletedRetention ago
	ReasonBeyondKeep      = "beyond_keep_last" // older than the session's KeepLast newest
	// ReasonUnreferencedChunk: see chunks.go.
)

// Removal is one thing a sweep removes (or, dry, would).
type Removal struct {
	// Name is the object's name, or "chunks:<nuid>" for orphan chunks.
	Name   string `json:"name"`
	Reason string `json:"reason"`
	// Size is the object's size, or the orphan chunks' payload.
	Size int64 `json:"size"`
	// Created is when the object, or the first of the chunks, was written.
	Created time.Time `json:"created"`
	nuid    string
	// A chunk's tenant and digest, and the last write before which it
	// may go.
	tenant, digest string
	notBefore      time.Time
}

// Session is what the planner needs of a session's record.
type Session struct {
	Status    projection.Status
	UpdatedAt time.Time // for a deleted session: when it was deleted
	// Current is the snapshot id a resume would restore ("" for none).
	Current string
}

// SessionKey is the key of Plan's sessions map.
func SessionKey(tenant, id string) string { return tenant + "/" + id }

// Plan returns what p lets go of objects at now, given the sessions the
// projection knows (by SessionKey). A snapshot of a session the
// projection does not know is kept: the projection may lag behind a
// create. It is pure: Sweep lists and removes.
func Plan(now time.Time, p Policy, objects []objectstore.Object, sessions map[string]Session) []Removal {
	var out []Removal
	bySession := map[string][]objectstore.Object{}
	for _, o := range objects {
		if strings.HasPrefix(o.Name, "uploads/") {
			if now.Sub(o.Created) >= p.TransferTTL {
				out = append(out, Removal{Name: o.Name, Reason: ReasonTransferExpired, Size: o.Size, Created: o.Created})
			}
			continue
		}
		tenant, session, _, ok := objectstore.ParseSnapshotName(o.Name)
		if !ok {
			continue // not ours to judge
		}
		k := SessionKey(tenant, session)
		bySession[k] = append(bySession[k], o)
	}
	keys := make([]string, 0, len(bySession))
	for k := range bySession {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		snaps := bySession[k]
		s, known := sessions[k]
		if !known {
			continue
		}
		if s.Status == projection.StatusDeleted {
			if now.Sub(s.UpdatedAt) >= p.DeletedRetention {
				for _, o := range snaps {
					out = append(out, Removal{Name: o.Name, Reason: ReasonDeletedSession, Size: o.Size, Created: o.Created})
				}
			}
			continue
		}
		if p.KeepLast <= 0 || len(snaps) <= p.KeepLast {
			continue
		}
		sort.Slice(snaps, func(i, j int) bool { // newest first
			if !snaps[i].Created.Equal(snaps[j].Created) {
				return snaps[i].Created.After(snaps[j].Created)
			}
			return snaps[i].Name > snaps[j].Name
		})
		for _, o := range snaps[p.KeepLast:] {
			if _, _, id, _ := objectstore.ParseSnapshotName(o.Name); id == s.Current {
				continue // what a resume restores stays, however old
			}
			out = append(out, Removal{Name: o.Name, Reason: ReasonBeyondKeep, Size: o.Size, Created: o.Created})
		}
	}
	return out
}

// Sessions are where a sweep reads the sessions' records: all tenants'.
type Sessions func(ctx context.Context) ([]projection.SessionRecord, error)

// Sweep plans with p over the bucket's objects, unfinished puts and
// content chunks and, unless dry, removes what the plan says. It returns
// the plan; on an error it returns what it removed before. Removing what
// is already gone (another engine's sweep) is no error, so engines may
// sweep at once. A tenant with a manifest that cannot be read keeps all
// its chunks, and the sweep says so in its error once it has removed the
// rest.
func Sweep(ctx context.Context, store *objectstore.Store, sessions Sessions, p Policy, dry bool, logger *slog.Logger) ([]Removal, error) {
	return SweepAt(ctx, time.Now(), store, sessions, p, dry, logger)
}

// SweepAt is Sweep as if the time were now.
func SweepAt(ctx context.Context, now time.Time, store *objectstore.Store, sessions Sessions, p Policy, dry bool, logger *slog.Logger) ([]Removal, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	recs, err := sessions(ctx)
	if err != nil {
		return nil, err
	}
	known := make(map[string]Session, len(recs))
	for _, r := range recs {
		s := Session{Status: r.Status, UpdatedAt: r.UpdatedAt}
		if r.LastSnapshot != nil {
			s.Current = r.LastSnapshot.ID
		}
		known[SessionKey(r.Tenant, r.ID)] = s
	}
	objs, err := store.Objects(ctx)
	if err != nil {
		return nil, err
	}
	plan := Plan(now, p, objs, known)
	orphans, err := store.OrphanChunks(ctx, now.Add(-p.orphanGrace()))
	if err != nil {
		return nil, err
	}
	plan = append(plan, orphanRemovals(orphans)...)
	chunks, unread := sweepChunks(ctx, now, store, p, objs, plan)
	if unread != nil && logger != nil {
		logger.Warn("retention: chunks kept", "err", unread)
	}
	// Chunks go last: only once the snapshots that named them are gone.
	removed, err := remove(ctx, store, append(plan, chunks...), dry, logger)
	if err != nil {
		return removed, err
	}
	return removed, unread
}

// SweepOrphans is Sweep of the orphan chunks alone, which the engine runs
// every OrphanGrace so that a killed put's chunks go within two of them
// (20 minutes by default), whatever the interval of the full sweep.
func SweepOrphans(ctx context.Context, store *objectstore.Store, p Policy, dry bool, logger *slog.Logger) ([]Removal, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	orphans, err := store.OrphanChunks(ctx, time.Now().Add(-p.orphanGrace()))
	if err != nil {
		return nil, err
	}
	return remove(ctx, store, orphanRemovals(orphans), dry, logger)
}

func orphanRemovals(orphans []objectstore.Chunks) []Removal {
	out := make([]Removal, 0, len(orphans))
	for _, c := range orphans {
		out = append(out, Removal{Name: "chunks:" + c.NUID, Reason: ReasonOrphanChunks, Size: c.Bytes, Created: c.First, nuid: c.NUID})
	}
	return out
}

// remove removes what plan says unless dry; see Sweep. It returns what
// it removed: a chunk written again since the plan stays and is left out.
func remove(ctx context.Context, store *objectstore.Store, plan []Removal, dry bool, logger *slog.Logger) ([]Removal, error) {
	if dry {
		return plan, nil
	}
	done := make([]Removal, 0, len(plan))
	for _, r := range plan {
		var err error
		gone := true
		switch {
		case r.nuid != "":
			err = store.PurgeChunks(ctx, r.nuid)
		case r.digest != "":
			// Written again since the listing (a persist renewed it): it stays.
			gone, err = store.DeleteChunk(ctx, r.tenant, r.digest, r.notBefore)
		default:
			err = store.Delete(ctx, r.Name)
		}
		if err != nil {
			return done, fmt.Errorf("retention: remove %s: %w", r.Name, err)
		}
		if !gone {
			continue
		}
		done = append(done, r)
		if logger != nil {
			logger.Info("retention: removed", "name", r.Name, "reason", r.Reason, "bytes", r.Size)
		}
	}
	return done, nil
}
