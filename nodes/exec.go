package nodes

import (
	"context"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// argv returns the command an exec runs: its argv, or sh -c for shell.
func argv(args *commands.ExecArgs) []string {
	if args.Shell != "" {
		return []string{"/bin/sh", "-c", args.Shell}
	}
	return args.Argv
}

// execTimeout is the exec's timeout, the node's default when it gives none.
func (a *Agent) execTimeout(args *commands.ExecArgs) time.Duration {
	if args.TimeoutMS == 0 {
		return a.cfg.DefaultExecTimeout
	}
	return time.Duration(args.TimeoutMS) * time.Millisecond
}

func execStart(a *Agent, s *session, args *commands.ExecArgs) any {
	r := s.redactor()
	return events.ExecStart{
		Argv: r.strings(argv(args)), Cwd: r.string(args.Cwd), TimeoutMS: a.execTimeout(args).Milliseconds(),
		EnvKeys: sortedKeys(args.Env), User: args.User, Stream: args.Stream,
	}
}

// runExec runs the command to completion. Its output is redacted before
// it is cut to the output cap: the runtime keeps enough beyond the cap
// that a secret which begins before the cut is whole when redacted.
func runExec(ctx context.Context, a *Agent, s *session, args *commands.ExecArgs) (outcome, error) {
	if err := a.cfg.Policy.checkExec(args); err != nil {
		return outcome{}, err
	}
	maxOut := args.MaxOutputBytes
	if maxOut == 0 {
		maxOut = commands.MaxOutputBytes
	}
	r := s.redactor()
	spec := runtime.ExecSpec{
		Argv: argv(args), Env: args.Env, Cwd: args.Cwd, User: args.User,
		Timeout: a.execTimeout(args), MaxOutput: maxOut + r.slack(), Changes: a.attribution(),
	}
	if args.Stream {
		id := commandID(ctx)
		o, err := a.startStream(s, id)
		if err != nil {
			return outcome{}, err
		}
		defer a.endStream(s, id, o)
		spec.Output = o.write
	}
	began := time.Now()
	res, err := s.sandbox().Exec(ctx, spec)
	if err != nil {
		return outcome{}, err
	}
	stdout, outCut := r.output(res.Stdout, maxOut)
	stderr, errCut := r.output(res.Stderr, maxOut)
	outTrunc, errTrunc := res.StdoutTruncated || outCut, res.StderrTruncated || errCut
	code := res.ExitCode
	ok := code == 0
	result := commands.ExecResult{
		ExitCode: code, StdoutBytes: res.StdoutBytes, StderrBytes: res.StderrBytes,
		StdoutTruncated: outTrunc, StderrTruncated: errTrunc,
		DurationMS: float64(time.Since(began).Microseconds()) / 1000,
	}
	result.Stdout, result.StdoutEncoding = commands.EncodeOutput(stdout)
	result.Stderr, result.StderrEncoding = commands.EncodeOutput(stderr)
	return outcome{
		result:   result,
		data:     events.ExecFinish{StdoutBytes: res.StdoutBytes, StderrBytes: res.StderrBytes, Changes: res.Changes},
		exitCode: &code, ok: &ok,
		stdout: stdout, stderr: stderr, outTrunc: outTrunc, errTrunc: errTrunc,
	}, nil
}
