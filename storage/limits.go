package storage

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Limits are the byte limits of Paddock's streams. A limit of 0 is none
// given.
type Limits struct {
	// Events is the events stream's reserved size.
	Events int64
	// Objects is the workspace bucket's quota (snapshots and transfers).
	Objects int64
	// KV bounds each of the projection's buckets.
	KV int64
}

// The split of a store that Defaults makes, in percent. The events stream
// is the record and must never be starved; snapshots are what grows
// fastest; the projection holds one small record per session and node.
// What is left (9%) stays unreserved, for other streams and for a limit
// raised later without moving the others.
const (
	EventsPercent  = 25
	ObjectsPercent = 60
	KVPercent      = 2 // each of three buckets
)

// Defaults splits a JetStream store of store bytes (a server's
// max_file_store, or an account's limit) between Paddock's streams. A
// store of 0 or less (unknown) gives no limits.
func Defaults(store int64) Limits {
	if store <= 0 {
		return Limits{}
	}
	return Limits{Events: store / 100 * EventsPercent, Objects: store / 100 * ObjectsPercent, KV: store / 100 * KVPercent}
}

// Resolve returns the limit to give stream when it is ensured, and a note
// for the operator when the default was not applied:
//
//   - asked (> 0, the operator's flag) always;
//   - else 0 (keep) for a stream that has a limit already;
//   - else def for a stream that does not exist yet, or has no limit and
//     holds less than def: an existing deployment gets its reservation;
//   - else 0 (keep it unbounded) for a stream that holds def or more:
//     applying def would refuse every write (or drop data) at once.
//
// It fails only when the stream cannot be looked up.
func Resolve(ctx context.Context, js jetstream.JetStream, stream string, asked, def int64) (int64, string, error) {
	if asked > 0 || def <= 0 {
		return asked, "", nil
	}
	s, err := js.Stream(ctx, stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return def, "", nil
	case err != nil:
		return 0, "", fmt.Errorf("stream %s: %w", stream, err)
	}
	limit, note := decide(UsageOf(s.CachedInfo()), def)
	return limit, note, nil
}

// decide is Resolve's choice for an existing stream with usage u.
func decide(u Usage, def int64) (int64, string) {
	switch {
	case u.MaxBytes > 0:
		return 0, ""
	case u.Bytes < uint64(def):
		return def, ""
	}
	return 0, fmt.Sprintf("%s holds %d bytes, more than the default limit of %d, and stays without one: give it a limit of your choice", u.Stream, u.Bytes, def)
}
