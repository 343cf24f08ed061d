// Package metrics holds Paddock's Prometheus collectors: operations on a
// node, event appends, sessions and processes, scheduler placements, the
// nodes as the scheduler sees them, projector lag and object store bytes;
// and the operators' signals (docs/operations.md): JetStream storage
// against its limits, free disk, sessions by status across the cluster,
// warm pools and their claims, egress decisions, snapshot bytes stored and
// deduplicated, build info and the readiness checks.
//
// A Metrics is made by New with its own prometheus.Registry (never the
// global default) and handed explicitly to whatever records into it
// (nodes.Config.Metrics, scheduler.Config.Metrics, objectstore's
// Store.Metered); a nil *Metrics records nothing, so the hooks in the
// instrumented packages are one unconditional call. Gauges that describe
// state (sessions, processes, node capacity, projector lag) are read at
// scrape time from functions registered with Watch*: nothing polls.
//
// Server serves the registry over HTTP at /metrics, with /healthz and
// /readyz (package health; the checks are Metrics.Ready) beside it;
// CheckAddr refuses a non-loopback listen address unless remote scraping
// was asked for.
//
// Labels are bounded: op names, runtime names, outcomes, error codes
// (a fixed registry), session statuses, placement reasons and node ids
// (a deployment's nodes). No session id, tenant id or command id is ever
// a label.
package metrics
