package scheduler

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/tracing"
)

// startSpan begins the span of a command the scheduler handles (op:
// create, resume, lookup) under the trace context its message carried.
func (s *Scheduler) startSpan(ctx context.Context, op, tenant, session string, req commands.Request) (context.Context, trace.Span) {
	ctx, span, _ := s.tracer.Start(ctx, "paddock.scheduler "+op, trace.SpanKindServer, req.TraceID, req.ParentSpanID, s.tracer.OpAttrs(tenant, session, op, s.cfg.Name)...)
	return ctx, span
}

// respondSpan ends span, failed when reply is an error reply, and answers
// m with reply.
func (s *Scheduler) respondSpan(m *nats.Msg, span trace.Span, reply []byte) {
	var err error
	code := ""
	if span.IsRecording() {
		var rep commands.Reply
		if json.Unmarshal(reply, &rep) == nil && rep.Error != nil {
			code, err = string(rep.Error.Code), errors.New(rep.Error.Message)
		}
	}
	tracing.End(span, code, err)
	s.respond(m, reply)
}

// respondResult answers m with res, or with err when it is set (or when
// res cannot be encoded), and ends span as respondSpan does.
func (s *Scheduler) respondResult(m *nats.Msg, span trace.Span, res any, err error) {
	if err != nil {
		s.respondSpan(m, span, commands.ErrorReply(err))
		return
	}
	b, err := commands.ResultReply(res)
	if err != nil {
		b = commands.ErrorReply(err)
	}
	s.respondSpan(m, span, b)
}
