package client

import (
	"context"
	"sort"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
)

// SessionFilter selects sessions in Sessions. Zero values match all.
type SessionFilter struct {
	// Status keeps sessions in this status.
	Status projection.Status
	// Labels keeps sessions carrying every one of these labels.
	Labels map[string]string
}

func (f SessionFilter) match(r projection.SessionRecord) bool {
	if f.Status != "" && r.Status != f.Status {
		return false
	}
	for k, v := range f.Labels {
		if got, ok := r.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Sessions returns the tenant's sessions that match f, as the engine's
// projector last recorded them (read from the sbx_sessions bucket; see
// `engine projector status` for how far behind the events it is), ordered
// by creation time. Deleted sessions are included, with status deleted. It
// fails with unavailable when the bucket cannot be read.
func (c *Client) Sessions(ctx context.Context, f SessionFilter) ([]projection.SessionRecord, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	ss, err := c.sessions(ctx)
	if err != nil {
		return nil, err
	}
	recs, err := ss.List(ctx, projection.TenantKeys(c.opts.Tenant))
	if err != nil {
		return nil, err
	}
	out := make([]projection.SessionRecord, 0, len(recs))
	for _, r := range recs {
		if f.match(r) {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// Inspect returns one session of the tenant as the projector last recorded
// it (a deleted session has status deleted). It fails with
// session_not_found when the projection has no such session, and with
// unavailable when the bucket cannot be read.
func (c *Client) Inspect(ctx context.Context, id string) (projection.SessionRecord, error) {
	var rec projection.SessionRecord
	if err := commands.CheckToken("session id", id); err != nil {
		return rec, err
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	ss, err := c.sessions(ctx)
	if err != nil {
		return rec, err
	}
	rec, found, err := ss.Get(ctx, c.opts.Tenant, id)
	if err != nil {
		return rec, err
	}
	if !found {
		return rec, errcode.New(errcode.SessionNotFound, "no session %s in tenant %s", id, c.opts.Tenant)
	}
	return rec, nil
}

func (c *Client) sessions(ctx context.Context) (*projector.Sessions, error) {
	js, err := jetstream.New(c.nc)
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "jetstream")
	}
	return projector.OpenSessions(ctx, js)
}

func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.opts.Timeout)
}
