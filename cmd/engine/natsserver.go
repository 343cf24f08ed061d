package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/paddock-dev/paddock/errcode"
)

// natsServerCmd is `engine nats-server -c FILE`: a NATS server, run in
// this process from a config file (one that `engine cluster config` or
// `engine auth server-config` wrote, or any nats-server config), so that
// a deployment needs nothing but this binary. It logs to stderr (or where
// the config says), stops on SIGINT or SIGTERM (ctx), and reloads the file
// on SIGHUP. A config that does not parse, or a server that cannot start
// (a port in use, a store dir it cannot write), is an error and a non-zero
// exit.
func natsServerCmd(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("nats-server", stderr)
	file := fs.StringP("config", "c", "", "the nats-server config file")
	readyTimeout := fs.Duration("ready-timeout", 30*time.Second, "how long the server may take to accept connections")
	jsonOut := fs.Bool("json", false, "log JSON lines {time, level, msg} on stderr")
	pos, rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if *file == "" || len(pos) > 0 || rest != nil {
		return usageErr("usage: engine nats-server -c FILE")
	}
	opts, err := server.ProcessConfigFile(*file)
	if err != nil {
		return errcode.Wrap(errcode.InvalidRequest, err, "config "+*file)
	}
	// The signals are this command's: SIGINT/SIGTERM end ctx, SIGHUP
	// reloads below.
	opts.NoSigs = true
	ns, err := server.NewServer(opts)
	if err != nil {
		return errcode.Wrap(errcode.InvalidRequest, err, "config "+*file)
	}
	logs := &serverLog{w: stderr, fatal: make(chan string, 1), json: *jsonOut}
	if opts.LogFile != "" || opts.Syslog || opts.RemoteSyslog != "" {
		ns.ConfigureLogger() // where the config says
	} else {
		ns.SetLoggerV2(logs, opts.Debug, opts.Trace, opts.TraceVerbose)
	}
	// SIGHUP is taken before the server starts: one that arrives before
	// the server is ready (its log says ready a moment before) waits in
	// hup instead of killing the process, SIGHUP's default.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// Start returns once the server's own goroutines run; Shutdown stops
	// and waits for them.
	go ns.Start()
	stop := func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
	if err := waitReady(ctx, ns, logs.fatal, *readyTimeout); err != nil {
		stop()
		return err
	}
	for {
		select {
		case <-ctx.Done():
			ns.Noticef("Paddock: stopping on signal")
			stop()
			return nil
		case msg := <-logs.fatal:
			stop()
			return errcode.New(errcode.Unavailable, "nats-server: %s", msg)
		case <-hup:
			// Twice, as docs/security.md says: a reload that creates an
			// account starts that account's service imports only on the
			// next one.
			for range 2 {
				if err := ns.Reload(); err != nil {
					ns.Errorf("Paddock: reload of %s failed, the server keeps its config: %v", *file, err)
					break
				}
			}
		}
	}
}

// waitReady waits until ns accepts connections, a fatal error is logged,
// ctx ends or timeout passes.
func waitReady(ctx context.Context, ns *server.Server, fatal <-chan string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !ns.ReadyForConnections(50 * time.Millisecond) {
		select {
		case msg := <-fatal:
			return errcode.New(errcode.Unavailable, "nats-server: %s", msg)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			return errcode.New(errcode.Unavailable, "nats-server: not accepting connections after %s", timeout)
		}
	}
	return nil
}

// serverLog is a nats-server logger that writes lines to w and hands the
// first fatal error to fatal (nats-server's own logger exits the process
// there; here the command shuts the server down and says why).
type serverLog struct {
	mu    sync.Mutex
	w     io.Writer
	fatal chan string
	json  bool // lines as JSON
}

func (l *serverLog) line(level, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.json {
		_ = printJSONLine(l.w, logLine{Time: formatTime(time.Now()), Level: level, Msg: fmt.Sprintf(format, v...)})
		return
	}
	fmt.Fprintf(l.w, "%s [%s] %s\n", formatTime(time.Now()), level, fmt.Sprintf(format, v...))
}

// Noticef logs a notice.
func (l *serverLog) Noticef(format string, v ...any) { l.line("INF", format, v...) }

// Warnf logs a warning.
func (l *serverLog) Warnf(format string, v ...any) { l.line("WRN", format, v...) }

// Errorf logs an error.
func (l *serverLog) Errorf(format string, v ...any) { l.line("ERR", format, v...) }

// Debugf logs a debug line.
func (l *serverLog) Debugf(format string, v ...any) { l.line("DBG", format, v...) }

// Tracef logs a trace line.
func (l *serverLog) Tracef(format string, v ...any) { l.line("TRC", format, v...) }

// Fatalf logs a fatal error and hands it to the command, which stops.
func (l *serverLog) Fatalf(format string, v ...any) {
	l.line("FTL", format, v...)
	select {
	case l.fatal <- fmt.Sprintf(format, v...):
	default: // the first one is enough
	}
}
