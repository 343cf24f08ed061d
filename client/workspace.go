package client

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/commands"
)

// workspaceTimeout is added to the client's timeout for operations that
// move a whole workspace.
const workspaceTimeout = 30 * time.Minute

// Persist stores the session's workspace as a new snapshot and returns it.
func (c *Client) Persist(ctx context.Context, id string, opts ...CallOption) (commands.Snapshot, error) {
	var res commands.SnapshotResult
	err := c.do(ctx, id, commands.OpPersist, nil, &res, workspaceTimeout, opts)
	if err == nil && res.Snapshot == nil {
		return commands.Snapshot{}, errors.New("persist: the reply has no snapshot")
	}
	if err != nil {
		return commands.Snapshot{}, err
	}
	return *res.Snapshot, nil
}

// Checkpoint writes the session's processes, their memory and its
// workspace into a memory snapshot (issue 27; the runsc runtime only,
// policy_denied on others) and returns the session's status after it
// (stopped unless args.LeaveRunning) and the snapshot.
func (c *Client) Checkpoint(ctx context.Context, id string, args commands.CheckpointArgs, opts ...CallOption) (commands.SnapshotResult, error) {
	var res commands.SnapshotResult
	err := c.do(ctx, id, commands.OpCheckpoint, args, &res, workspaceTimeout, opts)
	if err == nil && res.Snapshot == nil {
		return res, errors.New("checkpoint: the reply has no snapshot")
	}
	return res, err
}

// Hydrate replaces the session's workspace with one of its snapshots or an
// upload.
func (c *Client) Hydrate(ctx context.Context, id string, args commands.HydrateArgs, opts ...CallOption) (commands.HydrateResult, error) {
	var res commands.HydrateResult
	if err := args.Validate(); err != nil {
		return res, err
	}
	err := c.do(ctx, id, commands.OpHydrate, args, &res, workspaceTimeout, opts)
	return res, err
}

// HydrateFrom uploads the tar archive r to the workspace bucket (streamed,
// in chunks, through the engine's transfer service) and replaces the
// session's workspace with it. The node checks
// the archive before it extracts anything.
func (c *Client) HydrateFrom(ctx context.Context, id string, r io.Reader, opts ...CallOption) (commands.HydrateResult, error) {
	if err := commands.CheckToken("session id", id); err != nil {
		return commands.HydrateResult{}, err
	}
	name, _, err := c.upload(ctx, r)
	if err != nil {
		return commands.HydrateResult{}, err
	}
	res, err := c.Hydrate(ctx, id, commands.HydrateArgs{Upload: name}, opts...)
	if err != nil {
		c.discard(ctx, name)
	}
	return res, err
}

// Resume brings a stopped, shut down or lost session back: its node
// resumes it when it still serves it; otherwise the engine places it on a
// node that re-creates it from its last snapshot. secretEnv gives secret
// values again for a re-created sandbox (they are never recorded).
func (c *Client) Resume(ctx context.Context, id string, secretEnv map[string]string, opts ...CallOption) (commands.ResumeResult, error) {
	return c.ResumeWith(ctx, id, commands.ResumeArgs{SecretEnv: secretEnv}, opts...)
}

// ResumeWith is Resume with every resume argument: args.Empty lets a
// session that was never persisted (a lost one, say) come back with an
// empty workspace.
func (c *Client) ResumeWith(ctx context.Context, id string, args commands.ResumeArgs, opts ...CallOption) (commands.ResumeResult, error) {
	var res commands.ResumeResult
	if err := commands.CheckToken("session id", id); err != nil {
		return res, err
	}
	if err := args.Validate(); err != nil {
		return res, err
	}
	err := c.request(ctx, c.subj.Session(c.opts.Tenant, id, commands.OpResume), "", args, &res, workspaceTimeout, opts)
	if !errors.Is(err, nats.ErrNoResponders) {
		return res, err
	}
	err = c.request(ctx, c.subj.Resume(c.opts.Tenant), "", commands.ResumeRequest{SessionID: id, SecretEnv: args.SecretEnv, Empty: args.Empty, AtSeq: args.AtSeq}, &res, workspaceTimeout, opts)
	return res, err
}
