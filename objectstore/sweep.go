package objectstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/errcode"
)

// Object is one object of the bucket as a sweep sees it.
type Object struct {
	Name    string
	NUID    string // its chunks' subject token
	Size    int64
	Created time.Time
}

// list returns the infos of every object of the bucket (none of an
// empty bucket).
func (s *Store) list(ctx context.Context) ([]*jetstream.ObjectInfo, error) {
	infos, err := s.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "list bucket "+s.bucket)
	}
	return infos, nil
}

// Objects lists every object of the bucket (snapshots and uploads).
func (s *Store) Objects(ctx context.Context) ([]Object, error) {
	infos, err := s.list(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Object, 0, len(infos))
	for _, i := range infos {
		out = append(out, Object{Name: i.Name, NUID: i.NUID, Size: int64(i.Size), Created: i.ModTime.UTC()})
	}
	return out, nil
}

// Chunks are chunks in the bucket's stream that no object names: those
// of a put under way, or of a put that never finished (its writer killed
// between its chunks and its info), which nothing will ever read.
type Chunks struct {
	NUID string `json:"nuid"`
	Msgs uint64 `json:"msgs"`
	// Bytes is their payload, message by message.
	Bytes int64 `json:"bytes"`
	// First and Last are when the first and the last of them were
	// written: a put under way writes more, so only chunks whose last
	// write is older than a grace period are orphans.
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
}

// UnnamedChunks lists the chunks no object's info refers to, with their
// size, read from the stream without their payload. It lists the objects
// first, so that a put that finishes meanwhile shows as chunks written
// just now (within any grace period), never as an orphan.
func (s *Store) UnnamedChunks(ctx context.Context) ([]Chunks, error) {
	objs, err := s.Objects(ctx)
	if err != nil {
		return nil, err
	}
	named := map[string]bool{}
	for _, o := range objs {
		named[o.NUID] = true
	}
	stream, err := s.js.Stream(ctx, StreamName(s.bucket))
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "stream of "+s.bucket)
	}
	prefix := chunkSubject(s.bucket, "")
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "chunks of "+s.bucket)
	}
	var out []Chunks
	for subj, n := range info.State.Subjects {
		nuid := strings.TrimPrefix(subj, prefix)
		if named[nuid] || n == 0 {
			continue
		}
		c, err := chunkSizes(ctx, stream, subj, n)
		if err != nil {
			return nil, errcode.Wrap(errcode.Unavailable, err, "chunks "+subj)
		}
		if c.Msgs == 0 {
			continue // purged meanwhile
		}
		c.NUID = nuid
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NUID < out[j].NUID })
	return out, nil
}

// chunkSizes reads the headers of the (about) n messages on subj: the
// server sends each with its payload's size (Nats-Msg-Size) instead of
// the payload.
func chunkSizes(ctx context.Context, stream jetstream.Stream, subj string, n uint64) (Chunks, error) {
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}, HeadersOnly: true})
	if err != nil {
		return Chunks{}, err
	}
	var c Chunks
	for c.Msgs < n {
		batch, err := cons.Fetch(int(min(n-c.Msgs, 1000)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return c, err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			size, err := strconv.ParseInt(m.Headers().Get(nats.MsgSize), 10, 64)
			if err != nil {
				return c, fmt.Errorf("chunk without a size header: %w", err)
			}
			md, err := m.Metadata()
			if err != nil {
				return c, err
			}
			if c.Msgs == 0 {
				c.First = md.Timestamp.UTC()
			}
			c.Msgs++
			c.Bytes += size
			c.Last = md.Timestamp.UTC()
			if md.NumPending == 0 {
				return c, batch.Error()
			}
		}
		if err := batch.Error(); err != nil {
			return c, err
		}
		if got == 0 {
			return c, nil // fewer than the stream said: purged meanwhile
		}
	}
	return c, nil
}

// OrphanChunks lists the chunks no object names whose last write is
// older than before (see UnnamedChunks).
func (s *Store) OrphanChunks(ctx context.Context, before time.Time) ([]Chunks, error) {
	all, err := s.UnnamedChunks(ctx)
	if err != nil {
		return nil, err
	}
	var out []Chunks
	for _, c := range all {
		if c.Last.Before(before) {
			out = append(out, c)
		}
	}
	return out, nil
}

// PurgeChunks removes the chunks of nuid (an orphan's: see OrphanChunks).
func (s *Store) PurgeChunks(ctx context.Context, nuid string) error {
	stream, err := s.js.Stream(ctx, StreamName(s.bucket))
	if err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "stream of "+s.bucket)
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(chunkSubject(s.bucket, nuid))); err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "purge chunks "+nuid)
	}
	return nil
}
