package tracing

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of Paddock's spans.
const ScopeName = "github.com/paddock-dev/paddock"

// Tracer makes the spans of one component. The zero value is not usable:
// use New.
type Tracer struct {
	tr trace.Tracer // nil: tracing off
}

// New returns a tracer on tp; nil tp is tracing off: no spans are made,
// and Start only works out the events' ids.
func New(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		return &Tracer{}
	}
	return &Tracer{tr: tp.Tracer(ScopeName)}
}

// Enabled reports whether the tracer makes spans.
func (t *Tracer) Enabled() bool { return t.tr != nil }

// noSpan is the span of a tracer that is off: it records nothing, and
// ending it ends nothing (unlike the span a caller's ctx may hold).
var noSpan = trace.SpanFromContext(context.Background())

// IDs are the trace fields an operation's events record.
type IDs struct {
	// TraceID is the trace the operation belongs to ("" when none).
	TraceID string
	// SpanID is the operation's own span id (16 hex digits): its span's
	// when one is recorded, else a random one.
	SpanID string
	// ParentSpanID is the span that sent the command ("" when none).
	ParentSpanID string
}

// Start begins span name for a command under ctx, whose span context is
// the one Extract took from the message (or an in-process parent), with
// the request envelope's trace_id and parent_span_id as the fallback. It
// returns the context for the command's work, the span (end it), and the
// ids the command's events record:
//
//   - a valid span context in ctx wins: the events record its trace id and
//     its span as the parent; the envelope's fields are kept on the span
//     as attributes when they differ;
//   - else the envelope's fields are recorded as they are, and the span
//     continues their trace when trace_id is 32 hex digits (optionally
//     "trace_"-prefixed, the OpenAI Agents SDK's form): the parent span is
//     parent_span_id when that is 16 hex digits (optionally "span_"-
//     prefixed), else the first 8 bytes of its SHA-256;
//   - else (no trace anywhere) the span starts a new trace, which the
//     events record; with tracing off they record none, as before.
//
// SpanID is the span's id whenever the tracer made a span of its own,
// else a fresh random id. With tracing off ctx is returned as it is (a
// span context in it still travels on) with a no-op span. Start never
// fails.
func (t *Tracer) Start(ctx context.Context, name string, kind trace.SpanKind, traceID, parentSpanID string, attrs ...attribute.KeyValue) (context.Context, trace.Span, IDs) {
	var ids IDs
	parent := trace.SpanContextFromContext(ctx)
	if t.tr == nil {
		if parent.IsValid() {
			ids.TraceID, ids.ParentSpanID = parent.TraceID().String(), parent.SpanID().String()
		} else {
			ids.TraceID, ids.ParentSpanID = traceID, parentSpanID
		}
		ids.SpanID = RandomSpanID()
		return ctx, noSpan, ids
	}
	fromEnvelope := false
	switch {
	case parent.IsValid():
		ids.TraceID, ids.ParentSpanID = parent.TraceID().String(), parent.SpanID().String()
		if traceID != "" && traceID != ids.TraceID {
			attrs = append(attrs, attribute.String("paddock.envelope.trace_id", traceID))
		}
		if parentSpanID != "" && parentSpanID != ids.ParentSpanID {
			attrs = append(attrs, attribute.String("paddock.envelope.parent_span_id", parentSpanID))
		}
	case traceID != "" || parentSpanID != "":
		ids.TraceID, ids.ParentSpanID = traceID, parentSpanID
		fromEnvelope = true
		if sc, ok := EnvelopeSpanContext(traceID, parentSpanID); ok {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
			parent = sc
		} else {
			attrs = append(attrs, attribute.String("paddock.envelope.trace_id", traceID), attribute.String("paddock.envelope.parent_span_id", parentSpanID))
		}
	}
	ctx, span := t.tr.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	sc := span.SpanContext()
	if sc.IsValid() && sc.SpanID() != parent.SpanID() {
		ids.SpanID = sc.SpanID().String()
		if !fromEnvelope {
			ids.TraceID = sc.TraceID().String()
		}
		return ctx, span, ids
	}
	ids.SpanID = RandomSpanID()
	return ctx, span, ids
}

// Child begins span name under the span in ctx (the runtime call of a
// node's operation). With tracing off it returns a no-op span.
func (t *Tracer) Child(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t.tr == nil {
		return ctx, noSpan
	}
	return t.tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
}

// End ends span, marking it failed with err's text when err is not nil
// and code (a Paddock error code, "" for none) as an attribute.
func End(span trace.Span, code string, err error) {
	if err != nil && span.IsRecording() {
		if code != "" {
			span.SetAttributes(attribute.String("paddock.error_code", code))
		}
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// EnvelopeSpanContext returns the remote span context a request envelope
// names, and false when its trace_id is not 32 hex digits (after an
// optional "trace_" prefix) or is all zeros. A parent_span_id that is not
// 16 hex digits (after an optional "span_" prefix) maps to the first 8
// bytes of its SHA-256 (of the trace id when it is empty), so that the
// span still continues the trace. The context is sampled and remote.
func EnvelopeSpanContext(traceID, parentSpanID string) (trace.SpanContext, bool) {
	tid, err := trace.TraceIDFromHex(strings.ToLower(strings.TrimPrefix(traceID, "trace_")))
	if err != nil || !tid.IsValid() {
		return trace.SpanContext{}, false
	}
	sid, err := trace.SpanIDFromHex(strings.ToLower(strings.TrimPrefix(parentSpanID, "span_")))
	if err != nil || !sid.IsValid() {
		seed := parentSpanID
		if seed == "" {
			seed = traceID
		}
		sum := sha256.Sum256([]byte(seed))
		copy(sid[:], sum[:8])
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	return sc, sc.IsValid()
}

// RandomSpanID returns a fresh span id, 16 hex digits.
func RandomSpanID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

func spanContextOf(ctx context.Context) trace.SpanContext {
	return trace.SpanContextFromContext(ctx)
}

// OpAttrs are the attributes of an operation's span on a node or the
// scheduler (node: the node's or the engine's name); nil when tracing is off.
func (t *Tracer) OpAttrs(tenant, session, op, node string) []attribute.KeyValue {
	if t.tr == nil {
		return nil
	}
	return []attribute.KeyValue{
		attribute.String("paddock.tenant", tenant),
		attribute.String("paddock.session_id", session),
		attribute.String("paddock.op", op),
		attribute.String("paddock.node", node),
	}
}

// RuntimeAttrs are the attributes of a runtime call's span; nil when
// tracing is off.
func (t *Tracer) RuntimeAttrs(runtime string) []attribute.KeyValue {
	if t.tr == nil {
		return nil
	}
	return []attribute.KeyValue{attribute.String("paddock.runtime", runtime)}
}

// ClientAttrs are the attributes of a client command's span; nil when
// tracing is off.
func (t *Tracer) ClientAttrs(tenant, session, commandID string) []attribute.KeyValue {
	if t.tr == nil {
		return nil
	}
	attrs := []attribute.KeyValue{attribute.String("paddock.tenant", tenant), attribute.String("paddock.command_id", commandID)}
	if session != "" {
		attrs = append(attrs, attribute.String("paddock.session_id", session))
	}
	return attrs
}

// SubjectOp names the command a subject carries, for a span name: its
// last token ("exec", "create", "lookup"), or "transfer" for a transfer's
// own subject (xfer-<id>, one per transfer).
func SubjectOp(subject string) string {
	op := subject[strings.LastIndexByte(subject, '.')+1:]
	if strings.HasPrefix(op, "xfer-") {
		return "transfer"
	}
	return op
}
