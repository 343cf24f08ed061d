package tracing

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
)

// Carrier adapts a NATS message header to OpenTelemetry's TextMapCarrier.
// NATS header keys are case-sensitive: Get tries the key as given, then
// its canonical MIME form, so that traceparent set by any client is found.
type Carrier nats.Header

var _ propagation.TextMapCarrier = Carrier(nil)

// Get returns the first value of key, or "".
func (c Carrier) Get(key string) string {
	h := nats.Header(c)
	if v := h.Get(key); v != "" {
		return v
	}
	for k, vs := range h {
		if len(vs) > 0 && equalFold(k, key) {
			return vs[0]
		}
	}
	return ""
}

// Set sets key to value, replacing what was there.
func (c Carrier) Set(key, value string) { nats.Header(c).Set(key, value) }

// Keys returns the header's keys.
func (c Carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// equalFold compares two ASCII keys without regard to case.
func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// propagator is the W3C trace context, the only format Paddock carries.
var propagator = propagation.TraceContext{}

// Extract returns ctx carrying the remote span context of h's traceparent
// (and tracestate). A missing or malformed traceparent is ignored: ctx is
// returned as it is, and the command starts a new trace or continues its
// envelope's.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, Carrier(h))
}

// Inject adds ctx's span context to h as traceparent (and tracestate) and
// returns h, allocated when it was nil. When ctx carries no valid span
// context h is returned unchanged (nil stays nil: no header is sent).
func Inject(ctx context.Context, h nats.Header) nats.Header {
	if !spanContextOf(ctx).IsValid() {
		return h
	}
	if h == nil {
		h = nats.Header{}
	}
	propagator.Inject(ctx, Carrier(h))
	return h
}
