// Package testenv holds the helpers Paddock's tests share: an embedded
// nats-server with JetStream on disk in a temporary directory, listening on
// 127.0.0.1 on a free port; a whole stack (events stream, scheduler, a node
// agent on the local runtime, a client); and Eventually, which polls a
// condition with a deadline instead of sleeping.
//
// Everything started here is stopped by t.Cleanup.
package testenv
