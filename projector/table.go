package projector

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/paddock-dev/paddock/projection"
)

// maxCached bounds the records a table keeps in memory between rounds.
const maxCached = 100_000

// table is one kind of record in one bucket: how events are taken into
// it, and the records and revisions this projector last wrote.
type table[R any] struct {
	kv     jetstream.KeyValue
	take   func(R, projection.Decoded) (R, bool)
	ledger func(*R) *projection.Ledger

	mu    sync.Mutex // guards cache
	cache map[string]cached[R]
}

type cached[R any] struct {
	rec R
	rev uint64
}

func newTable[R any](kv jetstream.KeyValue, take func(R, projection.Decoded) (R, bool), ledger func(*R) *projection.Ledger) *table[R] {
	return &table[R]{kv: kv, take: take, ledger: ledger, cache: map[string]cached[R]{}}
}

// result is what a write took in.
type result struct {
	taken    int
	problems []projection.Problem
}

// apply takes items (one key's events, in stream order) into the key's
// record and writes it with the revision it was read at. When another
// writer got there first it reads the record again and starts over, so
// events that writer took in are skipped. It returns an error only for a
// failure worth retrying.
func (t *table[R]) apply(ctx context.Context, key string, items []projection.Decoded, logger *slog.Logger) (result, error) {
	for {
		c, err := t.load(ctx, key, logger)
		if err != nil {
			return result{}, err
		}
		rec := c.rec
		var res result
		for _, it := range items {
			before := t.ledger(&rec).ProblemCount
			var took bool
			if rec, took = t.take(rec, it); !took {
				continue
			}
			res.taken++
			if l := t.ledger(&rec); l.ProblemCount > before {
				pr := projection.Problem{StreamSeq: it.Msg.StreamSeq, Detail: "(beyond the problems a record keeps)"}
				if n := len(l.Problems); n > 0 && l.Problems[n-1].StreamSeq == it.Msg.StreamSeq {
					pr = l.Problems[n-1]
				}
				res.problems = append(res.problems, pr)
			}
		}
		if res.taken == 0 {
			return res, nil
		}
		data, err := json.Marshal(rec)
		if err != nil {
			return result{}, err
		}
		var rev uint64
		if c.rev == 0 {
			rev, err = t.kv.Create(ctx, key, data)
		} else {
			rev, err = t.kv.Update(ctx, key, data, c.rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			t.forget(key) // another writer: read its record and start over
			continue
		}
		if err != nil {
			t.forget(key)
			return result{}, err
		}
		t.mu.Lock()
		if len(t.cache) >= maxCached {
			clear(t.cache)
		}
		t.cache[key] = cached[R]{rec: rec, rev: rev}
		t.mu.Unlock()
		return res, nil
	}
}

// load returns the key's record and revision: the one this projector last
// wrote, else the bucket's (zero and revision 0 when there is none).
func (t *table[R]) load(ctx context.Context, key string, logger *slog.Logger) (cached[R], error) {
	t.mu.Lock()
	c, ok := t.cache[key]
	t.mu.Unlock()
	if ok {
		return c, nil
	}
	e, err := t.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return cached[R]{}, nil
	}
	if err != nil {
		return cached[R]{}, err
	}
	c.rev = e.Revision()
	if err := json.Unmarshal(e.Value(), &c.rec); err != nil {
		// Not a record (written by hand?): start the key over. Replay
		// --verify shows the difference this leaves.
		logger.Error("a projection record does not decode; starting the key over", "bucket", t.kv.Bucket(), "key", key, "err", err)
		var zero R
		c.rec = zero
	}
	return c, nil
}

func (t *table[R]) forget(key string) {
	t.mu.Lock()
	delete(t.cache, key)
	t.mu.Unlock()
}
