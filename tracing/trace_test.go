package tracing_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/scheduler"
	"github.com/paddock-dev/paddock/testenv"
)

// traced is a stack whose client, scheduler and node share one tracer
// provider that exports every span, as it ends, to an in-memory exporter:
// the collector of these tests.
type traced struct {
	st  *testenv.Stack
	exp *tracetest.InMemoryExporter
	c   *client.Client
}

func startTraced(t *testing.T, clientTraces bool) traced {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	st := testenv.StartStack(t, testenv.StackOptions{
		Node:      nodes.Config{TracerProvider: tp},
		Scheduler: scheduler.Config{TracerProvider: tp},
	})
	opts := client.Options{}
	if clientTraces {
		opts.TracerProvider = tp
	}
	c, err := client.New(st.ClientConn, opts)
	if err != nil {
		t.Fatal(err)
	}
	return traced{st: st, exp: exp, c: c}
}

// span returns the one ended span named name.
func (tr traced) span(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range tr.exp.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("got %d spans named %q, want 1 (spans: %v)", len(found), name, tr.names())
	}
	return found[0]
}

func (tr traced) names() []string {
	var out []string
	for _, s := range tr.exp.GetSpans() {
		out = append(out, s.Name)
	}
	return out
}

// opEvents returns the start and finish events of the session's last op.
func (tr traced) opEvents(t *testing.T, ctx context.Context, session, op string) (start, finish events.Event) {
	t.Helper()
	evs, err := tr.st.Log.Session(ctx, "default", session)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Op != op {
			continue
		}
		if ev.Phase == events.PhaseStart {
			start = ev
		} else {
			finish = ev
		}
	}
	if start.EventID == "" || finish.EventID == "" {
		t.Fatalf("no start and finish of %s in %d events", op, len(evs))
	}
	return start, finish
}

// wantChild checks that child is a span of parent's trace whose parent is
// parent.
func wantChild(t *testing.T, child, parent tracetest.SpanStub) {
	t.Helper()
	if got, want := child.SpanContext.TraceID(), parent.SpanContext.TraceID(); got != want {
		t.Errorf("%s: trace %s, want %s (that of %s)", child.Name, got, want, parent.Name)
	}
	if got, want := child.Parent.SpanID(), parent.SpanContext.SpanID(); got != want {
		t.Errorf("%s: parent span %s, want %s (%s)", child.Name, got, want, parent.Name)
	}
}

// wantEvents checks that an op's events name node's span: its trace, its
// span id, and its parent.
func wantEvents(t *testing.T, start, finish events.Event, node tracetest.SpanStub) {
	t.Helper()
	for _, ev := range []events.Event{start, finish} {
		if got, want := ev.TraceID, node.SpanContext.TraceID().String(); got != want {
			t.Errorf("%s %s event: trace_id %q, want %q", ev.Op, ev.Phase, got, want)
		}
		if got, want := ev.SpanID, node.SpanContext.SpanID().String(); got != want {
			t.Errorf("%s %s event: span_id %q, want %q", ev.Op, ev.Phase, got, want)
		}
		if got, want := ev.ParentSpanID, node.Parent.SpanID().String(); got != want {
			t.Errorf("%s %s event: parent_span_id %q, want %q", ev.Op, ev.Phase, got, want)
		}
	}
}

// A create is one trace client → scheduler → node → runtime, and an exec
// one trace client → node → runtime; their events name the node's spans.
func TestCreateAndExecAreConnectedTraces(t *testing.T) {
	tr := startTraced(t, true)
	ctx := testenv.Context(t, 60*time.Second)

	res, err := tr.c.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	// Every span has ended by now: each side ends its span before it
	// replies, and the syncer exports a span as it ends.
	cli, sch := tr.span(t, "paddock.client create"), tr.span(t, "paddock.scheduler create")
	node, rt := tr.span(t, "paddock.node create"), tr.span(t, "paddock.runtime create")
	if cli.Parent.IsValid() {
		t.Errorf("client create: parent %s, want a root span", cli.Parent.SpanID())
	}
	if cli.SpanKind != trace.SpanKindClient || sch.SpanKind != trace.SpanKindServer || node.SpanKind != trace.SpanKindServer {
		t.Errorf("span kinds client %s, scheduler %s, node %s; want client, server, server", cli.SpanKind, sch.SpanKind, node.SpanKind)
	}
	wantChild(t, sch, cli)
	wantChild(t, node, sch)
	wantChild(t, rt, node)
	if !sch.Parent.IsRemote() || !node.Parent.IsRemote() || rt.Parent.IsRemote() {
		t.Errorf("remote parents: scheduler %v, node %v, runtime %v; want true, true, false", sch.Parent.IsRemote(), node.Parent.IsRemote(), rt.Parent.IsRemote())
	}
	start, finish := tr.opEvents(t, ctx, res.SessionID, "create")
	wantEvents(t, start, finish, node)

	tr.exp.Reset()
	if _, err := tr.c.Exec(ctx, res.SessionID, commands.ExecArgs{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	cli, node, rt = tr.span(t, "paddock.client exec"), tr.span(t, "paddock.node exec"), tr.span(t, "paddock.runtime exec")
	if cli.Parent.IsValid() {
		t.Errorf("client exec: parent %s, want a root span", cli.Parent.SpanID())
	}
	if cli.SpanContext.TraceID() == sch.SpanContext.TraceID() {
		t.Errorf("exec shares the create's trace %s; want a trace of its own", cli.SpanContext.TraceID())
	}
	wantChild(t, node, cli)
	wantChild(t, rt, node)
	start, finish = tr.opEvents(t, ctx, res.SessionID, "exec")
	wantEvents(t, start, finish, node)
	if n := len(tr.exp.GetSpans()); n != 3 {
		t.Errorf("got %d spans for one exec, want 3: %v", n, tr.names())
	}
}

// A command that names its trace only in its envelope (as the Python
// provider does) is recorded with the envelope's ids, and the node's span
// continues that trace.
func TestEnvelopeTraceIsContinued(t *testing.T) {
	tr := startTraced(t, false)
	ctx := testenv.Context(t, 60*time.Second)
	res, err := tr.c.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, traceID, parent, wantTrace, wantParent string
	}{
		{"w3c", "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"},
		{"agents-sdk", "trace_0af7651916cd43dd8448eb211c80319c", "span_b7ad6b7169203331aaaaaaaa", "0af7651916cd43dd8448eb211c80319c", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr.exp.Reset()
			if _, err := tr.c.Exec(ctx, res.SessionID, commands.ExecArgs{Argv: []string{"true"}}, client.WithTrace(tc.traceID, tc.parent)); err != nil {
				t.Fatal(err)
			}
			node := tr.span(t, "paddock.node exec")
			if got := node.SpanContext.TraceID().String(); got != tc.wantTrace {
				t.Errorf("node span trace %s, want %s", got, tc.wantTrace)
			}
			if tc.wantParent != "" && node.Parent.SpanID().String() != tc.wantParent {
				t.Errorf("node span parent %s, want %s", node.Parent.SpanID(), tc.wantParent)
			}
			start, finish := tr.opEvents(t, ctx, res.SessionID, "exec")
			for _, ev := range []events.Event{start, finish} {
				if ev.TraceID != tc.traceID || ev.ParentSpanID != tc.parent {
					t.Errorf("%s event: trace_id %q parent_span_id %q, want the envelope's %q %q", ev.Phase, ev.TraceID, ev.ParentSpanID, tc.traceID, tc.parent)
				}
				if ev.SpanID != node.SpanContext.SpanID().String() {
					t.Errorf("%s event: span_id %q, want the node span's %s", ev.Phase, ev.SpanID, node.SpanContext.SpanID())
				}
			}
		})
	}
}

// A malformed traceparent header is ignored: the command runs, in a new
// trace, which its events record. A valid header wins over the envelope.
func TestTraceparentHeader(t *testing.T) {
	tr := startTraced(t, false)
	ctx := testenv.Context(t, 60*time.Second)
	res, err := tr.c.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	const headerTrace, headerSpan = "11112222333344445555666677778888", "aaaabbbbccccdddd"
	for _, tc := range []struct {
		name, traceparent, envTrace, wantTrace, wantParent string
	}{
		{"garbage", "not-a-traceparent", "", "", ""},
		{"bad-version", "ff-" + headerTrace + "-" + headerSpan + "-01", "", "", ""},
		{"zero-trace", "00-00000000000000000000000000000000-" + headerSpan + "-01", "", "", ""},
		{"short-span", "00-" + headerTrace + "-aaaa-01", "", "", ""},
		{"valid", "00-" + headerTrace + "-" + headerSpan + "-01", "", headerTrace, headerSpan},
		{"valid-over-envelope", "00-" + headerTrace + "-" + headerSpan + "-01", "4bf92f3577b34da6a3ce929d0e0e4736", headerTrace, headerSpan},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr.exp.Reset()
			body, _ := json.Marshal(commands.Request{Version: commands.Version, TraceID: tc.envTrace, Args: json.RawMessage(`{"argv":["true"]}`)})
			msg := &nats.Msg{Subject: commands.Subjects{}.Session("default", res.SessionID, commands.OpExec), Data: body, Header: nats.Header{"traceparent": []string{tc.traceparent}}}
			rep, err := tr.st.ClientConn.RequestMsgWithContext(ctx, msg)
			if err != nil {
				t.Fatal(err)
			}
			var reply commands.Reply
			if err := json.Unmarshal(rep.Data, &reply); err != nil || reply.Error != nil {
				t.Fatalf("reply %s (%v), want a result", rep.Data, err)
			}
			node := tr.span(t, "paddock.node exec")
			wantTrace, wantParent := tc.wantTrace, tc.wantParent
			if wantTrace == "" { // a new trace: the node's span is its root
				if node.Parent.IsValid() {
					t.Errorf("node span has parent %s, want none", node.Parent.SpanID())
				}
				wantTrace = node.SpanContext.TraceID().String()
				if wantTrace == headerTrace {
					t.Errorf("node span took the malformed header's trace %s", wantTrace)
				}
			} else if got := node.SpanContext.TraceID().String(); got != wantTrace || node.Parent.SpanID().String() != wantParent {
				t.Errorf("node span trace %s parent %s, want %s %s", got, node.Parent.SpanID(), wantTrace, wantParent)
			}
			start, finish := tr.opEvents(t, ctx, res.SessionID, "exec")
			for _, ev := range []events.Event{start, finish} {
				if ev.TraceID != wantTrace || ev.ParentSpanID != wantParent || ev.SpanID != node.SpanContext.SpanID().String() {
					t.Errorf("%s event: trace %q parent %q span %q; want %q %q %q", ev.Phase, ev.TraceID, ev.ParentSpanID, ev.SpanID, wantTrace, wantParent, node.SpanContext.SpanID())
				}
			}
		})
	}
}
