package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	flag "github.com/spf13/pflag"

	"github.com/paddock-dev/paddock/cmd/internal/buildinfo"
	"github.com/paddock-dev/paddock/cmd/internal/flagconfig"
	"github.com/paddock-dev/paddock/commands"
)

// usageError is a command line agent-node cannot take (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// run runs agent-node with args, its help and errors to stderr (the
// tests' entry point).
func run(ctx context.Context, args []string, stderr io.Writer) error {
	return runCLI(ctx, args, stderr, stderr)
}

// applyConfig gives the flags the command line left unset their values
// from the environment (PADDOCK_<FLAG>, and PADDOCK_URL for --nats-url)
// or the configuration file.
func applyConfig(fs *flag.FlagSet, file string) (flagconfig.Sources, error) {
	src, err := flagconfig.Apply(fs, flagconfig.Config{
		File: file, Prefix: "PADDOCK_", Skip: []string{"config"},
		Aliases: map[string]string{"PADDOCK_URL": "nats-url"},
	})
	if err != nil {
		return nil, usageError{err}
	}
	return src, nil
}

// runCLI builds agent-node's command tree for one invocation and runs
// it: the agent itself, version, config print and completion.
func runCLI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := &cobra.Command{
		Use:           "agent-node",
		Short:         "Paddock's node agent: runs the sessions placed on this host",
		Long:          "agent-node connects to the deployment's NATS, registers, and executes the commands of the\nsessions placed on it. SIGTERM or SIGINT drains it (--drain-timeout).\n\nSettings: flags > environment (PADDOCK_<FLAG>, PADDOCK_URL for --nats-url) > --config FILE\n(YAML, keys are the flag names; env PADDOCK_CONFIG) > defaults. See docs/cli.md.",
		Version:       buildinfo.String(),
		Args:          cobra.NoArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("agent-node {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	f := registerFlags(root.Flags())
	root.RunE = func(c *cobra.Command, _ []string) error {
		if _, err := applyConfig(c.Flags(), *f.configFile); err != nil {
			return err
		}
		if err := runNode(ctx, f, stderr); err != nil {
			return runError{err}
		}
		return nil
	}

	version := &cobra.Command{Use: "version", Short: "print the version of agent-node and of the command contract", Args: cobra.NoArgs}
	versionJSON := version.Flags().Bool("json", false, `print {"version": ..., "commit": ..., "contract": ...}`)
	version.RunE = func(c *cobra.Command, _ []string) error {
		if *versionJSON {
			return printJSON(c.OutOrStdout(), map[string]string{"version": buildinfo.Version(), "commit": buildinfo.Commit(), "contract": commands.Version})
		}
		fmt.Fprintf(c.OutOrStdout(), "agent-node %s\n", buildinfo.String())
		return nil
	}
	root.AddCommand(version)

	config := &cobra.Command{Use: "config", Short: "agent-node's configuration"}
	print := &cobra.Command{Use: "print", Short: "the effective settings of agent-node and where each came from", Args: cobra.NoArgs}
	pf := registerFlags(print.Flags())
	print.Flags().Lookup("json").Usage = "print the settings as JSON: [{name, value, source}]"
	print.RunE = func(c *cobra.Command, _ []string) error {
		src, err := applyConfig(c.Flags(), *pf.configFile)
		if err != nil {
			return err
		}
		if src["config"] == flagconfig.FromDefault && *pf.configFile != "" {
			src["config"] = flagconfig.FromEnv // PADDOCK_CONFIG
		}
		settings := flagconfig.Effective(c.Flags(), src, "json")
		if *pf.jsonLog {
			return printJSON(c.OutOrStdout(), settings)
		}
		tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
		for _, s := range settings {
			v := s.Value
			if v == "" {
				v = `""`
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, v, s.Source)
		}
		return tw.Flush()
	}
	config.AddCommand(print)
	root.AddCommand(config)
	err := root.ExecuteContext(ctx)
	var r runError
	var u usageError
	switch {
	case errors.As(err, &r):
		return r.err
	case err != nil && !errors.As(err, &u):
		return usageError{err} // cobra's: an unknown command or argument
	}
	return err
}

// runError is an error of the agent itself, not of its command line.
type runError struct{ err error }

func (e runError) Error() string { return e.err.Error() }
func (e runError) Unwrap() error { return e.err }

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
