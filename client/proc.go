package client

import (
	"context"
	"time"

	"github.com/paddock-dev/paddock/commands"
)

// yieldExtra is how long a process call may take beyond its yield window.
func yieldExtra(yieldMS *int64, def int64) time.Duration {
	if yieldMS != nil {
		def = *yieldMS
	}
	return time.Duration(def) * time.Millisecond
}

// ProcStart starts a process that outlives the call and returns its id
// with the output of its first yield window.
func (c *Client) ProcStart(ctx context.Context, id string, args commands.ProcStartArgs, opts ...CallOption) (commands.ProcResult, error) {
	var res commands.ProcResult
	if err := args.Validate(); err != nil {
		return res, err
	}
	err := c.do(ctx, id, commands.OpProcStart, args, &res, yieldExtra(args.YieldMS, commands.DefaultStartYieldMS), opts)
	return res, err
}

// ProcWrite writes args.Input to a process's stdin and returns the output
// of the yield window that follows.
func (c *Client) ProcWrite(ctx context.Context, id string, args commands.ProcArgs, opts ...CallOption) (commands.ProcResult, error) {
	return c.procIO(ctx, id, commands.OpProcWrite, args, opts)
}

// ProcRead returns a process's output of one yield window.
func (c *Client) ProcRead(ctx context.Context, id string, args commands.ProcArgs, opts ...CallOption) (commands.ProcResult, error) {
	return c.procIO(ctx, id, commands.OpProcRead, args, opts)
}

func (c *Client) procIO(ctx context.Context, id string, op commands.Op, args commands.ProcArgs, opts []CallOption) (commands.ProcResult, error) {
	var res commands.ProcResult
	if err := args.Validate(); err != nil {
		return res, err
	}
	err := c.do(ctx, id, op, args, &res, yieldExtra(args.YieldMS, commands.DefaultYieldMS), opts)
	return res, err
}

// ProcResize resizes a process's terminal.
func (c *Client) ProcResize(ctx context.Context, id string, args commands.ProcResizeArgs, opts ...CallOption) error {
	if err := args.Validate(); err != nil {
		return err
	}
	return c.do(ctx, id, commands.OpProcResize, args, nil, 0, opts)
}

// ProcSignal signals a process's whole session ("TERM", "KILL", ...).
func (c *Client) ProcSignal(ctx context.Context, id string, args commands.ProcSignalArgs, opts ...CallOption) error {
	if err := args.Validate(); err != nil {
		return err
	}
	return c.do(ctx, id, commands.OpProcSignal, args, nil, 0, opts)
}

// ProcList lists a session's processes.
func (c *Client) ProcList(ctx context.Context, id string, opts ...CallOption) (commands.ProcListResult, error) {
	var res commands.ProcListResult
	err := c.do(ctx, id, commands.OpProcList, nil, &res, 0, opts)
	return res, err
}
