package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/paddock-dev/paddock/listenaddr"
)

// CheckListen checks a --console-addr (listenaddr.Check): a loopback
// HOST:PORT, or any address with remote set (behind a TLS proxy: tokens
// and cookies cross the wire in clear otherwise).
func CheckListen(addr string, remote bool) error {
	return listenaddr.Check("--console-addr", addr, remote,
		"the console over plain HTTP sends tokens and cookies in clear; serve on 127.0.0.1 behind a TLS proxy, or pass --console-allow-remote")
}

// Server serves a Handler on an address from Start to Close.
type Server struct {
	addr   string
	h      http.Handler
	logger *slog.Logger
	srv    *http.Server
	ln     net.Listener
	cancel context.CancelFunc
	done   chan struct{}
}

// NewServer returns a server of h on addr (see CheckListen).
func NewServer(addr string, h http.Handler, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Server{addr: addr, h: h, logger: logger}
}

// Start listens and serves in the background; it fails when it cannot
// listen.
func (s *Server) Start(context.Context) error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("console: listen %s: %w", s.addr, err)
	}
	// The requests' base context outlives Start's: Close cancels it, so
	// that live tails end before Shutdown waits for them.
	base, cancel := context.WithCancel(context.Background())
	s.ln, s.cancel, s.done = ln, cancel, make(chan struct{})
	s.srv = &http.Server{Handler: s.h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute,
		BaseContext: func(net.Listener) context.Context { return base }}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("console: serve", "err", err)
		}
	}()
	s.logger.Info("console: serving", "url", "http://"+ln.Addr().String()+"/")
	return nil
}

// Addr is the address the server listens on (after Start).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close ends the live tails, then shuts the server down within ctx. It is
// safe to call twice, and before Start.
func (s *Server) Close(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	s.cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}
