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
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
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

// fullReader fills every read completely (but at the end), so that the
// object store sends full chunks however small the writes behind r are:
// fewer, larger messages, and fewer acknowledgements outstanding.
type fullReader struct{ r io.Reader }

func (f fullReader) Read(p []byte) (int, error) {
	n, err := io.ReadFull(f.r, p)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	return n, err
}

// Store keeps workspace snapshots in the object store bucket.
type Store struct {
	obs  jetstream.ObjectStore
	zstd bool // write FormatTarZstd instead of FormatTar
}

// NewStore returns a store on obs (see Ensure) that writes plain tar
// snapshots.
func NewStore(obs jetstream.ObjectStore) *Store { return &Store{obs: obs} }

// Compressed returns a store on the same bucket that writes zstd
// snapshots: smaller for compressible workspaces, slower for the rest.
func (s *Store) Compressed() *Store { return &Store{obs: s.obs, zstd: true} }

// Open returns the store on the bucket, which must exist.
func Open(ctx context.Context, js jetstream.JetStream, bucket string) (*Store, error) {
	if bucket == "" {
		bucket = DefaultBucket
	}
	obs, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "workspace bucket "+bucket)
	}
	return NewStore(obs), nil
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
	if _, err := s.obs.GetInfo(ctx, name, jetstream.GetObjectInfoShowDeleted()); err == nil {
		return Snapshot{}, errcode.New(errcode.AlreadyExists, "snapshot %s already exists", name)
	} else if !errors.Is(err, jetstream.ErrObjectNotFound) {
		return Snapshot{}, errcode.Wrap(errcode.Unavailable, err, "snapshot "+name)
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
	info, err := s.obs.Put(ctx, jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: ChunkSize}}, fullReader{pr})
	pr.CloseWithError(err)
	if err != nil {
		if errcode.Of(err) != "" && errcode.Of(err) != errcode.Internal {
			return Snapshot{}, err
		}
		return Snapshot{}, errcode.Wrap(errcode.Unavailable, err, "store snapshot "+name)
	}
	stored, err := digestHex(info.Digest)
	if err != nil {
		return Snapshot{}, errcode.Wrap(errcode.Internal, err, "snapshot digest")
	}
	tarSum := stored
	if s.zstd {
		tarSum = hex.EncodeToString(fp.Sum(nil))
	}
	c := counts()
	snap := Snapshot{
		ID: id, Name: name, SHA256: tarSum, StoredSHA256: stored, Seq: seq,
		Size: int64(info.Size), Members: c.Members, Bytes: c.Bytes, Format: FormatTarZstd, Created: info.ModTime.UTC(),
	}
	if !s.zstd {
		snap.Format = FormatTar
	}
	meta := jetstream.ObjectMeta{Name: name, Metadata: map[string]string{
		"sha256": snap.SHA256, "stored_sha256": snap.StoredSHA256, "members": strconv.Itoa(snap.Members),
		"bytes": strconv.FormatInt(snap.Bytes, 10), "format": snap.Format, "seq": strconv.FormatUint(seq, 10),
	}}
	if err := s.obs.UpdateMeta(ctx, name, meta); err != nil {
		return Snapshot{}, errcode.Wrap(errcode.Unavailable, err, "record snapshot metadata "+name)
	}
	return snap, nil
}

// Info returns a snapshot's description.
func (s *Store) Info(ctx context.Context, tenant, session, id string) (Snapshot, error) {
	name, err := SnapshotName(tenant, session, id)
	if err != nil {
		return Snapshot{}, err
	}
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
	m := info.Metadata
	members, _ := strconv.Atoi(m["members"])
	bytes, _ := strconv.ParseInt(m["bytes"], 10, 64)
	seq, _ := strconv.ParseUint(m["seq"], 10, 64)
	return Snapshot{
		ID: id, Name: name, SHA256: m["sha256"], StoredSHA256: m["stored_sha256"], Size: int64(info.Size),
		Members: members, Bytes: bytes, Format: m["format"], Seq: seq, Created: info.ModTime.UTC(),
	}, nil
}

// Fetch downloads a snapshot into f (truncated first) and verifies it
// against its recorded sha256 before returning, so that nothing is
// extracted from an archive that is not the one persisted. A missing
// object is snapshot_not_found, a mismatch snapshot_corrupt. f is left at
// offset 0.
func (s *Store) Fetch(ctx context.Context, tenant, session, id string, f *os.File) (Snapshot, error) {
	return s.FetchTee(ctx, tenant, session, id, f, nil)
}

// FetchTee is Fetch that also writes every downloaded byte to tee (when not
// nil), so that a caller can check the archive while it arrives; f may be
// nil when tee is all the caller needs. An error
// tee returns aborts the download and is returned as it is.
func (s *Store) FetchTee(ctx context.Context, tenant, session, id string, f *os.File, tee io.Writer) (Snapshot, error) {
	snap, err := s.Info(ctx, tenant, session, id)
	if err != nil {
		return snap, err
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
	if _, err := io.Copy(w, res); err != nil {
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
	if _, err := s.obs.Put(ctx, jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: ChunkSize}}, fullReader{r}); err != nil {
		return "", errcode.Wrap(errcode.Unavailable, err, "upload")
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
	if err != nil {
		return n, errcode.Wrap(errcode.Unavailable, err, "read "+name)
	}
	return n, nil
}

// Delete removes an object (an upload once used).
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := s.obs.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return errcode.Wrap(errcode.Unavailable, err, "delete "+name)
	}
	return nil
}
