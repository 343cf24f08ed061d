package objectstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/snapshot"
)

// Content chunks of manifest snapshots (package snapshot) are objects of
// the bucket named chunks/<tenant>/<sha256 hex of the plain bytes>. A
// tenant's chunks are its own: two tenants storing the same bytes store
// two objects, so that whether a chunk exists tells nothing about another
// tenant's files. A chunk object is immutable in content (its name is its
// digest); only its info is ever written again (see ChunkRenewAge).
//
// A chunk is stored zstd-compressed (metadata enc=zstd) when the store is
// Compressed and compression saves an eighth or more; GetChunk returns
// the plain bytes either way.

// chunksRoot starts every chunk object's name. No snapshot name can be a
// chunk name: snapshot names end in .tar or .manifest, chunk names in 64
// hex digits.
const chunksRoot = "chunks/"

// ChunkRenewAge is the age past which an upload that finds its chunk
// already stored writes the chunk's info again, renewing its ModTime.
// A retention sweep removes a chunk that no kept manifest names once its
// ModTime is older than the orphan grace (at least
// retention.MinOrphanGrace, which is twice this); a persist that skips an
// old chunk needs it to survive until its manifest is written, so it
// makes the chunk young again: the chunk then stays for at least half a
// grace period, unreferenced or not.
const ChunkRenewAge = 30 * time.Second

// ChunkPrefix is the name prefix of a tenant's chunks.
func ChunkPrefix(tenant string) string { return chunksRoot + tenant + "/" }

// ChunkName returns the object name of tenant's chunk digest. A tenant
// that is not a subject token or a digest that is not 64 lowercase hex
// digits is invalid_request, so no name reaches outside the tenant's
// chunks.
func ChunkName(tenant, digest string) (string, error) {
	if err := commands.CheckToken("tenant", tenant); err != nil {
		return "", err
	}
	if !ValidDigest(digest) {
		return "", errcode.New(errcode.InvalidRequest, "chunk digest %q is not 64 lowercase hex digits", digest)
	}
	return ChunkPrefix(tenant) + digest, nil
}

// ValidDigest reports whether d is a hex sha256 as chunk names hold it:
// 64 lowercase hex digits.
func ValidDigest(d string) bool {
	if len(d) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(d); i++ {
		c := d[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ParseChunkName splits a chunk's object name into its tenant and digest;
// ok is false for any other name.
func ParseChunkName(name string) (tenant, digest string, ok bool) {
	rest, ok := strings.CutPrefix(name, chunksRoot)
	if !ok {
		return "", "", false
	}
	tenant, digest, ok = strings.Cut(rest, "/")
	if !ok {
		return "", "", false
	}
	if n, err := ChunkName(tenant, digest); err != nil || n != name {
		return "", "", false
	}
	return tenant, digest, true
}

// chunk metadata keys and the encoding of a compressed chunk.
const (
	metaEnc  = "enc"
	metaSize = "size" // plain length
	encZstd  = "zstd"
)

// zstd coders shared by every store: EncodeAll and DecodeAll are safe for
// concurrent use and the coders are never changed after they are made.
var (
	chunkEncoder = sync.OnceValues(func() (*zstd.Encoder, error) {
		return zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	})
	chunkDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
		return zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(2*snapshot.ChunkSize), zstd.WithDecoderMaxWindow(MaxWindow))
	})
)

// HasChunk reports whether tenant's chunk digest is stored.
func (s *Store) HasChunk(ctx context.Context, tenant, digest string) (bool, error) {
	name, err := ChunkName(tenant, digest)
	if err != nil {
		return false, err
	}
	_, err = s.chunkInfo(ctx, name)
	if errcode.Of(err) == errcode.NotFound {
		return false, nil
	}
	return err == nil, err
}

// chunkInfo returns a chunk's info: not_found when it is not stored (or
// deleted), unavailable when the store does not answer.
func (s *Store) chunkInfo(ctx context.Context, name string) (*jetstream.ObjectInfo, error) {
	info, err := s.obs.GetInfo(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, errcode.New(errcode.NotFound, "no chunk %s", name)
	}
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "chunk "+name)
	}
	return info, nil
}

// GetChunk returns the plain bytes of tenant's chunk digest, checked
// against the digest: not_found when the tenant has no such chunk,
// internal ("corrupt chunk") when the bytes are not the digest's,
// unavailable when the store does not answer.
func (s *Store) GetChunk(ctx context.Context, tenant, digest string) ([]byte, error) {
	name, err := ChunkName(tenant, digest)
	if err != nil {
		return nil, err
	}
	info, err := s.chunkInfo(ctx, name)
	if err != nil {
		return nil, err
	}
	if info.Size > 2*snapshot.ChunkSize || info.Chunks > 2*snapshot.ChunkSize/ChunkSize+1 {
		return nil, errcode.New(errcode.Internal, "corrupt chunk %s: %d bytes in %d parts stored", name, info.Size, info.Chunks)
	}
	data, err := s.readParts(ctx, info)
	s.count("out", name, int64(len(data)))
	if err != nil {
		return nil, err
	}
	if info.Metadata[metaEnc] == encZstd {
		dec, err := chunkDecoder()
		if err != nil {
			return nil, fmt.Errorf("zstd decoder: %w", err)
		}
		plain, err := dec.DecodeAll(data, make([]byte, 0, snapshot.ChunkSize))
		if err != nil || len(plain) > snapshot.ChunkSize {
			return nil, errcode.New(errcode.Internal, "corrupt chunk %s: it does not decompress to a chunk (%v)", name, err)
		}
		data = plain
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != digest {
		return nil, errcode.New(errcode.Internal, "corrupt chunk %s: its bytes have sha256 %x", name, sum)
	}
	return data, nil
}

// readParts reads a small object's parts (its chunks in the stream) by
// direct gets, one request each: nats.go's Get makes an ordered consumer
// per object, which costs more than a 1 MiB chunk's transfer. The parts
// must add up to the object's size; what they hold is checked by the
// caller against the chunk's digest.
func (s *Store) readParts(ctx context.Context, info *jetstream.ObjectInfo) ([]byte, error) {
	st, err := s.stream.get(ctx, s.js, StreamName(s.bucket))
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "stream of "+s.bucket)
	}
	subj := chunkSubject(s.bucket, info.NUID)
	data := make([]byte, 0, info.Size)
	seq := uint64(1)
	for range info.Chunks {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, errcode.New(errcode.Internal, "corrupt chunk %s: %d of its %d parts stored", info.Name, len(data), info.Size)
		}
		if err != nil {
			return nil, errcode.Wrap(errcode.Unavailable, err, "read chunk "+info.Name)
		}
		if len(data)+len(m.Data) > int(info.Size) {
			return nil, errcode.New(errcode.Internal, "corrupt chunk %s: more than its %d bytes stored", info.Name, info.Size)
		}
		data = append(data, m.Data...)
		seq = m.Sequence + 1
	}
	if uint64(len(data)) != info.Size {
		return nil, errcode.New(errcode.Internal, "corrupt chunk %s: %d of its %d bytes stored", info.Name, len(data), info.Size)
	}
	return data, nil
}

// lazyStream opens a stream on first use and keeps it.
type lazyStream struct {
	mu sync.Mutex // guards st
	st jetstream.Stream
}

func (l *lazyStream) get(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.st != nil {
		return l.st, nil
	}
	st, err := js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	l.st = st
	return st, nil
}

// putChunk stores data as chunk name and returns the bytes stored.
func (s *Store) putChunk(ctx context.Context, name string, data []byte) (int64, error) {
	meta := map[string]string{metaSize: strconv.Itoa(len(data))}
	stored := data
	if s.zstd {
		enc, err := chunkEncoder()
		if err != nil {
			return 0, fmt.Errorf("zstd encoder: %w", err)
		}
		if z := enc.EncodeAll(data, nil); len(z) <= len(data)-len(data)/8 {
			stored, meta[metaEnc] = z, encZstd
		}
	}
	res, err := s.putObject(ctx, jetstream.ObjectMeta{Name: name}, bytes.NewReader(stored), func(string) map[string]string { return meta })
	s.count("in", name, res.sent)
	if err != nil {
		s.dropFailed(ctx, name)
		return 0, s.putErr(ctx, err, "chunk "+name, res.sent)
	}
	return res.sent, nil
}

// renewChunk writes info again, with its metadata as it is, when it is
// older than ChunkRenewAge (see there).
func (s *Store) renewChunk(ctx context.Context, info *jetstream.ObjectInfo) error {
	age := ChunkRenewAge
	if s.renewAge > 0 {
		age = s.renewAge
	}
	if time.Since(info.ModTime) < age {
		return nil
	}
	if err := s.obs.UpdateMeta(ctx, info.Name, info.ObjectMeta); err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "renew chunk "+info.Name)
	}
	return nil
}

// ChunkStats count what an Uploader did.
type ChunkStats struct {
	// Chunks is the distinct chunks put.
	Chunks int `json:"chunks"`
	// Uploaded is the chunks stored, UploadedBytes their stored
	// (maybe compressed) bytes.
	Uploaded      int   `json:"uploaded"`
	UploadedBytes int64 `json:"uploaded_bytes"`
	// Skipped is the chunks the store already held.
	Skipped int `json:"skipped"`
	// UploadedRaw is the uploaded chunks' bytes before compression (for
	// the node's metrics; not recorded).
	UploadedRaw int64 `json:"-"`
}

// Uploader stores a tenant's chunks with bounded parallelism. Each upload
// is one object put, within the server's flow control like every put of
// the store (see put.go). It is safe for concurrent use; its goroutines
// end by Wait.
type Uploader struct {
	s      *Store
	ctx    context.Context
	tenant string
	slots  chan struct{} // one per upload in flight
	wg     sync.WaitGroup

	mu    sync.Mutex // guards the fields below
	seen  map[string]bool
	stats ChunkStats
	err   error // the first failure
}

// Uploader returns an uploader of tenant's chunks that keeps up to
// parallel uploads in flight (at least 1), all bounded by ctx.
func (s *Store) Uploader(ctx context.Context, tenant string, parallel int) *Uploader {
	return &Uploader{s: s, ctx: ctx, tenant: tenant, slots: make(chan struct{}, max(parallel, 1)), seen: map[string]bool{}}
}

// Put stores a copy of data as chunk digest unless the store already has
// it or this uploader took it before. It blocks while parallel uploads
// are in flight. It returns an earlier upload's error, a bad digest
// (invalid_request), or ctx's error; data that does not hash to digest is
// internal and stores nothing.
func (u *Uploader) Put(digest string, data []byte) error {
	name, err := ChunkName(u.tenant, digest)
	if err != nil {
		return err
	}
	u.mu.Lock()
	if err := u.err; err != nil {
		u.mu.Unlock()
		return err
	}
	if u.seen[digest] {
		u.mu.Unlock()
		return nil
	}
	u.seen[digest] = true
	u.stats.Chunks++
	u.mu.Unlock()
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != digest {
		err := errcode.New(errcode.Internal, "chunk %s: its bytes have sha256 %x", digest, sum)
		u.fail(err)
		return err
	}
	select {
	case u.slots <- struct{}{}:
	case <-u.ctx.Done():
		u.fail(u.ctx.Err())
		return u.ctx.Err()
	}
	data = bytes.Clone(data)
	u.wg.Add(1)
	go func() { // ends with its upload; Wait waits for it
		defer u.wg.Done()
		defer func() { <-u.slots }()
		stored, skipped, err := u.upload(name, data)
		u.mu.Lock()
		defer u.mu.Unlock()
		switch {
		case err != nil:
			if u.err == nil {
				u.err = err
			}
		case skipped:
			u.stats.Skipped++
		default:
			u.stats.Uploaded++
			u.stats.UploadedBytes += stored
			u.stats.UploadedRaw += int64(len(data))
		}
	}()
	return nil
}

// upload stores one chunk unless it is there (renewing it then).
func (u *Uploader) upload(name string, data []byte) (stored int64, skipped bool, err error) {
	info, err := u.s.chunkInfo(u.ctx, name)
	switch {
	case err == nil:
		err = u.s.renewChunk(u.ctx, info)
		if !errors.Is(err, jetstream.ErrUpdateMetaDeleted) {
			return 0, true, err
		}
		// A sweep removed it meanwhile: store it again.
	case errcode.Of(err) != errcode.NotFound:
		return 0, false, err
	}
	stored, err = u.s.putChunk(u.ctx, name, data)
	return stored, false, err
}

func (u *Uploader) fail(err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.err == nil {
		u.err = err
	}
}

// Wait waits for the uploads in flight and returns what the uploader did,
// with the first upload's error.
func (u *Uploader) Wait() (ChunkStats, error) {
	u.wg.Wait()
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.stats, u.err
}

// ChunkObject is one stored chunk as a sweep sees it.
type ChunkObject struct {
	Tenant, Digest string
	Size           int64 // stored bytes
	Modified       time.Time
}

// Chunks lists tenant's chunks ("" for every tenant's).
func (s *Store) Chunks(ctx context.Context, tenant string) ([]ChunkObject, error) {
	infos, err := s.list(ctx)
	if err != nil {
		return nil, err
	}
	var out []ChunkObject
	for _, i := range infos {
		t, d, ok := ParseChunkName(i.Name)
		if !ok || (tenant != "" && t != tenant) {
			continue
		}
		out = append(out, ChunkObject{Tenant: t, Digest: d, Size: int64(i.Size), Modified: i.ModTime.UTC()})
	}
	return out, nil
}

// DeleteChunk removes tenant's chunk digest unless its info was written
// at or after notBefore (a persist renewed it, or stored it again, since
// the caller decided): it reports whether it removed it. A missing chunk
// is no error.
func (s *Store) DeleteChunk(ctx context.Context, tenant, digest string, notBefore time.Time) (bool, error) {
	name, err := ChunkName(tenant, digest)
	if err != nil {
		return false, err
	}
	info, err := s.chunkInfo(ctx, name)
	if errcode.Of(err) == errcode.NotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !info.ModTime.Before(notBefore) {
		return false, nil
	}
	if err := s.Delete(ctx, name); err != nil {
		return false, err
	}
	return true, nil
}
