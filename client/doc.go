// Package client is the Go client fleets import to drive Paddock sandboxes
// over NATS. Every method takes a context first and returns typed results;
// failures are *errcode.Error values, so errors.Is(err,
// errcode.ErrSessionNotFound) and friends work across the network.
//
// A command sent to a session whose subject has no responders is explained
// by asking the engine (lookup): session_not_found for a session that
// never existed or was deleted, unavailable when its node is gone.
//
// Sessions and Inspect read the engine's projection (the sbx_sessions KV
// bucket) instead of asking a node: they list deleted and stopped
// sessions too, and trail the events by the projector's lag.
package client
