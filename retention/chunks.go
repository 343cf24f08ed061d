package retention

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/snapshot"
)

// ReasonUnreferencedChunk is why a content chunk goes: no manifest the
// sweep keeps names it, and it was last written OrphanGrace ago.
const ReasonUnreferencedChunk = "unreferenced_chunk"

// Chunks of manifest snapshots are shared by every snapshot of a tenant
// (and by forks), so a chunk goes only when no manifest a sweep keeps
// names it: the sweep reads every manifest of the tenant that its own
// plan does not remove. A chunk is also kept until OrphanGrace after its
// last write, because a persist uploads its chunks before it writes the
// manifest that names them; an upload that skips a chunk already stored
// renews it (objectstore.ChunkRenewAge), and the removal checks that the
// chunk was not written again since the sweep listed it
// (objectstore.Store.DeleteChunk). A manifest the sweep cannot read keeps
// every chunk of its tenant: what it names is not known.

// TenantChunks are what a sweep knows of one tenant's chunk references.
type TenantChunks struct {
	// Referenced are the digests the kept manifests name.
	Referenced map[string]bool
	// Unreadable, when set, is why a kept manifest could not be read: no
	// chunk of the tenant goes.
	Unreadable error
}

// PlanChunks returns the chunks p lets go at now: those no kept manifest
// of their tenant references (refs, by tenant) and whose last write is
// OrphanGrace old. A tenant missing from refs keeps every chunk (its
// references are not known). It is pure.
func PlanChunks(now time.Time, p Policy, chunks []objectstore.ChunkObject, refs map[string]TenantChunks) []Removal {
	var out []Removal
	before := now.Add(-p.orphanGrace())
	for _, c := range chunks {
		r, ok := refs[c.Tenant]
		if !ok || r.Unreadable != nil || r.Referenced[c.Digest] || !c.Modified.Before(before) {
			continue
		}
		name, _ := objectstore.ChunkName(c.Tenant, c.Digest)
		out = append(out, Removal{Name: name, Reason: ReasonUnreferencedChunk, Size: c.Size, Created: c.Modified,
			tenant: c.Tenant, digest: c.Digest, notBefore: before})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// chunkRefs reads the references of every tenant that has chunks: the
// chunks of each manifest snapshot of objects that plan does not remove.
// A manifest that cannot be read marks its tenant Unreadable.
func chunkRefs(ctx context.Context, store *objectstore.Store, objects []objectstore.Object, chunks []objectstore.ChunkObject, plan []Removal) (map[string]TenantChunks, error) {
	refs := map[string]TenantChunks{}
	for _, c := range chunks {
		refs[c.Tenant] = TenantChunks{Referenced: map[string]bool{}}
	}
	removed := make(map[string]bool, len(plan))
	for _, r := range plan {
		removed[r.Name] = true
	}
	for _, o := range objects {
		tenant, session, id, ok := objectstore.ParseSnapshotName(o.Name)
		if !ok || !strings.HasSuffix(o.Name, objectstore.ManifestSuffix) || removed[o.Name] {
			continue
		}
		r, ok := refs[tenant]
		if !ok || r.Unreadable != nil {
			continue // no chunks to judge, or judged already
		}
		m, _, err := store.GetManifest(ctx, tenant, session, id, snapshot.Limits{})
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			r.Unreadable = fmt.Errorf("read manifest %s: %w", o.Name, err)
			refs[tenant] = r
			continue
		}
		for d := range m.ChunkSet() {
			r.Referenced[d] = true
		}
	}
	return refs, nil
}

// sweepChunks plans the chunk removals of a sweep at now whose plan is
// plan (see PlanChunks); the error names every tenant whose chunks all
// stay because a manifest could not be read.
func sweepChunks(ctx context.Context, now time.Time, store *objectstore.Store, p Policy, objects []objectstore.Object, plan []Removal) ([]Removal, error) {
	// The sweep's listing holds the chunks too: their info's ModTime is
	// the object's Created.
	var chunks []objectstore.ChunkObject
	for _, o := range objects {
		if t, d, ok := objectstore.ParseChunkName(o.Name); ok {
			chunks = append(chunks, objectstore.ChunkObject{Tenant: t, Digest: d, Size: o.Size, Modified: o.Created})
		}
	}
	if len(chunks) == 0 {
		return nil, nil
	}
	refs, err := chunkRefs(ctx, store, objects, chunks, plan)
	if err != nil {
		return nil, err
	}
	var errs []error
	tenants := make([]string, 0, len(refs))
	for t := range refs {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants)
	for _, t := range tenants {
		if e := refs[t].Unreadable; e != nil {
			errs = append(errs, fmt.Errorf("retention: every chunk of tenant %s kept: %w", t, e))
		}
	}
	return PlanChunks(now, p, chunks, refs), errors.Join(errs...)
}
