// Package storage keeps JetStream's storage in hand for Paddock's
// streams: the space each stream reserves, what a write that does not fit
// is, how full each stream is, and a monitor that warns before one fills.
//
// What JetStream does, verified against nats-server 2.15 (its
// server/jetstream.go, and TestReservation here): a stream's MaxBytes is
// reserved when the stream is created or updated, on every server that
// holds a replica, and a stream whose MaxBytes does not fit beside the
// others' reservations is refused (10047). But a write is checked against
// the server's total use only (10023 once it is over max_file_store),
// never against reservations: a stream without MaxBytes can fill the
// space another stream reserved. So the events stream is safe from the
// other streams only when every stream on the server has a MaxBytes and
// the reservations fit; this package's Defaults give Paddock's streams
// such a split, and the engine applies it (cmd/engine).
//
// Beside JetStream's accounting, the filesystems themselves are watched
// with statfs (disk.go, diskwatch.go): a DiskWatcher gives each watched
// path a level (ok, warn, critical) against Thresholds, logs changes, and
// a node refuses new sessions while one of its filesystems is critical.
//
// This package knows no stream of Paddock by name: events, objectstore
// and projector use its helpers when they create their streams, and the
// engine lists the streams to watch.
package storage
