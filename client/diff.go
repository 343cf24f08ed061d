package client

import (
	"context"

	"github.com/paddock-dev/paddock/commands"
)

// Diff asks the engine what changed in session id's workspace between two
// recorded points (see commands.DiffRequest: from and to are session
// seqs, 0 for "the snapshot before to" and "the newest"), listing up to
// commands.DefaultDiffLimit changes. An unknown session is
// session_not_found, from after to invalid_request.
func (c *Client) Diff(ctx context.Context, id string, from, to uint64) (commands.DiffResult, error) {
	return c.DiffRequest(ctx, commands.DiffRequest{SessionID: id, FromSeq: from, ToSeq: to})
}

// DiffRequest is Diff with every field of the request (a limit).
func (c *Client) DiffRequest(ctx context.Context, r commands.DiffRequest) (commands.DiffResult, error) {
	var res commands.DiffResult
	err := c.request(ctx, c.subj.Diff(c.opts.Tenant), "", r, &res, 0, nil)
	return res, err
}
