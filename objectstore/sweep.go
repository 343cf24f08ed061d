package objectstore

import (
	"context"
	"errors"
	"strings"
	"time"

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

// Objects lists every object of the bucket (snapshots and uploads).
func (s *Store) Objects(ctx context.Context) ([]Object, error) {
	infos, err := s.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "list bucket "+s.bucket)
	}
	out := make([]Object, 0, len(infos))
	for _, i := range infos {
		out = append(out, Object{Name: i.Name, NUID: i.NUID, Size: int64(i.Size), Created: i.ModTime.UTC()})
	}
	return out, nil
}

// Chunks are chunks in the bucket's stream that no object names: what a
// put that never finished (its writer killed) left behind.
type Chunks struct {
	NUID string
	Msgs uint64
	// Last is when the last of them was written: a put still under way
	// writes more, so only old ones are orphans.
	Last time.Time
}

// OrphanChunks lists the chunks no object's metadata refers to whose last
// message is older than before.
func (s *Store) OrphanChunks(ctx context.Context, before time.Time) ([]Chunks, error) {
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
		if named[nuid] {
			continue
		}
		last, err := stream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, errcode.Wrap(errcode.Unavailable, err, "chunks "+subj)
		}
		if last.Time.Before(before) {
			out = append(out, Chunks{NUID: nuid, Msgs: n, Last: last.Time.UTC()})
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
