package projector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/paddock-dev/paddock/events"
)

// ReadAll returns every record in kv whose key matches filter (">": all),
// decoded as R, by key. It fails if the bucket cannot be read or a value
// does not decode.
func ReadAll[R any](ctx context.Context, kv jetstream.KeyValue, filter string) (map[string]R, error) {
	w, err := kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("read bucket %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	out := map[string]R{}
	for {
		select {
		case e, ok := <-w.Updates():
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

// Status is one projector's progress against the events stream.
type Status struct {
	Name string `json:"name"`
	Checkpoint
	// Lag is how many stream sequences the checkpoint is behind the
	// stream's last event.
	Lag uint64 `json:"lag"`
}

// ReadStatus returns the events stream's last sequence and the progress of
// every projector that has saved a checkpoint, by name. It fails with
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
	var out []Status
	for k, cp := range cps {
		st := Status{Name: strings.TrimPrefix(k, CheckpointKey("")), Checkpoint: cp}
		if last > cp.StreamSeq {
			st.Lag = last - cp.StreamSeq
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return last, out, nil
}
