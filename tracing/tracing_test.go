package tracing_test

import (
	"context"
	"encoding/hex"
	"testing"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddock-dev/paddock/tracing"
)

func TestEnvelopeSpanContext(t *testing.T) {
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, tc := range []struct {
		name, traceID, parent string
		ok                    bool
		wantTrace, wantParent string // wantParent "": derived
	}{
		{"w3c", tid, sid, true, tid, sid},
		{"upper-case", "4BF92F3577B34DA6A3CE929D0E0E4736", "00F067AA0BA902B7", true, tid, sid},
		{"agents-sdk", "trace_" + tid, "span_" + sid, true, tid, sid},
		{"agents-sdk-24", "trace_" + tid, "span_b7ad6b7169203331aaaaaaaa", true, tid, ""},
		{"no-parent", tid, "", true, tid, ""},
		{"free-text", "trace-1", "span-1", false, "", ""},
		{"zero", "00000000000000000000000000000000", sid, false, "", ""},
		{"short", "4bf92f35", sid, false, "", ""},
		{"empty", "", sid, false, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, ok := tracing.EnvelopeSpanContext(tc.traceID, tc.parent)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			if !sc.IsValid() || !sc.IsRemote() || !sc.IsSampled() {
				t.Errorf("span context valid %v remote %v sampled %v, want all true", sc.IsValid(), sc.IsRemote(), sc.IsSampled())
			}
			if got := sc.TraceID().String(); got != tc.wantTrace {
				t.Errorf("trace %s, want %s", got, tc.wantTrace)
			}
			if tc.wantParent != "" && sc.SpanID().String() != tc.wantParent {
				t.Errorf("parent %s, want %s", sc.SpanID(), tc.wantParent)
			}
			again, _ := tracing.EnvelopeSpanContext(tc.traceID, tc.parent)
			if again.SpanID() != sc.SpanID() {
				t.Errorf("parent %s then %s: want the same derived id each time", sc.SpanID(), again.SpanID())
			}
		})
	}
}

func TestCarrierFindsAnyCase(t *testing.T) {
	for _, key := range []string{"traceparent", "Traceparent", "TRACEPARENT"} {
		h := nats.Header{}
		h[key] = []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
		sc := trace.SpanContextFromContext(tracing.Extract(context.Background(), h))
		if got := sc.TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("header key %q: trace %q, want 4bf92f3577b34da6a3ce929d0e0e4736", key, got)
		}
	}
}

func TestInjectExtractRoundTrip(t *testing.T) {
	if h := tracing.Inject(context.Background(), nil); h != nil {
		t.Fatalf("inject without a span context: header %v, want nil", h)
	}
	sc, _ := tracing.EnvelopeSpanContext("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
	h := tracing.Inject(trace.ContextWithRemoteSpanContext(context.Background(), sc), nil)
	if got := h.Get("traceparent"); got != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("traceparent %q", got)
	}
	back := trace.SpanContextFromContext(tracing.Extract(context.Background(), h))
	if back.TraceID() != sc.TraceID() || back.SpanID() != sc.SpanID() {
		t.Errorf("extracted %s/%s, want %s/%s", back.TraceID(), back.SpanID(), sc.TraceID(), sc.SpanID())
	}
}

// With tracing off, Start makes no span, keeps what the request said and
// gives the operation a fresh span id of its own.
func TestStartOff(t *testing.T) {
	tr := tracing.New(nil)
	if tr.Enabled() {
		t.Fatal("tracer of a nil provider is enabled")
	}
	ctx, span, ids := tr.Start(context.Background(), "x", trace.SpanKindServer, "trace-1", "span-1")
	if span.IsRecording() || trace.SpanContextFromContext(ctx).IsValid() {
		t.Errorf("tracing off made a span")
	}
	if ids.TraceID != "trace-1" || ids.ParentSpanID != "span-1" || len(ids.SpanID) != 16 {
		t.Errorf("ids %+v, want the envelope's and a 16-digit span id", ids)
	}
	_, _, ids2 := tr.Start(context.Background(), "x", trace.SpanKindServer, "", "")
	if ids2.SpanID == ids.SpanID || ids2.TraceID != "" {
		t.Errorf("second ids %+v after %+v: want a fresh span id and no trace", ids2, ids)
	}
	sc, _ := tracing.EnvelopeSpanContext("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
	_, _, ids3 := tr.Start(trace.ContextWithRemoteSpanContext(context.Background(), sc), "x", trace.SpanKindServer, "trace-1", "span-1")
	if ids3.TraceID != sc.TraceID().String() || ids3.ParentSpanID != sc.SpanID().String() {
		t.Errorf("ids %+v, want the header's trace and span as parent", ids3)
	}
}

// With tracing on and no trace anywhere, the span starts a trace and the
// events record it.
func TestStartOnNewTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	_, span, ids := tracing.New(tp).Start(context.Background(), "x", trace.SpanKindServer, "", "")
	tracing.End(span, "", nil)
	got := exp.GetSpans()
	if len(got) != 1 {
		t.Fatalf("got %d spans, want 1", len(got))
	}
	if ids.TraceID != got[0].SpanContext.TraceID().String() || ids.SpanID != got[0].SpanContext.SpanID().String() || ids.ParentSpanID != "" {
		t.Errorf("ids %+v, want the span's %s/%s and no parent", ids, got[0].SpanContext.TraceID(), got[0].SpanContext.SpanID())
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		endpoint string
		ok       bool
	}{
		{"", true},
		{"http://127.0.0.1:4318", true},
		{"https://collector.example:4318/v1/traces", true},
		{"127.0.0.1:4318", false},
		{"grpc://127.0.0.1:4317", false},
		{"http://", false},
		{"http://[::1", false},
	} {
		err := tracing.Config{Endpoint: tc.endpoint}.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("endpoint %q: err %v, want ok %v", tc.endpoint, err, tc.ok)
		}
		if _, _, perr := tracing.NewProvider(context.Background(), tracing.Config{Endpoint: tc.endpoint}); (perr == nil) != tc.ok {
			t.Errorf("NewProvider(%q): err %v, want ok %v", tc.endpoint, perr, tc.ok)
		}
	}
}

func TestSubjectOp(t *testing.T) {
	for subj, want := range map[string]string{
		"sbx.cmd.default.create":            "create",
		"sbx.cmd.default.s1.exec":           "exec",
		"sbx.cmd.default.xfer-0a1b2c3d4e5f": "transfer",
		"lookup":                            "lookup",
	} {
		if got := tracing.SubjectOp(subj); got != want {
			t.Errorf("SubjectOp(%q) = %q, want %q", subj, got, want)
		}
	}
}

func newTracer(tp trace.TracerProvider) *tracing.Tracer { return tracing.New(tp) }

// FuzzStart: whatever a request carries (traceparent, tracestate, the
// envelope's fields), Start neither fails nor panics, gives the op a
// 16-hex span id, and records a header's trace only when it is valid.
func FuzzStart(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "k=v", "trace_0af7651916cd43dd8448eb211c80319c", "span_b7ad6b7169203331aaaaaaaa")
	f.Add("garbage", "", "trace-1", "")
	f.Add("00-00000000000000000000000000000000-00f067aa0ba902b7-01", ",,=", "", "00f067aa0ba902b7")
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	on, off := tracing.New(tp), tracing.New(nil)
	f.Fuzz(func(t *testing.T, traceparent, tracestate, traceID, parent string) {
		ctx := tracing.Extract(context.Background(), nats.Header{"traceparent": {traceparent}, "tracestate": {tracestate}})
		header := trace.SpanContextFromContext(ctx)
		for _, tr := range []*tracing.Tracer{on, off} {
			_, span, ids := tr.Start(ctx, "x", trace.SpanKindServer, traceID, parent)
			span.End()
			if _, err := hex.DecodeString(ids.SpanID); err != nil || len(ids.SpanID) != 16 {
				t.Fatalf("span id %q, want 16 hex digits", ids.SpanID)
			}
			if header.IsValid() && ids.TraceID != header.TraceID().String() {
				t.Fatalf("trace %q, want the header's %s", ids.TraceID, header.TraceID())
			}
			if !header.IsValid() && !tr.Enabled() && (ids.TraceID != traceID || ids.ParentSpanID != parent) {
				t.Fatalf("ids %+v, want the envelope's %q %q", ids, traceID, parent)
			}
		}
		exp.Reset()
	})
}
