package auditfeed

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
)

// Provisioner returns the events.Provisioner an auditor reads with: it
// asks the engine on the auditor's own subject for the consumer a read
// needs. Errors: the engine's (permission_denied for a filter beyond the
// auditor's tenant), or unavailable when no engine answers.
func Provisioner(nc *nats.Conn, prefix, auditor, tenant string) events.Provisioner {
	subj := commands.Subjects{Prefix: prefix}.AuditConsumer(auditor, tenant)
	return func(ctx context.Context, spec events.ConsumerSpec) error {
		args := commands.AuditConsumerArgs{Filter: spec.Filter, StartSeq: spec.StartSeq, Durable: spec.Durable, Stream: spec.Stream}
		if !spec.StartTime.IsZero() {
			t := spec.StartTime
			args.StartTime = &t
		}
		raw, _ := json.Marshal(args)
		body, _ := json.Marshal(commands.Request{Version: commands.Version, Args: raw})
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
		}
		m, err := nc.RequestWithContext(ctx, subj, body)
		if errors.Is(err, nats.ErrNoResponders) {
			return errcode.New(errcode.Unavailable, "no engine serves auditors' consumers on %s", subj)
		}
		if err != nil {
			return errcode.Wrap(errcode.Unavailable, err, "auditor consumer")
		}
		var rep commands.Reply
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			return errcode.Wrap(errcode.Internal, err, "decode the engine's answer")
		}
		if rep.Error != nil {
			return rep.Error.Err()
		}
		return nil
	}
}
