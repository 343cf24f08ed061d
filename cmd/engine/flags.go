package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/paddock-dev/paddock/errcode"
)

// globals are the flags every CLI command takes.
type globals struct {
	server string
	tenant string
}

// defaultGlobals returns the global flags' values from the environment.
func defaultGlobals() globals {
	return globals{
		server: envOr("PADDOCK_URL", "nats://127.0.0.1:4222"),
		tenant: envOr("PADDOCK_TENANT", "default"),
	}
}

// parseLeadingGlobals parses global flags given before the command
// (engine --server URL sandbox ...), docker style, and returns them and the
// remaining arguments.
func parseLeadingGlobals(args []string) (globals, []string, error) {
	g := defaultGlobals()
	fs := flag.NewFlagSet("engine", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run prints the usage on -h and the error otherwise
	fs.StringVar(&g.server, "server", g.server, "NATS URL of the Paddock deployment (env PADDOCK_URL)")
	fs.StringVar(&g.tenant, "tenant", g.tenant, "tenant (env PADDOCK_TENANT)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return g, nil, err
		}
		return g, nil, errcode.New(errcode.InvalidRequest, "%v", err)
	}
	return g, fs.Args(), nil
}

// register adds the global flags to a command's flag set, defaulting to
// base (the environment and any flags given before the command).
func (g *globals) register(fs *flag.FlagSet, base globals) {
	*g = base
	fs.StringVar(&g.server, "server", g.server, "NATS URL of the Paddock deployment (env PADDOCK_URL)")
	fs.StringVar(&g.tenant, "tenant", g.tenant, "tenant (env PADDOCK_TENANT)")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// parseInterleaved parses flags that may stand before, between or after
// positional arguments, docker style. Everything after a bare "--" is
// returned as rest, unparsed.
func parseInterleaved(fs *flag.FlagSet, args []string) (pos, rest []string, err error) {
	for i, a := range args {
		if a == "--" {
			rest = args[i+1:]
			if rest == nil {
				rest = []string{}
			}
			args = args[:i]
			break
		}
	}
	// The flag package prints the usage on every parse error; print it only
	// when asked for (-h), so that an error is one "error: ..." line.
	out := fs.Output()
	var usage bytes.Buffer
	fs.SetOutput(&usage)
	defer fs.SetOutput(out)
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				_, _ = out.Write(usage.Bytes())
				return nil, nil, err
			}
			return nil, nil, errcode.New(errcode.InvalidRequest, "%s: %v", fs.Name(), err)
		}
		if fs.NArg() == 0 {
			return pos, rest, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// kvFlag collects repeated K=V flags.
type kvFlag map[string]string

func (f kvFlag) String() string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func (f kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want K=V, got %q", s)
	}
	f[k] = v
	return nil
}
