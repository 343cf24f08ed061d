// Package scheduler is the engine's placement service. It serves
// <prefix>.cmd.<tenant>.create in a queue group (several engines may run
// it), picks a node that is up, offers the requested runtime and has room,
// and forwards the create to <prefix>.node.<node>.create. It learns nodes
// from their heartbeats.
//
// It also serves <prefix>.cmd.<tenant>.lookup, which clients call when a
// session subject has no responders, to tell a session that never existed
// or was deleted (session_not_found) from one whose node is gone
// (unavailable). The answer comes from the session's events.
package scheduler
