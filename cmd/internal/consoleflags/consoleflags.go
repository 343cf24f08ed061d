// Package consoleflags registers engine serve's web console flags
// (--console-addr, --console-tokens, --console-allow-remote) and serves
// the console (package console) for the fx lifecycle.
package consoleflags

import (
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"
	flag "github.com/spf13/pflag"
	"go.uber.org/fx"

	"github.com/paddock-dev/paddock/console"
	"github.com/paddock-dev/paddock/errcode"
)

// Flags holds the parsed console flags.
type Flags struct {
	addr, tokens string
	allowRemote  bool
}

// Register adds the console flags to fs.
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.addr, "console-addr", "", "serve the read-only web console at http://ADDR/, e.g. 127.0.0.1:8480 (default: off); a loopback address unless --console-allow-remote")
	fs.StringVar(&f.tokens, "console-tokens", "", "with --console-addr: the tokens file mapping console tokens' SHA-256 to credentials files (the format of engine mcp --tokens; docs/security.md)")
	fs.BoolVar(&f.allowRemote, "console-allow-remote", false, "with --console-addr: any address (behind a TLS proxy: tokens and cookies travel in clear otherwise)")
	return f
}

// Check refuses flags that do not go together, and a non-loopback
// address without --console-allow-remote (invalid_request).
func (f *Flags) Check() error {
	if f.addr == "" {
		if f.tokens != "" || f.allowRemote {
			return errcode.New(errcode.InvalidRequest, "--console-tokens and --console-allow-remote go with --console-addr")
		}
		return nil
	}
	if f.tokens == "" {
		return errcode.New(errcode.InvalidRequest, "--console-addr needs --console-tokens FILE: every viewer authenticates as a Paddock identity (docs/security.md)")
	}
	return console.CheckListen(f.addr, f.allowRemote)
}

// Serve serves the console on --console-addr from the start of lc to its
// stop, reading through js and trusting the node keys of the auth store
// in authDir; it does nothing without --console-addr.
func (f *Flags) Serve(lc fx.Lifecycle, js jetstream.JetStream, authDir string, logger *slog.Logger) error {
	if f.addr == "" {
		return nil
	}
	tokens, err := console.LoadTokens(f.tokens)
	if err != nil {
		return err
	}
	h, err := console.NewHandler(console.NewReader(js, authDir), console.Config{Tokens: tokens}, logger)
	if err != nil {
		return err
	}
	srv := console.NewServer(f.addr, h, logger)
	lc.Append(fx.Hook{OnStart: srv.Start, OnStop: srv.Close})
	return nil
}
