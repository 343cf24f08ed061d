package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/paddock-dev/paddock/listenaddr"
)

// HTTP limits of the streamable HTTP transport.
const (
	// MaxBodyBytes bounds a request body: a sandbox_write of MaxFileBytes
	// as base64 (4/3 of it) and the JSON around it fit, more is refused
	// with 413 before it is decoded.
	MaxBodyBytes = 1 << 20
	// SessionIdle closes an MCP session no request has used for this long.
	SessionIdle = 30 * time.Minute
	// Path is where the MCP endpoint is served.
	Path = "/mcp"
)

// HTTPHandler serves the streamable HTTP transport for several
// identities: a request must carry "Authorization: Bearer TOKEN" with a
// token whose digest names identity i of servers (the index of its entry
// in the tokens file), and runs on servers[i]: that identity's tools on
// its own NATS connection. A request without a token, or with one no
// entry names, is refused with 401; an MCP session belongs to the token
// that opened it (another token's requests on it are refused with 403,
// by the SDK's session check). Bodies over MaxBodyBytes are refused with
// 413; requests through a localhost address with another Host header
// (DNS rebinding) with 403, unless proxied: a TLS proxy on the same host
// forwards the public host name.
func HTTPHandler(tokens TokensFile, servers []*mcp.Server, logger *slog.Logger, proxied bool) (http.Handler, error) {
	if len(servers) != len(tokens.Tokens) {
		return nil, fmt.Errorf("mcpserver: %d servers for %d tokens", len(servers), len(tokens.Tokens))
	}
	set, err := newTokenSet(tokens)
	if err != nil {
		return nil, err
	}
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		i := set.match(token)
		if i < 0 {
			return nil, fmt.Errorf("%w: unknown token", auth.ErrInvalidToken)
		}
		// UserID binds the MCP sessions the token opens to it.
		return &auth.TokenInfo{UserID: strconv.Itoa(i)}, nil
	}
	mcpHandler := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		ti := auth.TokenInfoFromContext(r.Context())
		if ti == nil {
			return nil // unreachable behind RequireBearerToken: a 400
		}
		i, err := strconv.Atoi(ti.UserID)
		if err != nil || i < 0 || i >= len(servers) {
			return nil
		}
		return servers[i]
	}, &mcp.StreamableHTTPOptions{
		MaxRequestBodyBytes:        MaxBodyBytes,
		DisableLocalhostProtection: proxied,
		SessionTimeout:             SessionIdle,
		Logger:                     logger,
	})
	mux := http.NewServeMux()
	mux.Handle(Path, mcpHandler)
	return auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(mux), nil
}

// NewHTTPServer returns an http.Server for h with bounds on every phase
// of a request: headers within 10s and 64 KiB, a body within a minute,
// a response (a tool call's result, or an event stream before the client
// reconnects) within 15 minutes, idle keep-alive connections closed after
// two.
func NewHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		WriteTimeout:      15 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

// CheckListen refuses an address that is not loopback unless remote is
// set: the transport is plain HTTP, so bearer tokens would cross the
// network in clear (put a TLS proxy in front and pass remote). An empty
// host is 127.0.0.1. It returns the address to listen on.
func CheckListen(addr string, remote bool) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err == nil && host == "" {
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	if err := listenaddr.Check("--http", addr, remote,
		"MCP over plain HTTP sends bearer tokens in clear; serve on 127.0.0.1 behind a TLS proxy, or pass --allow-remote"); err != nil {
		return "", err
	}
	return addr, nil
}

// Serve serves srv on ln until ctx ends, then shuts it down, waiting up to
// 5s for requests in flight before it closes the rest.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }() // ends with Shutdown or Close below
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// The serve context is done: shut down with a bound of its own.
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
