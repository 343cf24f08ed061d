// Package health answers a process's liveness and readiness probes:
// /healthz says the process is alive and serving HTTP (it always answers
// 200 while it can answer at all), /readyz runs the readiness checks the
// process registered (JetStream reachable, projector caught up, node
// registered: each process adds its own) and answers 200 only when every
// one passes, else 503, with each check's result as JSON either way.
//
// Checks are functions registered by name with Add; each runs at every
// probe, bounded by Timeout, concurrently with the others. Nothing polls
// between probes. metrics.Server serves both endpoints on the metrics
// address; docs/operations.md says what each check means.
package health
