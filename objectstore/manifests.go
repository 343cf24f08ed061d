package objectstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strconv"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/snapshot"
)

// A manifest snapshot is an object <tenant>/<session>/<id>.manifest
// beside the tar snapshots: the manifest's canonical encoding
// (snapshot.Manifest.Encode), zstd-compressed (a manifest of 10,000 files
// is mostly paths and hex digests and shrinks a few fold). Its metadata
// holds what a listing shows without reading it: the root digest, the
// logical members and bytes, the session seq, and the bytes of the
// chunks its persist stored. A snapshot id names one snapshot of a
// session, whichever its format.

// ManifestSuffix ends a manifest snapshot's object name.
const ManifestSuffix = ".manifest"

// manifestSuffix and tarSuffix end the object names of snapshots.
const (
	manifestSuffix = ManifestSuffix
	tarSuffix      = ".tar"
)

// MaxManifestBytes bounds a manifest's encoding as GetManifest reads it,
// compressed or not: a million entries of long paths fit.
const MaxManifestBytes = 512 << 20

// ManifestName returns the object name of a manifest snapshot. Each part
// must be a valid subject token (invalid_request otherwise), as in
// SnapshotName.
func ManifestName(tenant, session, id string) (string, error) {
	name, err := SnapshotName(tenant, session, id)
	if err != nil {
		return "", err
	}
	return name[:len(name)-len(tarSuffix)] + manifestSuffix, nil
}

// metaChunkBytes is the metadata key of the chunk bytes a manifest
// snapshot's persist stored.
const metaChunkBytes = "chunk_bytes"

// PutManifest stores m as a new manifest snapshot made by the op at
// session seq, whose chunks up uploaded (Size counts them). The name of a
// snapshot that exists, in either format, is already_exists; a bucket
// out of room is storage_quota_exceeded.
func (s *Store) PutManifest(ctx context.Context, tenant, session, id string, seq uint64, m *snapshot.Manifest, up ChunkStats) (Snapshot, error) {
	name, err := ManifestName(tenant, session, id)
	if err != nil {
		return Snapshot{}, err
	}
	if err := s.checkFree(ctx, tenant, session, id); err != nil {
		return Snapshot{}, err
	}
	enc, err := chunkEncoder()
	if err != nil {
		return Snapshot{}, err
	}
	raw := m.Encode() // once: the root is its digest
	sum := sha256.Sum256(raw)
	root := hex.EncodeToString(sum[:])
	stored := enc.EncodeAll(raw, nil)
	_, entries, logical := m.Stats()
	snap := Snapshot{ID: id, Name: name, SHA256: root, RootSHA256: root, Members: entries, Bytes: logical, Format: snapshot.Format, Seq: seq}
	res, err := s.putObject(ctx, jetstream.ObjectMeta{Name: name}, bytes.NewReader(stored), func(storedHex string) map[string]string {
		snap.StoredSHA256 = storedHex
		return map[string]string{
			"sha256": root, "root_sha256": root, "stored_sha256": storedHex, "members": strconv.Itoa(entries),
			"bytes": strconv.FormatInt(logical, 10), "format": snapshot.Format, "seq": strconv.FormatUint(seq, 10),
			metaChunkBytes: strconv.FormatInt(up.UploadedBytes, 10),
		}
	})
	s.count("in", name, res.sent)
	if err != nil {
		s.dropFailed(ctx, name)
		return Snapshot{}, s.putErr(ctx, err, "manifest "+name, res.sent)
	}
	snap.Size, snap.Created = int64(res.info.Size)+up.UploadedBytes, res.info.ModTime
	return snap, nil
}

// checkFree returns already_exists when session has a snapshot id in
// either format (a deleted one included: names are never reused).
func (s *Store) checkFree(ctx context.Context, tenant, session, id string) error {
	tarName, err := SnapshotName(tenant, session, id)
	if err != nil {
		return err
	}
	manName, err := ManifestName(tenant, session, id)
	if err != nil {
		return err
	}
	for _, name := range []string{manName, tarName} {
		if _, err := s.obs.GetInfo(ctx, name, jetstream.GetObjectInfoShowDeleted()); err == nil {
			return errcode.New(errcode.AlreadyExists, "snapshot %s already exists", name)
		} else if !errors.Is(err, jetstream.ErrObjectNotFound) {
			return errcode.Wrap(errcode.Unavailable, err, "snapshot "+name)
		}
	}
	return nil
}

// GetManifest reads a manifest snapshot and checks it: the manifest must
// decode within lim and its root must be the recorded one (internal,
// "corrupt manifest", otherwise). An unknown snapshot is
// snapshot_not_found; a tar snapshot is invalid_request (read it with
// Fetch, or as a manifest through snapshot.FromTar: see ReadManifest).
func (s *Store) GetManifest(ctx context.Context, tenant, session, id string, lim snapshot.Limits) (*snapshot.Manifest, Snapshot, error) {
	snap, err := s.Info(ctx, tenant, session, id)
	if err != nil {
		return nil, snap, err
	}
	if snap.Format != snapshot.Format {
		return nil, snap, errcode.New(errcode.InvalidRequest, "snapshot %s is a %s, not a manifest", snap.Name, snap.Format)
	}
	var buf bytes.Buffer
	if _, err := s.fetchSum(ctx, snap.Name, snap.StoredSHA256, nil, &limitedWriter{w: &buf, n: MaxManifestBytes}); err != nil {
		if errcode.Of(err) == errcode.SnapshotCorrupt || errcode.Of(err) == errcode.PayloadTooLarge {
			return nil, snap, errcode.Wrap(errcode.Internal, err, "corrupt manifest "+snap.Name)
		}
		return nil, snap, err
	}
	dec, err := zstd.NewReader(&buf, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(MaxWindow))
	if err != nil {
		return nil, snap, errcode.Wrap(errcode.Internal, err, "corrupt manifest "+snap.Name)
	}
	defer dec.Close()
	plain, err := io.ReadAll(io.LimitReader(dec, MaxManifestBytes+1))
	if err != nil || len(plain) > MaxManifestBytes {
		return nil, snap, errcode.New(errcode.Internal, "corrupt manifest %s: it does not decompress within %d bytes (%v)", snap.Name, MaxManifestBytes, err)
	}
	m, err := snapshot.Decode(plain, lim)
	if err != nil {
		if errcode.Of(err) == errcode.PayloadTooLarge {
			return nil, snap, err // the caller's limits, not the manifest, say no
		}
		return nil, snap, errcode.Wrap(errcode.Internal, err, "corrupt manifest "+snap.Name)
	}
	if root := m.Root(); root != snap.RootSHA256 {
		return nil, snap, errcode.New(errcode.Internal, "corrupt manifest %s: root %s, recorded %s", snap.Name, root, snap.RootSHA256)
	}
	return m, snap, nil
}

// limitedWriter fails a write past n bytes with payload_too_large.
type limitedWriter struct {
	w io.Writer
	n int64
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.n {
		return 0, errcode.New(errcode.PayloadTooLarge, "more than the %d bytes allowed", MaxManifestBytes)
	}
	l.n -= int64(len(p))
	return l.w.Write(p)
}

// ChunkUsage returns how many distinct chunks tenant stores and their
// stored bytes.
func (s *Store) ChunkUsage(ctx context.Context, tenant string) (chunks int, stored int64, err error) {
	cs, err := s.Chunks(ctx, tenant)
	if err != nil {
		return 0, 0, err
	}
	for _, c := range cs {
		stored += c.Size
	}
	return len(cs), stored, nil
}

// describe is the Snapshot an object's info describes.
func describe(id string, info *jetstream.ObjectInfo) Snapshot {
	m := info.Metadata
	members, _ := strconv.Atoi(m["members"])
	logical, _ := strconv.ParseInt(m["bytes"], 10, 64)
	seq, _ := strconv.ParseUint(m["seq"], 10, 64)
	chunkBytes, _ := strconv.ParseInt(m[metaChunkBytes], 10, 64)
	return Snapshot{
		ID: id, Name: info.Name, SHA256: m["sha256"], StoredSHA256: m["stored_sha256"], Size: int64(info.Size) + chunkBytes,
		Members: members, Bytes: logical, Format: m["format"], RootSHA256: m["root_sha256"], Seq: seq, Created: info.ModTime.UTC(),
	}
}

// ManifestOf returns the manifest of any snapshot of the session: a
// manifest snapshot's (GetManifest), or a tar snapshot's as
// snapshot.FromTar reads it with its chunks discarded (so that two
// snapshots compare across the change of format).
func (s *Store) ManifestOf(ctx context.Context, tenant, session, id string, lim snapshot.Limits, alim archive.Limits) (*snapshot.Manifest, Snapshot, error) {
	snap, err := s.Info(ctx, tenant, session, id)
	if err != nil {
		return nil, snap, err
	}
	if snap.Format == snapshot.Format {
		return s.GetManifest(ctx, tenant, session, id, lim)
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { // ends when the fetch ends; the pipe's close ends FromTar's reads
		_, err := s.FetchTee(ctx, tenant, session, id, nil, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	tr, closeTar, err := ArchiveStream(pr)
	if err != nil {
		pr.CloseWithError(err)
		<-done
		return nil, snap, err
	}
	m, err := snapshot.FromTar(ctx, tr, nil, alim, func(string, []byte) error { return nil })
	closeTar()
	pr.CloseWithError(errors.New("manifest read"))
	ferr := <-done
	if err != nil {
		return nil, snap, err
	}
	if ferr != nil {
		return nil, snap, ferr
	}
	return m, snap, nil
}
