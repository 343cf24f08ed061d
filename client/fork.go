package client

import (
	"context"
	"time"

	"github.com/paddock-dev/paddock/commands"
)

// forkTimeout is what a fork may take beyond the client's default: a
// persist of the parent and the creates of its children.
const forkTimeout = 5 * time.Minute

// Fork forks session id into req.N children (req.SessionID is set to id)
// with its workspace at one recorded point: the one named by
// req.SnapshotID or req.AtSeq, else a persist the fork makes first. The
// result names the children that came up, the point (commands.Parent)
// and the children that did not. A session no node serves is
// invalid_state (resume it first); N over the operator's maximum is
// policy_denied; a snapshot the session never recorded is
// snapshot_not_found.
func (c *Client) Fork(ctx context.Context, id string, req commands.ForkRequest, opts ...CallOption) (commands.ForkResult, error) {
	var res commands.ForkResult
	req.SessionID = id
	if err := req.Validate(); err != nil {
		return res, err
	}
	err := c.request(ctx, c.subj.Fork(c.opts.Tenant), "", req, &res, forkTimeout, opts)
	return res, err
}
