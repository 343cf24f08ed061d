// Package nodes is the node agent: the process on each host that owns
// sessions, executes their commands against the host's runtimes, and
// records every operation as a start and a finish event.
//
// An Agent serves <prefix>.node.<id>.create (placements forwarded by the
// engine's scheduler) and, for each session it owns,
// <prefix>.cmd.<tenant>.<session>.>, so NATS routes each command to the
// host that holds the sandbox. It heartbeats on <prefix>.nodehb.<id> so the
// scheduler knows it, its runtimes and its room.
//
// Per session, event appends are serialised and guarded by the stream
// sequence of the session's last event, so seq is gap-free and a second
// writer is refused (concurrency_conflict). Operations themselves may run
// concurrently: a long exec does not block running or ls.
//
// Lifecycle of a session as the agent sees it:
//
//	create ──▶ running ──stop──▶ stopped ──start──▶ running
//	              │                 │
//	              └────shutdown─────┴──▶ shut_down ──delete──▶ (forgotten)
//	running/stopped ──delete──▶ (shut down, then forgotten)
package nodes
