package objectstore_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/snapshot"
	"github.com/paddock-dev/paddock/testenv"
)

func digestOf(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// chunkData returns n distinct chunks of size bytes each, compressible
// (text) when text.
func chunkData(n, size int, seed string, text bool) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		if text {
			line := []byte(fmt.Sprintf("%s line %d of a source file\n", seed, i))
			out[i] = bytes.Repeat(line, size/len(line)+1)[:size]
			continue
		}
		b := make([]byte, size)
		h := sha256.Sum256([]byte(fmt.Sprintf("%s-%d", seed, i)))
		for j := 0; j < size; j += len(h) {
			h = sha256.Sum256(h[:])
			copy(b[j:], h[:])
		}
		out[i] = b
	}
	return out
}

// TestChunkName: a name never reaches outside the tenant's chunks: bad
// tenants (not subject tokens) and digests (not 64 lowercase hex) are
// invalid_request, and ParseChunkName takes back only what ChunkName
// makes.
func TestChunkName(t *testing.T) {
	good := digestOf([]byte("x"))
	name, err := objectstore.ChunkName("acme", good)
	if err != nil || name != "chunks/acme/"+good || !strings.HasPrefix(name, objectstore.ChunkPrefix("acme")) {
		t.Fatalf("ChunkName(acme, %s) = %q, %v", good, name, err)
	}
	if tn, d, ok := objectstore.ParseChunkName(name); !ok || tn != "acme" || d != good {
		t.Fatalf("ParseChunkName(%q) = %q, %q, %v", name, tn, d, ok)
	}
	for _, tc := range []struct{ tenant, digest string }{
		{"a/b", good}, {"..", good}, {"*", good}, {">", good}, {"", good}, {"a.b", good}, {"a b", good},
		{"acme", "../x"}, {"acme", strings.ToUpper(good)}, {"acme", good[:63]}, {"acme", good + "0"},
		{"acme", "../" + good[3:]}, {"acme", ""}, {"acme", strings.Repeat("g", 64)},
	} {
		if n, err := objectstore.ChunkName(tc.tenant, tc.digest); errcode.Of(err) != errcode.InvalidRequest {
			t.Errorf("ChunkName(%q, %q) = %q, %v; want invalid_request", tc.tenant, tc.digest, n, err)
		}
	}
	for _, n := range []string{"chunks/acme/" + good + ".tar", "chunks/a/b/" + good, "acme/s/" + good, "chunks/acme/" + strings.ToUpper(good)} {
		if _, _, ok := objectstore.ParseChunkName(n); ok {
			t.Errorf("ParseChunkName(%q) took it as a chunk", n)
		}
	}
}

// TestChunkUpload: an uploader stores each distinct chunk once (a second
// put through it is no upload), a second uploader skips what is stored,
// and GetChunk returns the plain bytes, from plain and compressed stores.
func TestChunkUpload(t *testing.T) {
	base := newStore(t)
	ctx := testenv.Context(t, 60*time.Second)
	for _, tc := range []struct {
		name       string
		store      *objectstore.Store
		compressed bool
	}{{"plain", base, false}, {"zstd", base.Compressed(), true}} {
		t.Run(tc.name, func(t *testing.T) {
			tenant := "t-" + tc.name
			chunks := chunkData(5, snapshot.ChunkSize, tc.name, true)
			chunks = append(chunks, []byte("short tail"))
			up := tc.store.Uploader(ctx, tenant, 3)
			for _, c := range append(chunks, chunks[0], chunks[1]) {
				if err := up.Put(digestOf(c), c); err != nil {
					t.Fatal(err)
				}
			}
			st, err := up.Wait()
			if err != nil {
				t.Fatal(err)
			}
			if st.Chunks != 6 || st.Uploaded != 6 || st.Skipped != 0 {
				t.Fatalf("stats = %+v, want 6 chunks uploaded", st)
			}
			var plain int64
			for _, c := range chunks {
				plain += int64(len(c))
			}
			if tc.compressed && st.UploadedBytes >= plain/2 {
				t.Fatalf("compressed store stored %d bytes of %d compressible ones", st.UploadedBytes, plain)
			}
			if !tc.compressed && st.UploadedBytes != plain {
				t.Fatalf("plain store stored %d bytes, want %d", st.UploadedBytes, plain)
			}
			for _, c := range chunks {
				got, err := tc.store.GetChunk(ctx, tenant, digestOf(c))
				if err != nil || !bytes.Equal(got, c) {
					t.Fatalf("GetChunk = %d bytes, %v; want the %d put", len(got), err, len(c))
				}
				if ok, err := base.HasChunk(ctx, tenant, digestOf(c)); !ok || err != nil {
					t.Fatalf("HasChunk = %v, %v", ok, err)
				}
			}
			again := tc.store.Uploader(ctx, tenant, 2)
			for _, c := range chunks {
				if err := again.Put(digestOf(c), c); err != nil {
					t.Fatal(err)
				}
			}
			if st, err := again.Wait(); err != nil || st.Skipped != 6 || st.Uploaded != 0 || st.UploadedBytes != 0 {
				t.Fatalf("second upload: %+v, %v; want all 6 skipped", st, err)
			}
			n, stored, err := base.ChunkUsage(ctx, tenant)
			if err != nil || n != 6 || stored <= 0 {
				t.Fatalf("ChunkUsage = %d, %d, %v; want 6 chunks", n, stored, err)
			}
		})
	}
}

// TestChunkTenants: a tenant cannot name another tenant's chunk: A's
// chunk is not B's (HasChunk false, GetChunk not_found), and B storing
// the same bytes stores an object of its own.
func TestChunkTenants(t *testing.T) {
	st := newStore(t)
	ctx := testenv.Context(t, 30*time.Second)
	c := []byte("a secret only tenant A holds")
	d := digestOf(c)
	up := st.Uploader(ctx, "A", 4)
	if err := up.Put(d, c); err != nil {
		t.Fatal(err)
	}
	if _, err := up.Wait(); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.HasChunk(ctx, "B", d); ok || err != nil {
		t.Fatalf("HasChunk(B, A's digest) = %v, %v; want false", ok, err)
	}
	if got, err := st.GetChunk(ctx, "B", d); errcode.Of(err) != errcode.NotFound {
		t.Fatalf("GetChunk(B, A's digest) = %q, %v; want not_found", got, err)
	}
	for _, bad := range []string{"A/../B", "../A", "*", ">"} {
		if _, err := st.GetChunk(ctx, bad, d); errcode.Of(err) != errcode.InvalidRequest {
			t.Fatalf("GetChunk(%q) = %v, want invalid_request", bad, err)
		}
	}
	if _, err := st.GetChunk(ctx, "B", "../A/"+d[5:]); errcode.Of(err) != errcode.InvalidRequest {
		t.Fatalf("GetChunk with a path digest = %v, want invalid_request", err)
	}
	upB := st.Uploader(ctx, "B", 4)
	if err := upB.Put(d, c); err != nil {
		t.Fatal(err)
	}
	if s, err := upB.Wait(); err != nil || s.Uploaded != 1 || s.Skipped != 0 {
		t.Fatalf("B's upload of the same bytes: %+v, %v; want its own object", s, err)
	}
	all, err := st.Chunks(ctx, "")
	if err != nil || len(all) != 2 || all[0].Tenant == all[1].Tenant {
		t.Fatalf("chunks = %+v, %v; want one object per tenant", all, err)
	}
}

// TestChunkBad: an upload whose bytes are not its digest stores nothing
// and fails the uploader; a stored object whose bytes are not its name's
// digest is a corrupt chunk (internal), not data.
func TestChunkBad(t *testing.T) {
	st := newStore(t)
	ctx := testenv.Context(t, 30*time.Second)
	good, evil := []byte("good"), []byte("evil")
	up := st.Uploader(ctx, "t", 2)
	if err := up.Put(digestOf(good), evil); errcode.Of(err) != errcode.Internal {
		t.Fatalf("Put of mismatched bytes = %v, want internal", err)
	}
	if err := up.Put(digestOf(evil), evil); errcode.Of(err) != errcode.Internal {
		t.Fatalf("Put after a failure = %v, want the earlier error", err)
	}
	if _, err := up.Wait(); errcode.Of(err) != errcode.Internal {
		t.Fatalf("Wait = %v, want internal", err)
	}
	if ok, _ := st.HasChunk(ctx, "t", digestOf(good)); ok {
		t.Fatal("a mismatched chunk was stored")
	}
	if err := up.Put("NOTHEX", good); errcode.Of(err) != errcode.InvalidRequest {
		t.Fatalf("Put of a bad digest = %v, want invalid_request", err)
	}
	// Forge: evil bytes under good's name, written around the uploader.
	name, _ := objectstore.ChunkName("t", digestOf(good))
	if _, _, err := st.PutObject(ctx, name, bytes.NewReader(evil)); err != nil {
		t.Fatal(err)
	}
	if got, err := st.GetChunk(ctx, "t", digestOf(good)); errcode.Of(err) != errcode.Internal || !strings.Contains(err.Error(), "corrupt chunk") {
		t.Fatalf("GetChunk of forged bytes = %q, %v; want internal corrupt chunk", got, err)
	}
}

// TestChunkRenew: an upload that skips a chunk older than the renew age
// writes its info again, so its ModTime (what a sweep's grace counts
// from) moves on; a younger one is left as it is.
func TestChunkRenew(t *testing.T) {
	st := newStore(t)
	ctx := testenv.Context(t, 30*time.Second)
	c := []byte("shared chunk")
	put := func(s *objectstore.Store) objectstore.ChunkStats {
		t.Helper()
		up := s.Uploader(ctx, "t", 1)
		if err := up.Put(digestOf(c), c); err != nil {
			t.Fatal(err)
		}
		stats, err := up.Wait()
		if err != nil {
			t.Fatal(err)
		}
		return stats
	}
	modTime := func() time.Time {
		t.Helper()
		cs, err := st.Chunks(ctx, "t")
		if err != nil || len(cs) != 1 {
			t.Fatalf("chunks = %+v, %v", cs, err)
		}
		return cs[0].Modified
	}
	put(st)
	first := modTime()
	if s := put(st); s.Skipped != 1 {
		t.Fatalf("second put: %+v, want skipped", s)
	}
	if got := modTime(); !got.Equal(first) {
		t.Fatalf("a young chunk was renewed: %s, then %s", first, got)
	}
	if s := put(st.WithRenewAge(time.Nanosecond)); s.Skipped != 1 {
		t.Fatalf("third put: %+v, want skipped", s)
	}
	if got := modTime(); !got.After(first) {
		t.Fatalf("an old chunk kept its ModTime %s (was %s), want renewed", got, first)
	}
	if got, err := st.GetChunk(ctx, "t", digestOf(c)); err != nil || !bytes.Equal(got, c) {
		t.Fatalf("renewed chunk reads %q, %v", got, err)
	}
	// DeleteChunk leaves a chunk renewed after the caller's decision.
	if gone, err := st.DeleteChunk(ctx, "t", digestOf(c), first); gone || err != nil {
		t.Fatalf("DeleteChunk of a chunk renewed since = %v, %v; want kept", gone, err)
	}
	if gone, err := st.DeleteChunk(ctx, "t", digestOf(c), time.Now().Add(time.Minute)); !gone || err != nil {
		t.Fatalf("DeleteChunk = %v, %v; want removed", gone, err)
	}
	if ok, _ := st.HasChunk(ctx, "t", digestOf(c)); ok {
		t.Fatal("chunk still there after DeleteChunk")
	}
}

// FuzzChunkName: whatever a caller passes, a chunk name either is
// refused or is exactly chunks/<tenant>/<64 hex>, parses back to the
// same parts and is never a snapshot's name.
func FuzzChunkName(f *testing.F) {
	f.Add("acme", digestOf([]byte("x")))
	f.Add("a/b", "../x")
	f.Add("..", strings.Repeat("A", 64))
	f.Fuzz(func(t *testing.T, tenant, digest string) {
		name, err := objectstore.ChunkName(tenant, digest)
		if err != nil {
			if errcode.Of(err) != errcode.InvalidRequest {
				t.Fatalf("ChunkName(%q, %q) = %v, want invalid_request", tenant, digest, err)
			}
			return
		}
		if strings.Count(name, "/") != 2 || !strings.HasPrefix(name, objectstore.ChunkPrefix(tenant)) || !objectstore.ValidDigest(digest) {
			t.Fatalf("ChunkName(%q, %q) = %q", tenant, digest, name)
		}
		if tn, d, ok := objectstore.ParseChunkName(name); !ok || tn != tenant || d != digest {
			t.Fatalf("ParseChunkName(%q) = %q, %q, %v", name, tn, d, ok)
		}
		if _, _, _, ok := objectstore.ParseSnapshotName(name); ok {
			t.Fatalf("chunk name %q parses as a snapshot", name)
		}
	})
}
