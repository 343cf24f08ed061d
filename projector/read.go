package projector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/paddock-dev/paddock/events"
)

// ReadAll returns every record in kv whose key matches filter (">": all),
// decoded as R, by key. It fails if the bucket cannot be read or a value
// does not decode, and with events.ErrReadStalled when the watch delivers
// nothing for events.ReadStallTimeout (a watch made while the bucket's
// stream settles on a cluster can wait for ever).
func ReadAll[R any](ctx context.Context, kv jetstream.KeyValue, filter string) (map[string]R, error) {
	w, err := kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("read bucket %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	idle := time.NewTimer(events.ReadStallTimeout)
	defer idle.Stop()
	out := map[string]R{}
	for {
		select {
		case <-idle.C:
			return nil, fmt.Errorf("read bucket %s: %w", kv.Bucket(), events.ErrReadStalled)
		case e, ok := <-w.Updates():
			idle.Reset(events.ReadStallTimeout)
			if !ok {
				return nil, fmt.Errorf("read bucket %s: watcher closed", kv.Bucket())
			}
			if e == nil { // the current values are all in
				return out, nil
			}
			var r R
			if err := json.Unmarshal(e.Value(), &r); err != nil {
				return nil, fmt.Errorf("bucket %s key %s: %w", kv.Bucket(), e.Key(), err)
			}
			out[e.Key()] = r
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// ReadLeader returns key's value in kv as the leader of the bucket's
// stream has it: found false when the key has no value or was deleted. A
// KV watch (ReadAll) or get may be answered by a replica that is still
// catching up after a restart (nats-server puts an ordered consumer on
// any active peer of the stream, and a direct get may be served by a
// follower), and then shows an older record; the JetStream API's message
// get is answered by the leader. b must come from OpenBuckets or
// EnsureBuckets.
func (b Buckets) ReadLeader(ctx context.Context, kv jetstream.KeyValue, key string) (value []byte, found bool, err error) {
	if b.js == nil {
		return nil, false, errors.New("projector: buckets without a JetStream context")
	}
	bucket := kv.Bucket()
	m, err := events.LeaderGet(ctx, b.js, "KV_"+bucket, map[string]any{"last_by_subj": "$KV." + bucket + "." + key})
	if err != nil {
		return nil, false, fmt.Errorf("read %s from the leader of bucket %s: %w", key, bucket, err)
	}
	// A delete or purge marker is a header, KV-Operation: DEL or PURGE.
	if m == nil || strings.Contains(string(m.Header), "KV-Operation: DEL") || strings.Contains(string(m.Header), "KV-Operation: PURGE") {
		return nil, false, nil
	}
	return m.Data, true, nil
}

// firstFrom returns the stream sequence of stream's first message at or
// after seq, as the stream's leader has it; found is false when there is
// none.
func firstFrom(ctx context.Context, js jetstream.JetStream, stream string, seq uint64) (next uint64, found bool, err error) {
	m, err := events.LeaderGet(ctx, js, stream, map[string]any{"seq": seq, "next_by_subj": ">"})
	if err != nil || m == nil {
		return 0, false, err
	}
	return m.Seq, true, nil
}

// Status is one projector's progress against the events stream.
type Status struct {
	Name string `json:"name"`
	// Stream is the events partition's stream the projector folds
	// (NamePartition of its name).
	Stream string `json:"stream"`
	Checkpoint
	// Lag is how many stream sequences the checkpoint is behind the last
	// event of its partition's stream.
	Lag uint64 `json:"lag"`
}

// ReadStatus returns the events stream's last sequence and the progress of
// every projector that has saved a checkpoint, by name, each against its
// own partition's stream. It fails with
// jetstream.ErrBucketNotFound when no projector ever ran.
func ReadStatus(ctx context.Context, js jetstream.JetStream, stream string) (uint64, []Status, error) {
	if stream == "" {
		stream = events.DefaultStream
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, nil, fmt.Errorf("events stream %s: %w", stream, err)
	}
	last := s.CachedInfo().State.LastSeq
	kv, err := js.KeyValue(ctx, StateBucket)
	if err != nil {
		return last, nil, err
	}
	cps, err := ReadAll[Checkpoint](ctx, kv, CheckpointKey("*"))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return last, nil, err
	}
	// Each projector's lag is against its own partition's stream; one
	// whose partition's stream cannot be read is taken as partition 0's.
	lasts := map[string]uint64{stream: last}
	var out []Status
	for k, cp := range cps {
		st := Status{Name: strings.TrimPrefix(k, CheckpointKey("")), Stream: stream, Checkpoint: cp}
		if p := events.PartitionStream(stream, NamePartition(st.Name)); p != stream {
			if _, ok := lasts[p]; !ok {
				if ps, err := js.Stream(ctx, p); err == nil {
					lasts[p] = ps.CachedInfo().State.LastSeq
				}
			}
			if _, ok := lasts[p]; ok {
				st.Stream = p
			}
		}
		if l := lasts[st.Stream]; l > cp.StreamSeq {
			st.Lag = l - cp.StreamSeq
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return last, out, nil
}
