package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"

	flag "github.com/spf13/pflag"

	"github.com/paddock-dev/paddock/cmd/internal/flagconfig"
	"github.com/paddock-dev/paddock/errcode"
)

// configFlag adds --config FILE (env PADDOCK_CONFIG) to serve's flags.
func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", os.Getenv("PADDOCK_CONFIG"), "YAML configuration file: keys are the flag names (env PADDOCK_CONFIG); flags > env PADDOCK_<FLAG> > file > defaults")
}

// applyConfig gives serve's flags the command line left unset their
// values from the environment or the configuration file
// (package flagconfig).
func applyConfig(fs *flag.FlagSet, file string) (flagconfig.Sources, error) {
	src, err := flagconfig.Apply(fs, flagconfig.Config{File: file, Prefix: "PADDOCK_", Skip: []string{"config"}})
	if err != nil {
		return nil, errcode.Wrap(errcode.InvalidRequest, err, "")
	}
	return src, nil
}

// configPrintCmd is `engine config print [--config FILE] [serve's flags]
// [--json]`: serve's effective settings, each with its source.
func configPrintCmd(_ context.Context, _ globals, args []string, s streams) error {
	var serveLeaf leaf
	for _, l := range leaves() {
		if l.path == "serve" {
			serveLeaf = l
		}
	}
	fs := declareFlags(serveLeaf)
	fs.Init("config print", flag.ContinueOnError)
	fs.SetOutput(s.err)
	// serve's --json says how it logs; config print's, how it prints.
	jsonOut := fs.Lookup("json")
	jsonOut.Usage = "print the settings as JSON: [{name, value, source}]"
	pos, rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 || rest != nil {
		return usageErr("config print takes no arguments, only serve's flags")
	}
	file := fs.Lookup("config").Value.String()
	src, err := applyConfig(fs, file)
	if err != nil {
		return err
	}
	if src["config"] == flagconfig.FromDefault && file != "" {
		src["config"] = flagconfig.FromEnv // PADDOCK_CONFIG
	}
	settings := flagconfig.Effective(fs, src, "json")
	if jsonOut.Value.String() == "true" {
		return printJSON(s.out, settings)
	}
	tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
	for _, st := range settings {
		v := st.Value
		if v == "" {
			v = `""`
		}
		if st.Name == "config" && v == `""` {
			v = "(none)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", st.Name, v, st.Source)
	}
	return tw.Flush()
}
