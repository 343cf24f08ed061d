// Package replay rebuilds the projections from the events stream with
// the same pure fold the projector uses (projection.Set over
// projection.Apply), from the first event up to a sequence or a time, and
// compares the result with what the projector keeps in KV: invariant 3,
// projections equal the fold of the stream, made checkable.
//
// The stream's retention limits may have dropped a session's first
// events; such a session cannot be rebuilt, and Rebuild says so instead
// of reporting its history as broken.
package replay
