package broker

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/paddock-dev/paddock/storage"
)

// serverLog is nats-server's Logger over the engine's slog.Logger: its
// notices at INFO, warnings at WARN, errors and fatal errors at ERROR,
// debug and trace lines at DEBUG (nats-server calls Debugf and Tracef only
// when Config.Debug or Config.Trace asked), each with component=nats-server.
// It also hands every error or warning that carries an out-of-space error
// (storage.OutOfSpace, matched on the error value nats-server passes, not
// on its text) to outOfSpace: that is how the broker learns that a stream's
// file store has stopped writing (its werr) and needs healing.
type serverLog struct {
	l          *slog.Logger
	outOfSpace func(error)
}

var _ server.Logger = (*serverLog)(nil)

func (s *serverLog) log(level slog.Level, format string, v []any) {
	if !s.l.Enabled(context.Background(), level) {
		return
	}
	// nats-server's logger has no context; neither does this line.
	s.l.Log(context.Background(), level, fmt.Sprintf(format, v...), "component", "nats-server")
}

// watch passes the first out-of-space error among v to outOfSpace.
func (s *serverLog) watch(v []any) {
	if s.outOfSpace == nil {
		return
	}
	for _, a := range v {
		if err, ok := a.(error); ok && storage.OutOfSpace(err) {
			s.outOfSpace(err)
			return
		}
	}
}

// Noticef logs at INFO.
func (s *serverLog) Noticef(format string, v ...any) { s.log(slog.LevelInfo, format, v) }

// Warnf logs at WARN.
func (s *serverLog) Warnf(format string, v ...any) {
	s.watch(v)
	s.log(slog.LevelWarn, format, v)
}

// Errorf logs at ERROR.
func (s *serverLog) Errorf(format string, v ...any) {
	s.watch(v)
	s.log(slog.LevelError, format, v)
}

// Fatalf logs at ERROR. nats-server's own logger exits the process here;
// an embedded server must not take the engine down with it, and the
// server shuts itself down after the few fatal errors it has.
func (s *serverLog) Fatalf(format string, v ...any) {
	s.watch(v)
	s.log(slog.LevelError, "fatal: "+format, v)
}

// Debugf logs at DEBUG.
func (s *serverLog) Debugf(format string, v ...any) { s.log(slog.LevelDebug, format, v) }

// Tracef logs at DEBUG, marked as a trace.
func (s *serverLog) Tracef(format string, v ...any) { s.log(slog.LevelDebug, "trace: "+format, v) }
