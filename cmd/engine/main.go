// Command engine is Paddock's control plane and its CLI.
//
//	engine serve                      run the engine (embedded NATS + a local node)
//	engine sandbox <command> ...      drive sandboxes
//	engine events tail ...            print the audit trail
//	engine replay, audit verify       rebuild and check state from the events
//
// Run `engine help` for the full list.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	flag "github.com/spf13/pflag"

	"github.com/paddock-dev/paddock/errcode"
)

const usage = `Paddock: an event-sourced sandbox engine on NATS.

Usage:
  engine serve [flags]                         run the engine (embedded NATS + a local node)
  engine sandbox create [flags]                create a session; prints its id
                                               --egress none|allow|open, --allow DEST...:
                                               what the sandbox may reach (docs/security.md)
  engine sandbox exec ID [flags] [--stream] -- CMD [ARG...]
                                               --stream (exec_read; the default on a terminal):
                                               the output as it comes, all of it
  engine sandbox write ID PATH                 content from stdin
  engine sandbox read ID PATH                  content to stdout
  engine sandbox ls ID [PATH] [--json]
  engine sandbox rm ID PATH [-r] [-f]
  engine sandbox mkdir ID PATH [-p]
  engine sandbox running ID
  engine sandbox port ID PORT [--json]         the address that reaches a port the create exposed (--expose)
  engine sandbox start|stop|shutdown|delete ID   stop persists the workspace first
  engine sandbox persist ID [--json]           snapshot the workspace; prints the snapshot id
  engine sandbox checkpoint ID [--leave-running] [--json]
                                               snapshot the processes and their memory with the workspace
                                               (runsc nodes; stop --memory is a checkpoint that stops)
  engine sandbox hydrate ID --from FILE.tar|- | --snapshot SNAP
                                               replace the workspace, all or nothing
  engine sandbox resume ID [--secret-env K=V]... [--empty] [--at SEQ] [--egress MODE] [--allow DEST]... [--json]
                                               bring a stopped, shut down or lost session back
  engine sandbox fork ID [-n N] [--from SNAP | --at SEQ] [--secret-env K=V]... [--json]
                                               fork into N children (the parent's workspace at that point); prints their ids
  engine sandbox diff ID [--from SEQ] [--to SEQ] [--limit N] [--json]
                                               paths created (+), modified (~), removed (-) between two snapshots
  engine sandbox shell ID [-- CMD [ARG...]]    a terminal in the sandbox (default /bin/sh); exits with its code
  engine sandbox proc start ID [--tty] [--rows N --cols N] [--yield D] [--json] -- CMD [ARG...]
                                               start a process that outlives the call; prints its id
  engine sandbox proc write ID PID [TEXT|-] [--close] [--yield D]
                                               TEXT with \n \r \t \e \xNN escapes, - for stdin
  engine sandbox proc read ID PID [--yield D] [--follow]
  engine sandbox proc list ID [--json]
  engine sandbox proc kill ID PID [--signal TERM]
  engine sandbox proc resize ID PID ROWS COLS
  engine sandbox list [--status S] [--label K=V] [--all] [--json]   deleted ones only with --all
  engine sandbox inspect ID [--json]           sessions as the projection has them
  engine events tail [--session ID] [--op OP] [--since SEQ|TIME|DURATION]
                     [--durable NAME] [--all-tenants] [--no-follow] [--json]
  engine events export [--session ID] [--format stored|sdk]
                     the events, one JSON per line: as stored (default), or in
                     the OpenAI Agents SDK's audit event format (ls, rm, mkdir,
                     exec_read and the proc ops skipped: the SDK has no op for them)
  engine events repartition --partitions N   move a one-stream deployment onto N
                     partitions (external NATS; engines and nodes stopped)
  engine replay [--at SEQ|TIME] [--json]       fold the stream from its first event
  engine replay --session ID [--at SEQ|TIME] [--json]
  engine replay --verify                       compare the KV projection with the replay
  engine replay --tree ID [--json]             the lineage tree (forks) of the session's family
  engine audit verify [--session ID] [--json]  hash chain, seq, one finish per start
  engine projector status [--json]             the projector's checkpoint and lag
  engine node list [--json]                    the nodes: live ones from their heartbeats, the rest as recorded
  engine node cordon|uncordon NODE             take a node out of placement, or put it back
  engine node drain NODE [--json]              cordon, then move its sessions: stop (persist), shut down,
                                               release, resume elsewhere; reports each session
  engine status [--json]                       servers, streams (replicas, leader, followers, bytes
                                               against their limits: warning at 80%), nodes, projectors
  engine snapshot ls [SESSION] [--all-tenants] [--totals] [--json]
                                               workspace snapshots and their sizes
  engine snapshot rm SESSION SNAPSHOT...|--all, rm --deleted [--all-tenants]
                                               delete snapshots (of deleted sessions): frees the quota
  engine gc [--dry-run] [--json] [--transfer-ttl D] [--orphan-grace D] [--deleted-retention D] [--snapshot-keep N]
                                               one retention sweep: expired transfer objects, unfinished puts
                                               (silent for --orphan-grace, 10m), snapshots of deleted sessions,
                                               beyond the newest N (engine serve sweeps every --gc-interval, 1h,
                                               and unfinished puts every --orphan-grace)
  engine image build-base [--tag T]            build the sandbox base image (needs busybox-static)
  engine image build-python [--tag T] [--suite S] [--mirror URL] [--cache-dir D] [--rootfs DIR]
                                               build the sandbox image with Python and git (debootstrap)
  engine runtime register-gvisor [--daemon-json F]  register gVisor's runsc with Docker (agent-node --runtime gvisor)
  engine auth add|ls|creds|rm|server-config|node-keys  identities and credentials (engine auth -h)
  engine cluster config --out DIR [--servers 3] [--host H] [--client-port 4222] [--route-port 6222]
                        [--tls] [--insecure]   a nats-server config per server of a cluster, with route
                                               authorization (and TLS beyond loopback); prints the URLs
  engine cluster wait [--replicas N] [--nodes N] [--timeout D]
                                               wait until the servers, streams and nodes are up
  engine cluster balance [--json]              spread the event partitions' leaders over the servers
  engine nats-server -c FILE                   run a NATS server from a config file (SIGHUP reloads it)
  engine config print [--config FILE] [--json] the effective settings of serve: value and source
                                               (flag, env, file, default), secrets masked
  engine mcp [--events-creds FILE] [--http HOST:PORT --tokens FILE] [--json]
                                               serve sandbox tools over MCP: stdio as --creds' identity, or
                                               streamable HTTP, each bearer token an identity (docs/cli.md)
  engine version, engine --version             the engine's version and the command contract's
  engine completion bash|zsh|fish|powershell   a shell completion script
  engine help [COMMAND]                        this text, or a command's flags (also COMMAND --help)

Global flags (before the command, or among a command's flags; not for serve):
  --server URL    NATS URL (env PADDOCK_URL, default nats://127.0.0.1:4222)
  --tenant NAME   tenant (env PADDOCK_TENANT; default: the credentials' tenant, else "default")
  --creds FILE    credentials (env PADDOCK_CREDS; default: the admin credentials engine serve
                  wrote under its default state dir; "none" for a server without auth)
  --tls-ca FILE   CA of the server's TLS certificate (env PADDOCK_TLS_CA)

The readers (audit verify, replay, events tail|export, sandbox list|inspect) wait up to --wait
(default 30s) for JetStream and the stream they read to be ready, then say what they waited for.

Every command takes --json: one JSON object on stdout (JSON lines for the streams: events tail,
sandbox exec --stream, sandbox proc read --follow). Human output gives times in RFC 3339, UTC.

Exit codes:
  0        success
  1..123   sandbox exec, sandbox shell, proc read --follow: the command's own exit code
           (128+N for a command killed by signal N); audit verify, node drain: 1 when they found failures
  2        usage: an unknown command or flag, a bad argument (error: invalid_request: ...)
  124      exec_timeout: the command ran out of its --timeout (as timeout(1))
  125      Paddock's own failure: engine, server, transport, permission (error: <code>: ...)

serve reads a configuration file (--config FILE, env PADDOCK_CONFIG; YAML, keys are the flag
names) and the environment (PADDOCK_<FLAG>): flags > env > file > defaults. See docs/cli.md.

Run "engine COMMAND --help" for a command's flags.
`

func main() {
	// The process's lifetime context: cancelled on SIGINT/SIGTERM.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// exitError carries a process exit code out of a command.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// run executes one CLI invocation and returns the process exit code. It
// builds the command tree anew for every call (no package state), so the
// tests call it as main does.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(ctx, &args, streams{in: stdin, out: stdout, err: stderr})
	// Twice: a one-dash global before the command (-server URL) hides the
	// command from the first look.
	args = normalizeArgs(root, normalizeArgs(root, args))
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var ran ranErr
	var e *errcode.Error
	switch {
	case errors.As(err, &ran):
		err = ran.err
	case err != nil && !errors.As(err, &e):
		err = usageErr("%v", err) // cobra's: an unknown flag or command
	}
	return report(err, stderr)
}

// report prints err as "error: <code>: <message>" and returns the exit code.
func report(err error, stderr io.Writer) int {
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, flag.ErrHelp):
		return 0
	}
	var e *errcode.Error
	if !errors.As(err, &e) {
		e = &errcode.Error{Code: errcode.Internal, Message: err.Error()}
	}
	// Error adds the cause of an error met here in the CLI (a connection
	// refused, a file not found); errors from the wire carry none.
	fmt.Fprintf(stderr, "error: %s\n", e.Error())
	switch e.Code {
	case errcode.InvalidRequest:
		return 2
	case errcode.ExecTimeout:
		return 124
	}
	return exitFailure
}

// exitFailure is the exit code of Paddock's own failures (the engine's,
// the transport's, the server's): one a command rarely uses, as docker
// run's 125, so that sandbox exec can pass its command's code through.
const exitFailure = 125

// newFlagSet returns a flag set that reports parse errors as
// invalid_request instead of exiting. A declaration pass (declareFlags)
// passes its declaration as stderr.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SortFlags = false
	fs.SetOutput(stderr)
	return fs
}

func usageErr(format string, args ...any) error {
	return errcode.New(errcode.InvalidRequest, format, args...)
}
