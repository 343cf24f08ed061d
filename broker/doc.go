// Package broker embeds a nats-server with JetStream on disk, so that one
// `engine serve` is a whole Paddock deployment. The engine talks to it over
// an in-process connection; node agents and CLIs in other processes connect
// to its listener.
//
// Durability is explicit: by default every JetStream write is synced to
// disk before it is acknowledged (SyncAlways). Config.SyncInterval relaxes
// that to a periodic fsync, trading the last interval's acknowledged writes
// on an OS crash or power loss for throughput (docs/benchmarks.md).
//
// The server logs through Config.Logger (slog, component=nats-server).
// When its store's filesystem fills up, nats-server's file stores keep
// their write error until JetStream restarts; the broker sees the error in
// that log and restarts JetStream in place once space is back (heal.go),
// so a full disk heals without restarting the engine.
package broker
