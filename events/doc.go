// Package events is Paddock's audit log: the event schema, the JetStream
// stream that holds it (SBX_EVENTS), the guarded appender that gives every
// session one writer and a gap-free seq, and readers that replay or tail it.
//
// Every operation on a session is recorded as a start event and a finish
// event on <prefix>.evt.<tenant>.<session>.<op>.<phase>. Field names follow
// the OpenAI Agents SDK sandbox audit events so tools written for those read
// these. Node lifecycle events go to <prefix>.nodeevt.<node>.<kind> in the
// same stream.
//
// Chain is the writer's side of one session's history: the seq, the hash
// chain and the fencing every writer (a node, an engine closing a loss)
// appends through.
//
// Read replays or tails through an ordered consumer; ReadDurable reads
// through a named durable consumer that acknowledges what it delivered, so
// an auditor resumes where it left off. Subjects.Parse reads a subject
// back into what it names. ToSDK converts an event to the OpenAI Agents
// SDK's own audit event format, for tools that read that.
package events
