// Package metricsflags registers the Prometheus endpoint flags that
// agent-node and engine serve share (--metrics-addr,
// --metrics-allow-remote), makes the process's metrics.Metrics from them
// and serves it for the fx lifecycle.
package metricsflags

import (
	"log/slog"
	"runtime/debug"

	flag "github.com/spf13/pflag"
	"go.uber.org/fx"

	"github.com/paddock-dev/paddock/cmd/internal/buildinfo"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/metrics"
)

// Flags holds the parsed metrics flags.
type Flags struct {
	addr        string
	allowRemote bool
}

// Register adds the metrics flags to fs.
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.addr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics, e.g. 127.0.0.1:9464 (default: off)")
	fs.BoolVar(&f.allowRemote, "metrics-allow-remote", false, "let --metrics-addr be a non-loopback address (the metrics are served without authentication)")
	return f
}

// Open returns the process's metrics, or nil when --metrics-addr is not
// set. A bad address is invalid_request (metrics.CheckAddr).
func (f *Flags) Open() (*metrics.Metrics, error) {
	if f.addr == "" {
		if f.allowRemote {
			return nil, errcode.New(errcode.InvalidRequest, "--metrics-allow-remote needs --metrics-addr")
		}
		return nil, nil
	}
	if err := metrics.CheckAddr(f.addr, f.allowRemote); err != nil {
		return nil, err
	}
	m := metrics.New()
	if err := m.BuildInfo(buildinfo.Version(), revision()); err != nil {
		return nil, err
	}
	return m, nil
}

// revision is the VCS commit the binary was built from ("" when the build
// did not stamp one: go build -buildvcs=false, or outside a checkout).
func revision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			return s.Value
		}
	}
	return ""
}

// Serve serves m on --metrics-addr from the start of lc to its stop; it
// does nothing for a nil m.
func (f *Flags) Serve(lc fx.Lifecycle, m *metrics.Metrics, logger *slog.Logger) {
	if m == nil {
		return
	}
	srv := metrics.NewServer(f.addr, m, logger)
	lc.Append(fx.Hook{OnStart: srv.Start, OnStop: srv.Close})
}
