package nodes

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
)

// The node admin ops (commands.NodeCordon, NodeUncordon, NodeRelease) are
// an operator's: only the engine's and admins' credentials may send them
// (the PADDOCK account's users; a node's own permissions do not reach
// another node's subjects, and tenants' accounts import only their own
// command subjects).

// operator checks that m comes from an operator: without auth (no
// account stamp) anyone on the bus is, with auth only a user of the
// PADDOCK account that is not a node.
func operator(m *nats.Msg) error {
	c, err := auth.CallerOf(m)
	if err != nil {
		return err
	}
	if c.Vouched() && c.Account != auth.PaddockAccount {
		return errcode.New(errcode.PermissionDenied, "node admin ops are for the engine's and admins' credentials")
	}
	return nil
}

// handleCordon sets whether the node takes new sessions, records it as a
// node event (cordoned, uncordoned), heartbeats at once so that every
// scheduler knows, and answers the node's info.
func (a *Agent) handleCordon(cordon bool) func(context.Context, *nats.Msg) {
	return func(ctx context.Context, m *nats.Msg) {
		if err := operator(m); err != nil {
			a.respond(m, commands.ErrorReply(err))
			return
		}
		a.mu.Lock()
		changed := a.cordoned != cordon
		a.cordoned = cordon
		a.mu.Unlock()
		if changed {
			kind := projection.KindUncordoned
			if cordon {
				kind = projection.KindCordoned
			}
			if err := a.log.AppendNode(ctx, &events.NodeEvent{
				Version: events.Version, EventID: uuid.NewString(), TS: time.Now().UTC(), Node: a.cfg.ID, Kind: kind,
			}); err != nil {
				a.logger.Warn("cordon not recorded", "cordoned", cordon, "err", err)
			}
			a.logger.Info("placement changed", "cordoned", cordon)
		}
		a.heartbeat()
		b, _ := commands.ResultReply(a.info())
		a.respond(m, b)
	}
}

// handleRelease stops serving a session that is shut down (its sandbox is
// gone; its snapshots stay): its subject has no responder from then on,
// so its next resume goes to the scheduler, which places it on a node
// that is up and not cordoned. A session in any other status is
// invalid_state: shut it down first (engine node drain does).
func (a *Agent) handleRelease(ctx context.Context, m *nats.Msg) {
	if err := operator(m); err != nil {
		a.respond(m, commands.ErrorReply(err))
		return
	}
	var args commands.ReleaseArgs
	_, err := commands.DecodeRequest(m.Data, &args)
	if err == nil {
		err = args.Validate()
	}
	if err != nil {
		a.respond(m, commands.ErrorReply(err))
		return
	}
	a.mu.Lock()
	s := a.sessions[sessionKey(args.Tenant, args.SessionID)]
	a.mu.Unlock()
	switch {
	case s == nil:
		err = errcode.New(errcode.SessionNotFound, "node %s does not serve session %s", a.cfg.ID, args.SessionID)
	case s.getStatus() != projection.StatusShutDown:
		err = errcode.New(errcode.InvalidState, "session %s is %s; shut it down before releasing it", args.SessionID, s.getStatus())
	}
	if err != nil {
		a.respond(m, commands.ErrorReply(err))
		return
	}
	a.forget(s)
	a.logger.Info("session released", "tenant", args.Tenant, "session", args.SessionID)
	b, _ := commands.ResultReply(commands.StatusResult{Status: fmt.Sprint(projection.StatusShutDown)})
	a.respond(m, b)
}
