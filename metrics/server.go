package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/paddock-dev/paddock/health"
	"github.com/paddock-dev/paddock/listenaddr"
)

// CheckAddr checks a --metrics-addr (listenaddr.Check): the metrics name
// the deployment's nodes and ops, so a host that is not loopback (an
// empty one listens on every interface) is refused unless allowRemote.
func CheckAddr(addr string, allowRemote bool) error {
	return listenaddr.Check("--metrics-addr", addr, allowRemote,
		"the metrics would be readable from the network; add --metrics-allow-remote to serve them there")
}

// Server serves a Metrics registry over HTTP at /metrics, with /healthz
// (the process is alive) and /readyz (its readiness checks, Metrics.Ready)
// beside it. Start it, then Close it.
type Server struct {
	addr   string
	m      *Metrics
	logger *slog.Logger

	mu   sync.Mutex // guards the fields below
	srv  *http.Server
	ln   net.Listener
	done chan struct{} // closed when Serve returns
}

// NewServer returns a server of m's registry on addr (checked by
// CheckAddr before).
func NewServer(addr string, m *Metrics, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Server{addr: addr, m: m, logger: logger}
}

// Start listens on the address and serves in the background until Close.
// It fails if the address cannot be listened on.
func (s *Server) Start(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.addr)
	if err != nil {
		return fmt.Errorf("metrics: listen on %s: %w", s.addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", s.m.Handler())
	mux.Handle("/healthz", health.Healthz())
	mux.Handle("/readyz", s.m.Ready().Readyz())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	s.mu.Lock()
	s.srv, s.ln, s.done = srv, ln, done
	s.mu.Unlock()
	go func() { // ends when Close shuts srv down
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("metrics server stopped", "err", err)
		}
	}()
	s.logger.Info("metrics served", "url", "http://"+ln.Addr().String()+"/metrics")
	return nil
}

// Addr returns the address the server listens on (empty before Start).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Close stops serving, waiting for scrapes in flight within ctx. It is
// safe to call twice.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	srv, done := s.srv, s.done
	s.srv = nil
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	if err != nil {
		_ = srv.Close()
	}
	<-done
	return err
}
