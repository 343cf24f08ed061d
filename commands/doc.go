// Package commands is the wire contract between fleets, the engine and node
// agents: the subjects commands travel on, the request envelope, the
// arguments and results of every operation, and the reply shape.
//
// A command is a NATS request on
//
//	<prefix>.cmd.<tenant>.create             served by the engine's scheduler
//	<prefix>.cmd.<tenant>.<session>.<op>     served by the node that owns the session
//
// with a Request as its body (the op's arguments in Request.Args) and a
// Reply as its answer. Decoding is strict: unknown fields, trailing data and
// missing required values are invalid_request errors (see package errcode).
// docs/architecture.md describes the contract in prose.
package commands
