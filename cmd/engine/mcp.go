package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/cmd/internal/buildinfo"
	"github.com/paddock-dev/paddock/mcpserver"
)

// mcpCmd serves sandbox tools over MCP (package mcpserver): on stdin and
// stdout as the identity of --creds, or with --http on streamable HTTP
// for the identities of a tokens file.
func mcpCmd(ctx context.Context, base globals, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var g globals
	fs := newFlagSet("mcp", stderr)
	g.register(fs, base)
	eventsCreds := fs.String("events-creds", os.Getenv("PADDOCK_EVENTS_CREDS"), "credentials that read events for sandbox_events: an auditor of the tenant, or an admin (env PADDOCK_EVENTS_CREDS; default: --creds, when they may)")
	httpAddr := fs.String("http", "", "serve streamable HTTP on HOST:PORT (path "+mcpserver.Path+") instead of stdio; a loopback address unless --allow-remote")
	tokens := fs.String("tokens", "", "with --http: the tokens file mapping bearer tokens' SHA-256 to credentials files (docs/security.md)")
	remote := fs.Bool("allow-remote", false, "with --http: behind a TLS proxy: any address (tokens travel in clear otherwise), and no check that a request through localhost names localhost as its Host")
	jsonLog := fs.Bool("json", false, "log JSON lines on stderr (log/slog's JSON handler); the protocol itself is always JSON")
	pos, rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 || rest != nil {
		return usageErr("mcp takes no arguments")
	}
	var handler slog.Handler = slog.NewTextHandler(stderr, nil)
	if *jsonLog {
		handler = slog.NewJSONHandler(stderr, nil)
	}
	logger := slog.New(handler)
	mcpserver.Version = buildinfo.Version()
	connect := client.ConnectOptions{URL: g.server, Creds: g.creds, TLSCA: g.tlsCA}
	tenant := ""
	if g.tenantSet {
		tenant = g.tenant
	}
	if *httpAddr == "" {
		if *tokens != "" || *remote {
			return usageErr("--tokens and --allow-remote go with --http")
		}
		d, err := mcpserver.Dial(mcpserver.DialConfig{Connect: connect, Tenant: tenant, EventsCreds: *eventsCreds})
		if err != nil {
			return err
		}
		defer d.Close()
		t := &mcp.IOTransport{Reader: io.NopCloser(stdin), Writer: nopWriteCloser{stdout}}
		return mcpserver.New(d.Identity).Run(ctx, t)
	}
	if *tokens == "" {
		return usageErr("--http needs --tokens FILE: every caller authenticates as a Paddock identity (docs/security.md)")
	}
	addr, err := mcpserver.CheckListen(*httpAddr, *remote)
	if err != nil {
		return err
	}
	tf, err := mcpserver.LoadTokens(*tokens)
	if err != nil {
		return err
	}
	servers := make([]*mcp.Server, len(tf.Tokens))
	for i, e := range tf.Tokens {
		o := connect
		o.Creds = e.Creds
		d, err := mcpserver.Dial(mcpserver.DialConfig{Connect: o, Tenant: e.Tenant, EventsCreds: e.EventsCreds})
		if err != nil {
			return fmt.Errorf("token %d (%s): %w", i+1, e.Creds, err)
		}
		defer d.Close()
		servers[i] = mcpserver.New(d.Identity)
	}
	h, err := mcpserver.HTTPHandler(tf, servers, logger, *remote)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	logger.Info("mcp: serving streamable HTTP", "url", "http://"+ln.Addr().String()+mcpserver.Path, "identities", len(servers))
	return mcpserver.Serve(ctx, mcpserver.NewHTTPServer(h), ln)
}

// nopWriteCloser is stdout for the stdio transport: closing the session
// leaves the process's stdout to the process.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
