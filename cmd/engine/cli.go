package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	flag "github.com/spf13/pflag"

	"github.com/paddock-dev/paddock/cmd/internal/buildinfo"
	"github.com/paddock-dev/paddock/commands"
)

// The command tree is cobra's (docs/cli.md says why). Each leaf still
// declares and parses its flags in the function that does its work
// (sandbox, nodeCmd, serve, ...): cobra learns those flags by a
// declaration pass (declareFlags) and gives them --help, completion and
// checking; the function then parses the leaf's own arguments again,
// exactly as before the move to cobra.

// streams are the standard streams a command reads and writes.
type streams struct {
	in       io.Reader
	out, err io.Writer
}

// invoke runs a leaf: args are its words after the command path, flags
// included.
type invoke func(ctx context.Context, base globals, args []string, s streams) error

// leaf is one runnable command of the tree.
type leaf struct {
	path  string // the words after engine: "sandbox proc start"
	args  string // the argument synopsis: "ID -- CMD [ARG...]"
	short string
	run   invoke
}

// declaration is the stderr of a declaration pass: a command's flag set
// that writes to it hands itself over in parseInterleaved instead of
// parsing.
type declaration struct {
	io.Writer
	fs *flag.FlagSet
}

// errDeclared ends a declaration pass.
var errDeclared = errors.New("flags declared")

// ranErr marks an error a leaf's function returned, to tell it from
// cobra's own (an unknown flag: a usage error).
type ranErr struct{ err error }

func (e ranErr) Error() string { return e.err.Error() }
func (e ranErr) Unwrap() error { return e.err }

// globalNames are the flags every client command takes (globals.flags);
// the root declares them persistent.
var globalNames = []string{"server", "tenant", "creds", "tls-ca"}

// with adapts a command function to invoke, with words before the leaf's
// arguments (the subcommand the function dispatches on).
func with(f func(ctx context.Context, base globals, args []string, stdout, stderr io.Writer) error, words ...string) invoke {
	return func(ctx context.Context, base globals, args []string, s streams) error {
		return f(ctx, base, append(append([]string{}, words...), args...), s.out, s.err)
	}
}

// sbx is a sandbox subcommand.
func sbx(words ...string) invoke {
	return func(ctx context.Context, base globals, args []string, s streams) error {
		return sandbox(ctx, base, append(append([]string{}, words...), args...), s.in, s.out, s.err)
	}
}

// leaves lists every runnable command, in the order of engine help.
func leaves() []leaf {
	auth := func(sub string) invoke {
		return func(_ context.Context, _ globals, args []string, s streams) error {
			return authCmd(append([]string{sub}, args...), s.out, s.err)
		}
	}
	image := func(sub string) invoke {
		return func(ctx context.Context, _ globals, args []string, s streams) error {
			return imageCmd(ctx, append([]string{sub}, args...), s.out, s.err)
		}
	}
	return []leaf{
		{"serve", "", "run the engine (embedded NATS + a local node)", func(ctx context.Context, _ globals, args []string, s streams) error {
			return serve(ctx, args, s.err)
		}},
		{"sandbox create", "", "create a session; prints its id", sbx("create")},
		{"sandbox exec", "ID [--stream] -- CMD [ARG...]", "run a command; exits with its code", sbx("exec")},
		{"sandbox write", "ID PATH", "write a file from stdin", sbx("write")},
		{"sandbox read", "ID PATH", "read a file to stdout", sbx("read")},
		{"sandbox ls", "ID [PATH]", "list a directory", sbx("ls")},
		{"sandbox rm", "ID PATH", "remove a file or directory", sbx("rm")},
		{"sandbox mkdir", "ID PATH", "make a directory", sbx("mkdir")},
		{"sandbox running", "ID", "whether the sandbox runs", sbx("running")},
		{"sandbox port", "ID PORT", "the address that reaches a port the create exposed", sbx("port")},
		{"sandbox start", "ID", "start a stopped session", sbx("start")},
		{"sandbox stop", "ID [--memory]", "persist the workspace (--memory: with the processes and their memory), then stop", sbx("stop")},
		{"sandbox shutdown", "ID", "shut the session down", sbx("shutdown")},
		{"sandbox delete", "ID", "delete the session", sbx("delete")},
		{"sandbox persist", "ID", "snapshot the workspace; prints the snapshot id", sbx("persist")},
		{"sandbox hydrate", "ID --from FILE.tar|- | --snapshot SNAP", "replace the workspace, all or nothing", sbx("hydrate")},
		{"sandbox checkpoint", "ID [--leave-running]", "snapshot the processes and their memory with the workspace (runsc); prints the snapshot id", sbx("checkpoint")},
		{"sandbox resume", "ID", "bring a stopped, shut down or lost session back", sbx("resume")},
		{"sandbox fork", "ID [-n N] [--from SNAP | --at SEQ]", "fork the session into N children; prints their ids", sbx("fork")},
		{"sandbox diff", "ID [--from SEQ] [--to SEQ]", "paths created, modified, removed between two snapshots", sbx("diff")},
		{"sandbox shell", "ID [-- CMD [ARG...]]", "a terminal in the sandbox; exits with its code", sbx("shell")},
		{"sandbox proc start", "ID -- CMD [ARG...]", "start a process that outlives the call; prints its id", sbx("proc", "start")},
		{"sandbox proc write", "ID PID [TEXT|-]", "write to a process's stdin", sbx("proc", "write")},
		{"sandbox proc read", "ID PID", "read a process's output", sbx("proc", "read")},
		{"sandbox proc list", "ID", "the session's processes", sbx("proc", "list")},
		{"sandbox proc kill", "ID PID", "signal a process", sbx("proc", "kill")},
		{"sandbox proc resize", "ID PID ROWS COLS", "resize a process's terminal", sbx("proc", "resize")},
		{"sandbox list", "", "sessions as the projection has them", sbx("list")},
		{"sandbox inspect", "ID", "one session as the projection has it", sbx("inspect")},
		{"events tail", "", "print the audit trail", with(eventsCmd, "tail")},
		{"events export", "", "the events, one JSON per line", with(eventsCmd, "export")},
		{"events repartition", "--partitions N", "move a one-stream deployment to N partitions (engines and nodes stopped)", with(eventsCmd, "repartition")},
		{"replay", "", "fold the stream from its first event", with(replayCmd)},
		{"audit verify", "", "hash chain, seq, one finish per start", with(auditCmd, "verify")},
		{"projector status", "", "the projector's checkpoint and lag", with(projectorCmd, "status")},
		{"node list", "", "the nodes", with(nodeCmd, "list")},
		{"node cordon", "NODE", "take a node out of placement", with(nodeCmd, "cordon")},
		{"node uncordon", "NODE", "put a node back into placement", with(nodeCmd, "uncordon")},
		{"node drain", "NODE", "cordon, then move its sessions elsewhere", with(nodeCmd, "drain")},
		{"status", "", "servers, streams, nodes, projectors", with(statusCmd)},
		{"snapshot ls", "[SESSION]", "workspace snapshots and their sizes", with(snapshotCmd, "ls")},
		{"snapshot rm", "SESSION SNAPSHOT...|--all | --deleted", "delete snapshots", with(snapshotCmd, "rm")},
		{"gc", "", "one retention sweep of the workspace bucket", with(gcCmd)},
		{"image build-base", "", "build the sandbox base image (needs busybox-static)", image("build-base")},
		{"image build-python", "", "build the sandbox image with Python and git", image("build-python")},
		{"runtime register-gvisor", "", "register gVisor's runsc with the local Docker daemon (as root)", func(ctx context.Context, _ globals, args []string, s streams) error {
			return registerGVisorCmd(ctx, args, s.out, s.err)
		}},
		{"auth add", "ROLE NAME", "add an identity; prints its credentials file", auth("add")},
		{"auth ls", "", "the identities", auth("ls")},
		{"auth creds", "NAME", "print an identity's credentials (--format paddock|nkey|json)", auth("creds")},
		{"auth rm", "NAME", "remove an identity", auth("rm")},
		{"auth server-config", "", "the authorization block of an external server", auth("server-config")},
		{"auth node-keys", "", "{node: public key} of every node", auth("node-keys")},
		{"cluster config", "", "a nats-server config per server of a cluster", with(clusterCmd, "config")},
		{"cluster wait", "", "wait until the servers, streams and nodes are up", with(clusterCmd, "wait")},
		{"cluster balance", "", "spread the event partitions' leaders over the servers", with(clusterCmd, "balance")},
		{"nats-server", "-c FILE", "run a NATS server from a config file (SIGHUP reloads it)", func(ctx context.Context, _ globals, args []string, s streams) error {
			return natsServerCmd(ctx, args, s.err)
		}},
		{"config print", "", "the effective settings of serve and where each came from", configPrintCmd},
		{"mcp", "[--http HOST:PORT --tokens FILE]", "serve sandbox tools over MCP (stdio, or streamable HTTP)", func(ctx context.Context, base globals, args []string, s streams) error {
			return mcpCmd(ctx, base, args, s.in, s.out, s.err)
		}},
	}
}

// declareFlags returns the flags a leaf's function declares, by running
// it as far as its parse (which returns errDeclared): the functions do no
// I/O before they parse.
func declareFlags(l leaf) *flag.FlagSet {
	d := &declaration{Writer: io.Discard}
	// Background: nothing of the declaration pass outlives this call,
	// nor does any I/O.
	_ = l.run(context.Background(), defaultGlobals(), nil, streams{in: strings.NewReader(""), out: io.Discard, err: d})
	if d.fs == nil {
		return flag.NewFlagSet(l.path, flag.ContinueOnError)
	}
	return d.fs
}

// newRoot builds the command tree for one invocation. raw is the whole
// command line: a leaf hands its words (from cobra's Find) to its
// function.
func newRoot(ctx context.Context, raw *[]string, s streams) *cobra.Command {
	root := &cobra.Command{
		Use:           "engine",
		Short:         "Paddock: an event-sourced sandbox engine on NATS",
		Version:       buildinfo.String(),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.ArbitraryArgs,
		RunE:          groupRun,
	}
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)
	root.SetVersionTemplate("engine {{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageErr("%s: %v", c.CommandPath(), err)
	})
	var g globals
	g = defaultGlobals()
	g.flags(root.PersistentFlags())
	root.SetHelpFunc(func(c *cobra.Command, _ []string) {
		if c == root {
			fmt.Fprint(c.OutOrStdout(), usage)
			return
		}
		fmt.Fprintf(c.OutOrStdout(), "engine %s: %s\n\n%s", strings.Join(words(c), " "), c.Short, c.UsageString())
	})
	groups := map[string]*cobra.Command{"": root}
	var group func(path string) *cobra.Command
	group = func(path string) *cobra.Command {
		if c, ok := groups[path]; ok {
			return c
		}
		parentPath, name := "", path
		if i := strings.LastIndex(path, " "); i >= 0 {
			parentPath, name = path[:i], path[i+1:]
		}
		c := &cobra.Command{Use: name, Short: "engine " + path + " commands", Args: cobra.ArbitraryArgs, RunE: groupRun}
		group(parentPath).AddCommand(c)
		groups[path] = c
		return c
	}
	for _, l := range leaves() {
		parentPath, name := "", l.path
		if i := strings.LastIndex(l.path, " "); i >= 0 {
			parentPath, name = l.path[:i], l.path[i+1:]
		}
		declared := declareFlags(l)
		c := &cobra.Command{
			Use:   strings.TrimSpace(name + " " + l.args),
			Short: l.short,
			Args:  cobra.ArbitraryArgs,
		}
		declared.VisitAll(func(f *flag.Flag) {
			if !isGlobal(f.Name) {
				c.Flags().AddFlag(f)
			}
		})
		run := l.run
		c.RunE = func(c *cobra.Command, _ []string) error {
			_, words, err := root.Find(*raw)
			if err != nil {
				return usageErr("%v", err)
			}
			if err := run(ctx, defaultGlobals(), dropGlobals(words, declared), s); err != nil {
				return ranErr{err}
			}
			return nil
		}
		group(parentPath).AddCommand(c)
	}
	version := &cobra.Command{
		Use:   "version",
		Short: "print the version of engine and of the command contract",
		Args:  cobra.NoArgs,
	}
	jsonVersion := version.Flags().Bool("json", false, `print {"version": ..., "commit": ..., "contract": ...}`)
	version.RunE = func(c *cobra.Command, _ []string) error {
		if *jsonVersion {
			return printJSON(c.OutOrStdout(), map[string]string{"version": buildinfo.Version(), "commit": buildinfo.Commit(), "contract": commands.Version})
		}
		fmt.Fprintf(c.OutOrStdout(), "engine %s\n", buildinfo.String())
		return nil
	}
	root.AddCommand(version)
	return root
}

// groupRun serves a group given no command (or an unknown one): a usage
// error, with the group's commands in the order of engine help.
func groupRun(c *cobra.Command, args []string) error {
	path := strings.Join(words(c), " ")
	var names []string
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	if path != "" {
		names = names[:0]
		for _, l := range leaves() {
			if rest, ok := strings.CutPrefix(l.path, path+" "); ok {
				if name, _, _ := strings.Cut(rest, " "); !slices.Contains(names, name) {
					names = append(names, name)
				}
			}
		}
	}
	switch {
	case len(args) > 0 && path == "":
		return usageErr("unknown command %q (see engine help)", args[0])
	case len(args) > 0:
		return usageErr("unknown %s command %q (%s; see engine %s --help)", path, args[0], strings.Join(names, ", "), path)
	}
	return usageErr("%s needs a command: %s (see %s --help)", c.CommandPath(), strings.Join(names, ", "), c.CommandPath())
}

func isGlobal(name string) bool {
	for _, g := range globalNames {
		if g == name {
			return true
		}
	}
	return false
}

// dropGlobals removes from args the global flags (given before the
// command, or among its flags) that the leaf's function does not take:
// cobra accepts them everywhere, as the flag package did before the
// command.
func dropGlobals(args []string, declared *flag.FlagSet) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		name, _, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if strings.HasPrefix(a, "--") && isGlobal(name) && declared.Lookup(name) == nil {
			if !hasValue {
				i++ // the value is the next word
			}
			continue
		}
		out = append(out, a)
	}
	return out
}

// normalizeArgs rewrites the long flags the flag package took with one
// dash (-json, -server=URL) to pflag's two, for the command args name;
// words after "--" stay as they are.
func normalizeArgs(root *cobra.Command, args []string) []string {
	c, _, err := root.Find(args)
	if err != nil {
		return args
	}
	known := func(name string) bool {
		return c.Flags().Lookup(name) != nil || c.InheritedFlags().Lookup(name) != nil || root.PersistentFlags().Lookup(name) != nil
	}
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		if len(a) > 2 && a[0] == '-' && a[1] != '-' && len(name) > 1 && known(name) {
			a = "-" + a
		}
		out = append(out, a)
	}
	return out
}

// words is a command's path without the root: "sandbox proc start".
func words(c *cobra.Command) []string {
	return strings.Fields(strings.TrimPrefix(c.CommandPath(), "engine"))
}
