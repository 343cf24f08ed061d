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

// The node admin ops (commands.NodeCordon, NodeUncordon, NodeRelease) and
// the scheduler's placements are an operator's: only the engine's and
// admins' credentials may send them. What makes that so
// (docs/security.md, "Who may speak on which subject"): the server's
// permissions let no other identity of the PADDOCK account publish on a
// node's subjects, tenants' accounts import only their own command
// subjects, and dispatch drops what JetStream delivered (a consumer whose
// deliver subject names a node's subject) before any handler sees it.

// operator checks that m comes from an operator: a request sent in the
// PADDOCK account (no stamp), never one that crossed a tenant's import
// (stamped) or that JetStream delivered.
func operator(m *nats.Msg) error {
	c, err := auth.CallerOf(m)
	if err != nil {
		return err
	}
	return c.Operator()
}

// decodeAdmin decodes a node admin op's body strictly: a versioned request
// (an empty body, or one without a version, is invalid_request), with no
// member this node does not know, whatever minor version it claims.
func decodeAdmin(data []byte, args any) (commands.Request, error) {
	if len(data) == 0 {
		return commands.Request{}, errcode.New(errcode.InvalidRequest, "a node admin op takes a versioned request body")
	}
	req, err := commands.DecodeRequest(data, args)
	if err != nil {
		return req, err
	}
	if req.Version == "" {
		return req, errcode.New(errcode.InvalidRequest, "a node admin op's request names no version")
	}
	if v, _ := commands.ParseVersion(req.Version); !v.Strict() {
		// A newer minor version may carry members this node would ignore.
		return req, errcode.New(errcode.InvalidRequest, "node admin op of contract %s: this node speaks %s and refuses what it does not know", req.Version, commands.Version)
	}
	return req, nil
}

// handleCordon sets whether the node takes new sessions, records it as a
// node event (cordoned, uncordoned) naming the actor, heartbeats at once
// so that every scheduler knows, and answers the node's info. The request
// carries no args.
func (a *Agent) handleCordon(cordon bool) func(context.Context, *nats.Msg) {
	return func(ctx context.Context, m *nats.Msg) {
		err := operator(m)
		var req commands.Request
		if err == nil {
			req, err = decodeAdmin(m.Data, nil)
		}
		if err == nil && len(req.Args) > 0 && string(req.Args) != "null" && string(req.Args) != "{}" {
			err = errcode.New(errcode.InvalidRequest, "cordon and uncordon take no args")
		}
		if err != nil {
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
				Actor: req.Actor,
			}); err != nil {
				a.logger.Warn("cordon not recorded", "cordoned", cordon, "err", err)
			}
			a.logger.Info("placement changed", "cordoned", cordon, "actor", req.Actor)
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
	req, err := decodeAdmin(m.Data, &args)
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
	a.logger.Info("session released", "tenant", args.Tenant, "session", args.SessionID, "actor", req.Actor)
	b, _ := commands.ResultReply(commands.StatusResult{Status: fmt.Sprint(projection.StatusShutDown)})
	a.respond(m, b)
}
