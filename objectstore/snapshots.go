package objectstore

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/snapshot"
	"github.com/paddock-dev/paddock/storage"
)

// Snapshot formats. Snapshots are written as FormatTar unless the store is
// Compressed: on the benchmark's incompressible workspace zstd costs ~35%
// of persist throughput on two cores, while it shrinks source trees many
// fold (docs/benchmarks.md). Both are read.
const (
	FormatTar     = "tar"
	FormatTarZstd = "tar+zstd"
)

// Snapshot describes a stored workspace archive; it is the wire type.
type Snapshot = commands.Snapshot

// FetchTimeout bounds a download whose context has no deadline.
const FetchTimeout = 30 * time.Minute

// ChunkSize is the object store chunk size of snapshots and uploads:
// measured on 100 MiB puts here, 64 KiB ran at ~190 MB/s, 256 KiB at ~375,
// 512 KiB at ~460 and 900 KiB at ~510; 512 KiB keeps a chunk and its
// headers well under the 1 MiB default max payload (docs/benchmarks.md).
const ChunkSize = 512 << 10

// Store keeps workspace snapshots in the object store bucket.
type Store struct {
	obs    jetstream.ObjectStore
	js     jetstream.JetStream
	bucket string
	zstd   bool // write FormatTarZstd instead of FormatTar
	meter  ByteMeter
	limits PutLimits
	// renewAge is ChunkRenewAge unless a test sets it.
	renewAge time.Duration
	// stream is the bucket's stream, opened once for the chunk gets
	// (chunks.go); shared by the store's copies.
	stream *lazyStream
}

// WithLimits returns a store on the same bucket whose puts publish within
// l (the zero value: the defaults).
func (s *Store) WithLimits(l PutLimits) *Store { c := *s; c.limits = l; return &c }

// Compressed returns a store on the same bucket that writes zstd
// snapshots: smaller for compressible workspaces, slower for the rest.
func (s *Store) Compressed() *Store { c := *s; c.zstd = true; return &c }

// Open returns the store on the bucket (DefaultBucket when empty), which
// must exist; it writes plain tar snapshots. It fails with unavailable
// when the bucket cannot be opened.
func Open(ctx context.Context, js jetstream.JetStream, bucket string) (*Store, error) {
	if bucket == "" {
		bucket = DefaultBucket
	}
	obs, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "workspace bucket "+bucket)
	}
	return &Store{obs: obs, js: js, bucket: bucket, stream: &lazyStream{}}, nil
}

// dropFailed deletes what a failed put of name left: nats.go purges the
// chunks it stored, but the object's info, published before the refusal
// came back, may have been stored and would name an object without
// chunks.
func (s *Store) dropFailed(ctx context.Context, name string) {
	// A bound of its own: ctx may be what ran out.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = s.Delete(dctx, name)
}

// putErr is the error of a put of name that failed after reading sent
// bytes: storage_quota_exceeded when the bucket is at its quota or the
// store is full, else unavailable. The bucket's state tells a full bucket
// from a write error of the server (both are the same JetStream code).
func (s *Store) putErr(ctx context.Context, err error, what string, sent int64) error {
	if c := errcode.Of(err); c != "" && c != errcode.Internal {
		return err
	}
	var pe *PublishError
	switch {
	case errors.As(err, &pe) && !storage.StreamRefused(pe.Err) && !storage.StoreFull(pe.Err):
		return errcode.Wrap(errcode.Unavailable, err, fmt.Sprintf("store %s: %s", what, pe.Summary()))
	case storage.StoreFull(err):
		return errcode.Wrap(errcode.StorageQuotaExceeded, err, fmt.Sprintf("the JetStream store is full: %s (%d bytes or more) does not fit; delete snapshots (engine snapshot rm) or give the server more (max_file_store)", what, sent))
	case storage.StreamRefused(err):
		// A bound of its own: ctx may be what ran out.
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		u, ierr := storage.Read(ictx, s.js, StreamName(s.bucket))
		// What failed was purged: the bucket holds what the others hold.
		if ierr == nil && u.MaxBytes > 0 && u.Bytes+uint64(sent)+ChunkSize >= uint64(u.MaxBytes) {
			return errcode.Wrap(errcode.StorageQuotaExceeded, err, fmt.Sprintf("the workspace bucket %s holds %d of its %d-byte quota and %s needs %d bytes or more: delete snapshots (engine snapshot rm) or raise the quota (engine serve --objects-max-bytes)", s.bucket, u.Bytes, u.MaxBytes, what, sent))
		}
	}
	return errcode.Wrap(errcode.Unavailable, err, "store "+what)
}

// Counts is what a writer learns about an archive while streaming it.
type Counts struct {
	Members int
	Bytes   int64
}

// Put streams an archive from r into a new snapshot object; seq is the
// session event seq of the operation that made it; counts is called once r
// is drained and fills in the member counts. A name that
// exists is never overwritten (already_exists).
func (s *Store) Put(ctx context.Context, tenant, session, id string, seq uint64, r io.Reader, counts func() Counts) (Snapshot, error) {
	name, err := SnapshotName(tenant, session, id)
	if err != nil {
		return Snapshot{}, err
	}
	if err := s.checkFree(ctx, tenant, session, id); err != nil {
		return Snapshot{}, err
	}
	// The fingerprint is the sha256 of the tar (what resume compares with
	// a live workspace); the stored digest is that of the stored bytes,
	// which the object store computes itself and checks on every read.
	// A plain tar is its own stored form, so it is hashed once.
	fp := sha256.New()
	pr, pw := io.Pipe()
	go func() { // ends when r is drained or the store stops reading
		if !s.zstd {
			_, err := io.Copy(pw, r)
			pw.CloseWithError(err)
			return
		}
		enc, err := zstd.NewWriter(pw, zstd.WithEncoderLevel(zstd.SpeedFastest))
		if err == nil {
			_, err = io.Copy(enc, io.TeeReader(r, fp))
			if cerr := enc.Close(); err == nil {
				err = cerr
			}
		}
		pw.CloseWithError(err)
	}()
	var snap Snapshot
	res, err := s.putObject(ctx, jetstream.ObjectMeta{Name: name}, pr, func(stored string) map[string]string {
		snap = Snapshot{ID: id, Name: name, SHA256: stored, StoredSHA256: stored, Seq: seq, Format: FormatTar}
		if s.zstd {
			snap.SHA256, snap.Format = hex.EncodeToString(fp.Sum(nil)), FormatTarZstd
		}
		c := counts()
		snap.Members, snap.Bytes = c.Members, c.Bytes
		return map[string]string{
			"sha256": snap.SHA256, "stored_sha256": snap.StoredSHA256, "members": strconv.Itoa(snap.Members),
			"bytes": strconv.FormatInt(snap.Bytes, 10), "format": snap.Format, "seq": strconv.FormatUint(seq, 10),
		}
	})
	pr.CloseWithError(err)
	s.count("in", name, res.sent)
	if err != nil {
		s.dropFailed(ctx, name)
		return Snapshot{}, s.putErr(ctx, err, "snapshot "+name, res.sent)
	}
	snap.Size, snap.Created = int64(res.info.Size), res.info.ModTime
	return snap, nil
}

// Info returns a snapshot's description, whichever its format: a
// manifest snapshot's Size counts the chunks its persist stored. An
// unknown snapshot is snapshot_not_found.
func (s *Store) Info(ctx context.Context, tenant, session, id string) (Snapshot, error) {
	name, err := ManifestName(tenant, session, id)
	if err != nil {
		return Snapshot{}, err
	}
	snap, err := s.info(ctx, id, name)
	if errcode.Of(err) != errcode.SnapshotNotFound {
		return snap, err
	}
	name, _ = SnapshotName(tenant, session, id)
	return s.info(ctx, id, name)
}

func (s *Store) info(ctx context.Context, id, name string) (Snapshot, error) {
	info, err := s.obs.GetInfo(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return Snapshot{}, errcode.New(errcode.SnapshotNotFound, "no snapshot %s", name)
	}
	if err != nil {
		return Snapshot{}, errcode.Wrap(errcode.Unavailable, err, "snapshot "+name)
	}
	return describe(id, info), nil
}

// Fetch downloads a snapshot into f (truncated first) and verifies it
// against its recorded sha256 before returning, so that nothing is
// extracted from an archive that is not the one persisted. A missing
// object is snapshot_not_found, a mismatch snapshot_corrupt. f is left at
// offset 0.
func (s *Store) Fetch(ctx context.Context, tenant, session, id string, f *os.File) (Snapshot, error) {
	return s.FetchTee(ctx, tenant, session, id, f, nil)
}

// FetchTee is Fetch (of a tar snapshot; a manifest snapshot is
// invalid_request) that also writes every downloaded byte to tee (when not
// nil), so that a caller can check the archive while it arrives; f may be
// nil when tee is all the caller needs. An error
// tee returns aborts the download and is returned as it is.
func (s *Store) FetchTee(ctx context.Context, tenant, session, id string, f *os.File, tee io.Writer) (Snapshot, error) {
	snap, err := s.Info(ctx, tenant, session, id)
	if err != nil {
		return snap, err
	}
	if snap.Format == snapshot.Format {
		return snap, errcode.New(errcode.InvalidRequest, "snapshot %s is a manifest: read it with GetManifest and its chunks", snap.Name)
	}
	want := snap.StoredSHA256
	if want == "" && snap.Format == FormatTar {
		want = snap.SHA256 // uncompressed: the stored bytes are the tar
	}
	if _, err := s.fetchSum(ctx, snap.Name, want, f, tee); err != nil {
		return snap, err
	}
	return snap, nil
}

// FetchObject downloads any object of the bucket (an upload) into f (and
// tee, as FetchTee), verifying the store's own digest, and returns the
// content's hex sha256.
func (s *Store) FetchObject(ctx context.Context, name string, f *os.File, tee io.Writer) (string, error) {
	return s.fetchSum(ctx, name, "", f, tee)
}

func (s *Store) fetchSum(ctx context.Context, name, want string, f *os.File, tee io.Writer) (string, error) {
	if f != nil {
		if err := f.Truncate(0); err != nil {
			return "", err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return "", err
		}
	}
	// Without a deadline the object store bounds the whole download by its
	// default request timeout (seconds); a large snapshot needs longer.
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, FetchTimeout)
		defer cancel()
	}
	res, err := s.obs.Get(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return "", errcode.New(errcode.SnapshotNotFound, "no object %s", name)
	}
	if err != nil {
		return "", errcode.Wrap(errcode.Unavailable, err, "open "+name)
	}
	defer res.Close()
	// The object store checks the bytes against its digest when the last
	// chunk is read; that digest must also be the one recorded.
	var w io.Writer
	switch {
	case f == nil && tee == nil:
		w = io.Discard
	case f == nil:
		w = tee
	case tee == nil:
		w = f
	default:
		w = io.MultiWriter(f, tee)
	}
	fetched, err := io.Copy(w, res)
	s.count("out", name, fetched)
	if err != nil {
		if errcode.Of(err) != "" && errcode.Of(err) != errcode.Internal {
			return "", err // the tee's verdict
		}
		if errors.Is(err, jetstream.ErrDigestMismatch) || errors.Is(err, jetstream.ErrObjectNotFound) {
			return "", errcode.Wrap(errcode.SnapshotCorrupt, err, name)
		}
		return "", errcode.Wrap(errcode.Unavailable, err, "read "+name)
	}
	info, err := res.Info()
	if err != nil {
		return "", errcode.Wrap(errcode.Unavailable, err, "info "+name)
	}
	got, err := digestHex(info.Digest)
	if err != nil {
		return "", errcode.Wrap(errcode.SnapshotCorrupt, err, name)
	}
	if want != "" && got != want {
		return "", errcode.New(errcode.SnapshotCorrupt, "%s has sha256 %s, recorded %s", name, got, want)
	}
	if f != nil {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return "", fmt.Errorf("rewind %s: %w", f.Name(), err)
		}
	}
	return got, nil
}

// digestHex turns the object store's digest ("SHA-256=<base64url>") into
// hex.
func digestHex(d string) (string, error) {
	b64, ok := strings.CutPrefix(d, "SHA-256=")
	if !ok {
		return "", fmt.Errorf("digest %q is not SHA-256", d)
	}
	sum, err := base64.URLEncoding.DecodeString(b64)
	if err != nil || len(sum) != sha256.Size {
		return "", fmt.Errorf("digest %q does not decode", d)
	}
	return hex.EncodeToString(sum), nil
}

// zstdMagic and gzipMagic start compressed streams.
var (
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
	gzipMagic = []byte{0x1f, 0x8b}
)

// MaxWindow bounds the memory a zstd stream may ask the decoder for.
const MaxWindow = 64 << 20

// ArchiveReader returns the tar stream of a downloaded archive: f as it is,
// or decompressed when it is zstd or gzip (by its first bytes, whatever the
// recorded format says). A decompression bomb is stopped by the archive
// limits of whoever reads the tar stream; the decoder's memory is bounded.
func ArchiveReader(f *os.File) (io.Reader, func(), error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, nil, err
	}
	return ArchiveStream(f)
}

// ArchiveStream is ArchiveReader for a stream: it tells the format by
// peeking at the first bytes.
func ArchiveStream(r io.Reader) (io.Reader, func(), error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, err := br.Peek(4)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, errcode.Wrap(errcode.InvalidArchive, err, "read archive")
	}
	switch {
	case bytes.HasPrefix(head, zstdMagic):
		d, err := zstd.NewReader(br, zstd.WithDecoderMaxWindow(MaxWindow), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, nil, errcode.Wrap(errcode.InvalidArchive, err, "zstd")
		}
		return d.IOReadCloser(), d.Close, nil
	case bytes.HasPrefix(head, gzipMagic):
		z, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, errcode.Wrap(errcode.InvalidArchive, err, "gzip")
		}
		return z, func() { z.Close() }, nil
	}
	return br, func() {}, nil
}

// UploadPrefix is the part of the bucket a tenant's temporary objects
// (uploads, large reads) live under: uploads/<tenant>/.
func UploadPrefix(tenant string) string { return "uploads/" + tenant + "/" }

// CheckUpload returns permission_denied unless name is one of tenant's
// temporary objects: uploads/<tenant>/<id> with id a plain name. Nothing
// a client writes may name another tenant's upload or any snapshot.
func CheckUpload(tenant, name string) error {
	id, ok := strings.CutPrefix(name, UploadPrefix(tenant))
	if !ok || id == "" || strings.ContainsAny(id, "/\\") || id == "." || id == ".." {
		return errcode.New(errcode.PermissionDenied, "%q is not an upload of tenant %s (want %s<id>)", name, tenant, UploadPrefix(tenant))
	}
	return nil
}

// Upload stores r as a temporary object under uploads/ (for archives and
// large files a client sends) and returns its name.
func (s *Store) Upload(ctx context.Context, tenant, id string, r io.Reader) (string, error) {
	name := UploadPrefix(tenant) + id
	res, err := s.putObject(ctx, jetstream.ObjectMeta{Name: name}, r, nil)
	s.count("in", name, res.sent)
	if err != nil {
		s.dropFailed(ctx, name)
		return "", s.putErr(ctx, err, "upload "+name, res.sent)
	}
	return name, nil
}

// Copy streams an object of the bucket (a download) to w, verifying the
// store's digest at the end.
func (s *Store) Copy(ctx context.Context, name string, w io.Writer) (int64, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, FetchTimeout)
		defer cancel()
	}
	res, err := s.obs.Get(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return 0, errcode.New(errcode.NotFound, "no object %s", name)
	}
	if err != nil {
		return 0, errcode.Wrap(errcode.Unavailable, err, "open "+name)
	}
	defer res.Close()
	n, err := io.Copy(w, res)
	s.count("out", name, n)
	if err != nil {
		return n, errcode.Wrap(errcode.Unavailable, err, "read "+name)
	}
	return n, nil
}

// Delete removes an object (an upload once used, a snapshot); a missing
// one is no error. It frees the space first: a bucket at its quota
// refuses the deletion marker that the object store writes before it
// purges an object's chunks, so the chunks are purged before the marker.
func (s *Store) Delete(ctx context.Context, name string) error {
	info, err := s.obs.GetInfo(ctx, name, jetstream.GetObjectInfoShowDeleted())
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil
	}
	if err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "delete "+name)
	}
	if info.Deleted {
		return nil
	}
	stream, err := s.js.Stream(ctx, StreamName(s.bucket))
	if err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "delete "+name)
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(chunkSubject(s.bucket, info.NUID))); err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "delete "+name)
	}
	if err := s.obs.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return errcode.Wrap(errcode.Unavailable, err, "delete "+name)
	}
	return nil
}

// chunkSubject is the subject of an object's chunks in its bucket's
// stream (nats.go's object store layout: $O.<bucket>.C.<nuid>).
func chunkSubject(bucket, nuid string) string { return "$O." + bucket + ".C." + nuid }

// Snapshots returns the snapshots of both formats whose names start with
// prefix (SnapshotPrefix: a tenant's, or one session's; "" for all), in
// name order; uploads and chunks are not snapshots and are left out.
func (s *Store) Snapshots(ctx context.Context, prefix string) ([]Snapshot, error) {
	infos, err := s.list(ctx)
	if err != nil {
		return nil, err
	}
	var out []Snapshot
	for _, info := range infos {
		_, _, id, ok := ParseSnapshotName(info.Name)
		if !ok || !strings.HasPrefix(info.Name, prefix) {
			continue
		}
		out = append(out, describe(id, info))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// SnapshotPrefix is the name prefix of a tenant's snapshots (session "")
// or of one session's.
func SnapshotPrefix(tenant, session string) string {
	if session == "" {
		return tenant + "/"
	}
	return tenant + "/" + session + "/"
}

// ParseSnapshotName splits a snapshot's object name
// (<tenant>/<session>/<id>.tar or <id>.manifest) into its parts; ok is
// false for any other name (an upload, a chunk).
func ParseSnapshotName(name string) (tenant, session, id string, ok bool) {
	parts := strings.Split(name, "/")
	if len(parts) != 3 || parts[0] == "uploads" {
		return "", "", "", false
	}
	id, ok = strings.CutSuffix(parts[2], tarSuffix)
	if !ok {
		id, ok = strings.CutSuffix(parts[2], manifestSuffix)
	}
	if !ok {
		return "", "", "", false
	}
	if _, err := SnapshotName(parts[0], parts[1], id); err != nil {
		return "", "", "", false
	}
	return parts[0], parts[1], id, true
}

// DeleteSnapshot removes a snapshot of either format and frees its space
// (see Delete; a manifest's chunks go with a retention sweep): a
// session restored from it later fails with snapshot_not_found. An
// unknown snapshot is snapshot_not_found.
func (s *Store) DeleteSnapshot(ctx context.Context, tenant, session, id string) error {
	snap, err := s.Info(ctx, tenant, session, id)
	if err != nil {
		return err
	}
	return s.Delete(ctx, snap.Name)
}
