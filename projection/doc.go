// Package projection folds events into current state. Apply (sessions)
// and ApplyNode (nodes) are pure, with no I/O, so the live projector,
// replay tooling, the engine's lookups and tests all share them.
//
// The session state machine (a transition happens on an ok finish event;
// a failed create ends in failed; a failed operation changes nothing but
// LastError):
//
//	             create ok               stop ok
//	(none) ──▶ creating ──▶ running ◀──────────────▶ stopped
//	              │           │  ▲     start ok        │
//	  create fail │           │  │ resume ok           │ shutdown ok
//	              ▼           ▼  │ (also from stopped) ▼
//	           failed      shut_down ◀─────────────────┘
//	                          │ delete ok (also from running, stopped, failed)
//	                          ▼
//	                       deleted
//
// node_lost ok (recorded by the engine when the session's node missed its
// heartbeats past the TTL) takes running or stopped to lost; resume ok
// brings lost back to running (on another node, at a new epoch), and
// shutdown and delete work from lost as from stopped.
//
// A resume may move the session to another node at a new epoch (its
// finish data says where). Nodes: registered → up → draining → stopped,
// lost from up or draining, and registered again from anything.
//
// Impossible histories (a seq gap, a finish without its start, an event
// after delete that opens a new operation, a first event that is not a
// create start or a registration) are reported as *Error values and leave
// the state as it was before the event.
//
// SessionRecord and NodeRecord wrap the states with the bookkeeping of a
// projection read from the stream: the last stream sequence taken in
// (which makes taking an event in idempotent) and the events that could
// not be applied (Problems). They are what the projector stores in KV and
// what Set, replay's in-memory fold of a whole stream, holds.
package projection
