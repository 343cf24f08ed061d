"""W3C trace context for Paddock requests, as the Go client sends it (tracing.Inject): the
``traceparent`` (and ``tracestate``) NATS headers, plus the envelope's ``trace_id`` and
``parent_span_id`` that Paddock's events record.

The headers come from an explicit :class:`Trace` when the caller gives one, else from
OpenTelemetry's current context when ``opentelemetry`` is importable; otherwise none are sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")

try:  # optional: the caller's OpenTelemetry context, when the application uses it
    from opentelemetry import propagate as _otel_propagate
except ImportError:  # pragma: no cover - depends on the environment
    _otel_propagate = None


@dataclass(frozen=True)
class Trace:
    """Trace context for one request.

    ``traceparent``/``tracestate`` are W3C trace context header values (sent as NATS headers, as
    the Go client does); ``trace_id``/``parent_span_id`` are the envelope's free-form fields that
    Paddock's events record (the OpenAI Agents SDK's ``trace_...``/``span_...`` ids, for example).
    """

    trace_id: str | None = None
    parent_span_id: str | None = None
    traceparent: str | None = None
    tracestate: str | None = None

    def __post_init__(self) -> None:
        if self.traceparent is not None and not _TRACEPARENT.match(self.traceparent):
            raise ValueError(f"traceparent {self.traceparent!r} is not W3C trace context (00-<32 hex>-<16 hex>-<2 hex>)")


def trace_headers(trace: Trace | None) -> dict[str, str] | None:
    """The NATS headers carrying ``trace``'s W3C context, else OpenTelemetry's current one; None
    when there is none (no header is sent, as the Go client sends none)."""
    if trace is not None and trace.traceparent:
        h = {"traceparent": trace.traceparent}
        if trace.tracestate:
            h["tracestate"] = trace.tracestate
        return h
    if _otel_propagate is not None:
        carrier: dict[str, str] = {}
        _otel_propagate.inject(carrier)
        h = {k: v for k, v in carrier.items() if k in ("traceparent", "tracestate")}
        if "traceparent" in h:
            return h
    return None
