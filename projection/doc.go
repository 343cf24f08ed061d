// Package projection folds session events into current state. Apply is
// pure, with no I/O, so the live projector, replay tooling, the engine's
// lookups and tests all share it.
//
// The session state machine (a transition happens on an ok finish event;
// a failed create ends in failed):
//
//	             create ok               stop ok
//	(none) ──▶ creating ──▶ running ◀──────────────▶ stopped
//	              │           │        start ok        │
//	  create fail │           │ shutdown ok            │ shutdown ok
//	              ▼           ▼                        ▼
//	           failed      shut_down ◀─────────────────┘
//	                          │ delete ok (also from running, stopped, failed)
//	                          ▼
//	                       deleted
//
// Impossible histories (a seq gap, a finish without its start, an event
// after delete that opens a new operation, a first event that is not a
// create start) are reported as *Error values and leave the state as it
// was before the event.
package projection
