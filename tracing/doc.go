// Package tracing makes Paddock's OpenTelemetry spans: one per command on
// the client, the scheduler and the node, and one for the runtime work of
// a node's operation. The W3C trace context (traceparent, tracestate)
// travels in NATS message headers (Carrier); a request that carries none
// may still name a trace in its envelope (trace_id, parent_span_id), and
// Start continues that trace. Start also returns the ids an operation's
// events record, so that the events and the spans name the same trace and
// the same span (docs/architecture.md, "Traces", has the precedence).
//
// Tracing is off unless a component is given a TracerProvider: New(nil)
// uses OpenTelemetry's no-op provider, which records nothing and costs a
// context lookup per call. NewProvider builds the provider that engine
// serve and agent-node use for --otlp-endpoint.
package tracing
