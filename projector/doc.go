// Package projector keeps the projections of the events stream in KV, on
// the engine's side: a durable JetStream consumer on every session and
// node event folds them with the pure projection.Apply into the buckets
// sbx_sessions (key <tenant>.<session>, a projection.SessionRecord) and
// sbx_nodes (key <node>, a projection.NodeRecord). Events whose subject
// names neither are recorded under the key "stray" of sbx_projector,
// which also holds each projector's checkpoint (checkpoint.<name>).
//
// Correctness under redelivery and kill -9 rests on the records, not on
// the consumer's acknowledgements: every record carries the stream
// sequence of the last event it took in, and an event at or below it is
// skipped. A record and that sequence are written together, with the
// key's revision as a compare-and-set, so a crash between writing a
// record and acknowledging its events makes the events come again and be
// skipped, never applied twice; and as nothing is acknowledged or
// checkpointed before its record is written, nothing is skipped either.
// On start the consumer is reset to the checkpoint + 1, so that events
// delivered to a process that died are delivered again in stream order.
//
// An event that cannot be applied (undecodable, a seq gap, a finish
// without a start, an impossible transition, a body that disagrees with
// its subject) is recorded in its record's problems, counted and logged,
// and acknowledged; projection of every other session goes on.
//
// A deployment's events may be spread over several partitions (streams):
// a Projector folds one. The engines share the partitions' projectors by
// lease (lease.go: keys of the sbx_partitions bucket, with a TTL on the
// server's clock; shared.go: Shared claims, renews, fences and releases
// them, and runs a projector for each partition its engine holds).
package projector
