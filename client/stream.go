package client

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
)

// ExecStream runs a command like Exec and gives its output to out as it
// comes (stdout and stderr as they were written, secret values redacted),
// pulling it with exec_read while the exec's own request waits for the
// result. out is called from this goroutine, in order; the node waits
// for it (a slow out slows the command, never fills the node). The
// result is Exec's; its Stdout and Stderr repeat the start of what out
// got.
func (c *Client) ExecStream(ctx context.Context, id string, args commands.ExecArgs, out func(stderr bool, p []byte), opts ...CallOption) (commands.ExecResult, error) {
	args.Stream = true
	if err := args.Validate(); err != nil {
		return commands.ExecResult{}, err
	}
	cmdID := uuid.NewString()
	opts = append([]CallOption{WithCommandID(cmdID)}, opts...)
	type reply struct {
		res commands.ExecResult
		err error
	}
	replied := make(chan reply, 1)
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // the exec itself; ends with its reply or ectx
		res, err := c.Exec(ectx, id, args, opts...)
		replied <- reply{res, err}
	}()
	var (
		after int64
		final *reply
		wait  = int64(1000)
	)
	for {
		var res commands.ExecReadResult
		err := c.do(ctx, id, commands.OpExecRead, commands.ExecReadArgs{ExecCommandID: cmdID, After: after, WaitMS: &wait}, &res, time.Duration(wait)*time.Millisecond, nil)
		if err != nil {
			if final != nil {
				return final.res, final.err
			}
			cancel()
			r := <-replied
			return r.res, errors.Join(err, r.err)
		}
		for _, ch := range res.Chunks {
			if ch.Seq <= after {
				continue
			}
			out(ch.Stream == "stderr", ch.Data)
			after = ch.Seq
		}
		if res.Done {
			if final != nil {
				return final.res, final.err
			}
			r := <-replied
			return r.res, r.err
		}
		if final == nil {
			select {
			case r := <-replied:
				final = &r
				if r.err != nil && errcode.Of(r.err) != errcode.ExecTimeout {
					return r.res, r.err // it never ran, or failed: no stream to drain
				}
			default:
			}
		}
		if res.Unknown && final != nil {
			return final.res, final.err // its stream is gone (dropped, or never made)
		}
		if res.Unknown { // the exec has not reached the node yet
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}
